"""Writing a run to a folder (app/hookscope/core/outputs/export.py): the archives np.savez would write, every hook kind, one manifest."""

import json
import zipfile

import numpy as np
import pytest
import torch

from hookscope.core.common.vocabulary import KINDS, word_of
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.run import run_image
from hookscope.core.engine.tree import module_tree
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import Preprocess
from hookscope.core.outputs.export import ARCHIVES, picture_folder, save_npz, write_run


def sample_arrays():
    rng = np.random.default_rng(0)
    maps = torch.from_numpy(rng.normal(size=(1, 8, 5, 6)).astype(np.float32))
    return {
        "layer1.0.conv1": maps.numpy(),
        "layer1.0.relu#1": maps.contiguous(memory_format=torch.channels_last).numpy(),  # neither C- nor F-ordered
        "encoder/0": np.asfortranarray(rng.normal(size=(4, 3))),
        "(model)": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float16),
        "mask": np.array([True, False, True]),
        "big-endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "complex": np.array([1 + 2j], dtype=np.complex64),
        "objects": np.array([None, 1], dtype=object),
    }


def test_save_npz_writes_what_np_savez_writes(tmp_path):
    arrays = sample_arrays()
    np.savez(tmp_path / "numpy.npz", **arrays)
    save_npz(tmp_path / "ours.npz", arrays)
    with zipfile.ZipFile(tmp_path / "numpy.npz") as theirs, zipfile.ZipFile(tmp_path / "ours.npz") as ours:
        assert ours.namelist() == theirs.namelist() == [f"{key}.npy" for key in arrays]
        for name in theirs.namelist():
            a, b = theirs.getinfo(name), ours.getinfo(name)
            assert ours.read(name) == theirs.read(name), name  # the same .npy bytes, header included
            assert (b.CRC, b.file_size, b.compress_type, b.extra) == (a.CRC, a.file_size, a.compress_type, a.extra)
    assert (tmp_path / "ours.npz").stat().st_size == (tmp_path / "numpy.npz").stat().st_size
    with np.load(tmp_path / "ours.npz", allow_pickle=True) as archive:
        for key, value in arrays.items():
            assert archive[key].dtype == value.dtype
            np.testing.assert_array_equal(archive[key], value)


@pytest.fixture(scope="module")
def small_resnet():
    loaded = load_model("resnet18", "none", seed=0)
    loaded.preprocess = Preprocess(resize=72, crop=64, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    return loaded


def test_every_hook_kind_has_an_archive_and_pictures(small_resnet, tmp_path):
    assert set(ARCHIVES) == set(KINDS)
    kinds = tuple(kind for kind in KINDS if kind != "attention")  # a ResNet has no attention module
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with HookRegistry(small_resnet.module) as registry:
        for kind in kinds:
            registry.add("layer1.0.conv1", kind)
            registry.add("layer2", kind)
        result = run_image(small_resnet, registry, x)
    manifest = write_run(result, small_resnet, tmp_path, image="x", kinds=kinds, png=True)
    # the manifest says the vocabulary's words (act, grad...), the files are named by it (gradients.npz)
    assert manifest["archives"] == {word_of(kind): ARCHIVES[kind] for kind in kinds}
    assert manifest["hook_kinds"] == [word_of(kind) for kind in kinds]
    with np.load(tmp_path / "input_gradients.npz") as archive:
        assert sorted(archive.files) == ["layer1.0.conv1", "layer2"]
        grad_in = next(r for r in result.records if r.kind == "grad_input" and r.key == "layer2")
        np.testing.assert_array_equal(archive["layer2"], grad_in.tensor.numpy())
        assert archive["layer2"].shape == (1, 64, 16, 16)  # the gradient of layer2's input, layer1's output
    for kind in kinds:
        assert (tmp_path / picture_folder(kind) / "layer2.png").is_file(), kind
    methods = {r["kind"]: r["method"] for r in manifest["modules"]["layer2"]["records"]}
    assert methods["grad_in"] == "register_full_backward_hook"


def test_the_manifest_is_written_once_with_the_extra_entries(small_resnet, tmp_path):
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with HookRegistry(small_resnet.module) as registry:
        registry.add("layer1", "forward")
        result = run_image(small_resnet, registry, x)
    plain = write_run(result, small_resnet, tmp_path / "plain", image="x", kinds=("forward",), png=False)
    tree = module_tree(small_resnet.module)
    extra = {"edits": ["zero:conv1:3"]}
    given = write_run(
        result, small_resnet, tmp_path / "given", image="x", kinds=("forward",), png=False, tree=tree, extra=extra
    )
    on_disk = json.loads((tmp_path / "given" / "manifest.json").read_text())
    assert on_disk == given == {**plain, **extra}
