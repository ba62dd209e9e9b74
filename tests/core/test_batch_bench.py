"""The batch bench's three sides: the floor exports the same arrays as the batch, the rounds rotate fairly, and the
printed lines hold the three ratios. No timing is asserted."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from hookscope.core.bench.batch import (
    SIDES,
    FloorExport,
    _batch_pass,
    _floor_pass,
    batch_benchmark,
    folder_bytes,
    round_orders,
    write_test_images,
)
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.tree import survey
from hookscope.core.models.images import read_image
from hookscope.core.outputs.batch import find_images, folder_names

# conv1: one call; layer3.0.relu: in place and called twice (gradients arrive last call first).
MODULES = ["conv1", "layer3.0.relu"]


@pytest.fixture(scope="module")
def both_exports(tmp_path_factory):
    """4 images exported by the batch and by the floor (forward + backward hooks on MODULES), in one folder each."""
    from hookscope.core.models.catalogue import load_model

    work = tmp_path_factory.mktemp("batch-bench")
    write_test_images(work / "images", 4)
    images = find_images(work / "images")
    loaded = load_model("resnet18", "none", 0)
    plan = [(path, kind) for path in MODULES for kind in ("forward", "backward")]
    names = dict(zip(images, folder_names(images, work / "images")))
    known = survey(loaded.module, loaded.preprocess.to_tensor(read_image(images[0])).requires_grad_(True))
    with HookRegistry(loaded.module) as registry:
        _batch_pass(loaded, registry, plan, images, work / "images", work / "batch")
    floor = FloorExport(loaded, known, plan, names, work / "floor")
    _floor_pass(floor, images)
    return work, list(names.values()), loaded


def _arrays(path):
    if path.suffix == ".npy":
        return {"": np.load(path)}
    with np.load(path) as archive:
        return {key: archive[key] for key in archive.files}


def test_the_floor_writes_the_arrays_the_batch_writes(both_exports):
    work, names, _ = both_exports
    assert len(names) == 4
    for name in names:
        batch_files = {p.name for p in (work / "batch" / name).iterdir() if p.suffix in (".npy", ".npz")}
        floor_files = {p.name for p in (work / "floor" / name).iterdir()}
        assert batch_files == floor_files == {"input.npy", "input_grad.npy", "activations.npz", "output_gradients.npz"}
        for file in sorted(batch_files):
            batch, floor = _arrays(work / "batch" / name / file), _arrays(work / "floor" / name / file)
            assert batch.keys() == floor.keys(), file
            for key in batch:
                assert batch[key].dtype == floor[key].dtype and np.array_equal(batch[key], floor[key]), (file, key)
        with np.load(work / "floor" / name / "output_gradients.npz") as gradients:
            assert sorted(gradients.files) == ["conv1", "layer3.0.relu", "layer3.0.relu#1"]


def test_the_floor_writes_uncompressed_archives_of_about_the_batch_s_bytes(both_exports):
    work, names, _ = both_exports
    for name in names:
        with zipfile.ZipFile(work / "floor" / name / "activations.npz") as archive:
            assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}
    arrays = sum(
        folder_bytes(work / "batch" / n) - (work / "batch" / n / "manifest.json").stat().st_size for n in names
    )
    arrays -= sum((work / "batch" / n / "done.json").stat().st_size for n in names)
    assert abs(folder_bytes(work / "floor") - arrays) <= 0.001 * arrays  # the same arrays; only zip headers differ


def test_the_floor_leaves_no_hook_behind(both_exports, hook_counts):
    _, _, loaded = both_exports
    assert all(counts == (0, 0, 0, 0) for counts in hook_counts(loaded.module).values())


def test_each_side_goes_first_in_turn_in_both_cyclic_orders():
    orders = round_orders(12)
    assert all(sorted(order) == sorted(SIDES) for order in orders)
    assert [order[0] for order in orders] == list(SIDES) * 4
    assert len(set(orders)) == 6  # every order: each side follows each other side as often


@pytest.mark.slow  # three sides of a real bench (about 30 s); its pieces are tested above
def test_the_result_holds_three_sides(tmp_path):
    result = batch_benchmark(4, MODULES, chunk=2, folder=tmp_path)
    assert result.images == 4 and result.modules == MODULES and len(result.rounds) == 2
    assert all(len(r) == 3 and min(r) > 0 for r in result.rounds)
    assert result.bare_s == pytest.approx(sum(r[0] for r in result.rounds))
    assert result.floor_s == pytest.approx(sum(r[1] for r in result.rounds))
    assert result.batch_s == pytest.approx(sum(r[2] for r in result.rounds))
    assert result.above_floor == pytest.approx(result.ratio / result.floor_ratio)
    assert len(result.round_ratios) == len(result.round_floor_ratios) == len(result.round_above_floor) == 2
    # the batch adds its manifests, done.json files and summary.csv to the same arrays
    assert result.floor_bytes < result.batch_bytes < 1.05 * result.floor_bytes
    assert list(tmp_path.iterdir()) == []  # the work folder is gone


def test_the_printed_lines_hold_the_three_sides_and_ratios(capsys):
    from hookscope.cli import main

    assert main(["bench", "--batch", "--images", "2", "--layers", ",".join(MODULES)]) == 0
    out = capsys.readouterr().out
    assert "modules hooked (forward+backward): conv1, layer3.0.relu" in out
    assert "resnet18, 2 images, 2 modules, PNGs off" in out
    assert "bare " in out and "floor (plain PyTorch hooks + np.savez) " in out and "batch " in out
    for label in ("batch/bare", "floor/bare", "batch/floor"):
        assert f"{label} " in out.splitlines()[2]  # the ratios of all images
        assert f"  {label} median " in out  # and per round
    assert "wrote: batch " in out and ", floor " in out
