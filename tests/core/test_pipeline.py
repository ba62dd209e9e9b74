"""The one core pipeline (open a model from any source, run an image) and the fields errors carry, so that a caller
routes a failure without reading its text. Real parts: torchvision's ResNet-18 with random weights, real files."""

import copy
import pickle
import sys
import textwrap

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from hookscope.core.common.errors import HookscopeError, ImageError, ModelError, RunError
from hookscope.core.engine.devices import available_devices, unavailable_devices
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.interventions import other_images, parse_edit
from hookscope.core.engine.objectives import class_label
from hookscope.core.engine.run import run_image
from hookscope.core.models.catalogue import default_weights_file
from hookscope.core.models.files import ArchitectureRequired, TrustRequired
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.outputs.session import load_session, model_entry, save_session, session_from
from hookscope.core.pictures.cam import run_grad_cam

IMAGENET = torchvision.models.ResNet18_Weights.DEFAULT.meta["categories"]


@pytest.fixture
def loaded(resnet18_loaded):
    """A fresh copy of the untrained ResNet-18 (seed 0), so no test's hooks leak into another's."""
    return copy.deepcopy(resnet18_loaded)


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    pixels = np.random.default_rng(0).integers(0, 256, (80, 100, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture
def not_an_image(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("this is text, not a picture")
    return path


# ---- opening a model ------------------------------------------------------------------------------------------
def test_random_catalogue_weights_still_name_imagenet_classes_and_say_they_are_random():
    loaded = open_model(ModelSource("resnet18", weights="none", seed=2))
    assert loaded.categories == IMAGENET and loaded.categories[281] == "tabby"
    assert not loaded.pretrained and loaded.weights_text == "Random weights (seed 2)"
    assert torch.equal(
        loaded.module.conv1.weight, open_model(ModelSource("resnet18", seed=2)).module.conv1.weight
    )  # the seed decides the weights


@pytest.mark.skipif(default_weights_file("resnet18").is_file(), reason="pretrained weights are cached here")
def test_missing_pretrained_weights_read_as_random_weights():
    loaded = open_model(ModelSource("resnet18", weights="default", seed=0))
    assert not loaded.pretrained and loaded.weights_text == "Random weights (seed 0)"
    assert "not in the torch hub cache" in loaded.notice and loaded.categories[281] == "tabby"


def test_untrained_resnet_predicts_named_classes(loaded, photo):
    with HookRegistry(loaded.module) as registry:
        result = run_image(loaded, registry, photo)
    assert len(result.top5) == 5
    assert all(p.label == IMAGENET[p.index] for p in result.top5)
    assert not any(p.label.startswith("class ") for p in result.top5)


def test_run_image_takes_a_file_a_picture_or_a_tensor_alike(loaded, photo):
    with HookRegistry(loaded.module) as registry:
        registry.add("layer1.0.conv1", "forward")
        from_file = run_image(loaded, registry, photo)
        from_picture = run_image(loaded, registry, Image.open(photo).convert("RGB"))
        from_tensor = run_image(loaded, registry, from_file.input)
    assert torch.equal(from_file.input, from_picture.input) and torch.equal(from_file.input, from_tensor.input)
    assert torch.equal(from_file.scores, from_tensor.scores)
    assert torch.equal(from_file.records[0].tensor, from_picture.records[0].tensor)


def test_class_label_falls_back_to_the_index_past_the_names():
    assert class_label(281, IMAGENET) == "tabby"
    assert class_label(1500, IMAGENET) == "class 1500" and class_label(3, None) == "class 3"


def test_a_state_dict_file_asks_for_its_architecture_then_opens_with_it(tmp_path):
    path = tmp_path / "finetuned.pth"
    torch.manual_seed(5)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    source = ModelSource(file=path)
    assert source.label == "finetuned.pth" and source.file == str(path)
    with pytest.raises(ArchitectureRequired) as asked:
        open_model(source)
    assert asked.value.path == str(path) and asked.value.keys > 100
    loaded = open_model(source.with_arch("resnet18"), hash_file=True)
    assert loaded.source == "state_dict" and loaded.name == "resnet18" and loaded.pretrained
    assert loaded.weights_text == "File: finetuned.pth" and loaded.categories is None  # the file's classes: unknown
    assert len(loaded.model_sha256) == 64 and model_entry(loaded)["sha256"] == loaded.model_sha256


def test_a_pickled_model_asks_for_trust_then_opens_trusted(tmp_path):
    path = tmp_path / "whole.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten()), path)
    source = ModelSource(file=str(path))
    with pytest.raises(TrustRequired) as asked:
        open_model(source)
    assert asked.value.path == str(path) and any("Conv2d" in o for o in asked.value.objects)
    loaded = open_model(source.trusted())
    assert loaded.source == "pickle" and loaded.weights_text == "File: whole.pt"


def test_a_python_factory_with_a_weights_file(tmp_path):
    (tmp_path / "net.py").write_text(
        textwrap.dedent(
            """
            import torch
            def build():
                return torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
            """
        )
    )
    spec = f"{tmp_path / 'net.py'}:build"
    built = open_model(ModelSource(file=spec, trust=True, seed=4))
    assert built.weights_text == "Built by net:build (seed 4)" and ModelSource(file=spec).label == "net.py:build"
    torch.save(built.module.state_dict(), tmp_path / "net-weights.pth")
    with_weights = open_model(ModelSource(file=spec, trust=True, weights=str(tmp_path / "net-weights.pth")))
    assert with_weights.weights_text == "File: net-weights.pth"
    assert torch.equal(with_weights.module[0].weight, built.module[0].weight)


def test_an_architecture_without_a_file_is_a_programming_error():
    with pytest.raises(ValueError):
        ModelSource("resnet18", arch="resnet18")


def test_a_session_source_opens_the_same_model_with_its_preprocessing(tmp_path, loaded, photo):
    loaded.preprocess = type(loaded.preprocess)(resize=80, crop=64, mean=(0.5,) * 3, std=(0.25,) * 3)
    loaded.seed = 0
    save_session(session_from(loaded, [("conv1", "forward")], [photo]), tmp_path / "s.hookscope.json")
    session, problems = load_session(tmp_path / "s.hookscope.json")
    assert problems == []
    source = ModelSource.from_session(session)
    assert (source.name, source.weights, source.seed, source.file) == ("resnet18", "none", 0, None)
    reopened = open_model(source)
    assert reopened.preprocess == loaded.preprocess
    assert torch.equal(reopened.module.fc.weight, loaded.module.fc.weight)


# ---- errors carry fields ---------------------------------------------------------------------------------------
def test_an_unreadable_image_names_its_path(loaded, not_an_image):
    with HookRegistry(loaded.module) as registry, pytest.raises(ImageError) as failed:
        run_image(loaded, registry, not_an_image)
    assert failed.value.path == str(not_an_image) and failed.value.edit_spec is None
    assert str(failed.value).startswith(f"Cannot read '{not_an_image}'")  # the message is unchanged


def test_a_channel_edit_that_cannot_work_names_its_spec_and_module(loaded, photo):
    with HookRegistry(loaded.module) as registry:
        edit = parse_edit("zero:layer1.0.conv1:99")
        registry.add_edit(edit)
        with pytest.raises(RunError) as failed:
            run_image(loaded, registry, photo)
    assert failed.value.edit_spec == "zero:layer1.0.conv1:99" and failed.value.module_path == "layer1.0.conv1"
    assert str(failed.value) == "layer1.0.conv1 has 64 channels; channel 99 does not exist."


def test_a_full_backward_edit_behind_an_in_place_op_names_its_spec(loaded, photo):
    with HookRegistry(loaded.module) as registry:
        registry.add_edit(parse_edit("scale-grad-input:bn1:2"))
        with pytest.raises(RunError) as failed:
            run_image(loaded, registry, photo)
    assert failed.value.edit_spec == "scale-grad-input:bn1:2" and failed.value.module_path == "bn1"


def test_a_mix_edit_whose_other_image_is_unreadable_names_the_image_and_the_edit(loaded, not_an_image):
    edit = parse_edit(f"mix:layer2:0.5:{not_an_image}")
    with pytest.raises(ImageError) as failed:
        other_images([edit], loaded.preprocess)
    assert failed.value.path == str(not_an_image) and failed.value.edit_spec == edit.spec
    assert failed.value.module_path == "layer2"


def test_a_mix_edit_run_without_its_other_image_names_the_edit(loaded, photo):
    with HookRegistry(loaded.module) as registry:
        edit = parse_edit(f"mix:layer2:0.5:{photo}")
        registry.add_edit(edit)
        with pytest.raises(RunError) as failed:
            run_image(loaded, registry, photo)  # others not given
        result = run_image(loaded, registry, photo, others=other_images([edit], loaded.preprocess))
    assert failed.value.edit_spec == edit.spec and failed.value.module_path == "layer2"
    assert result.scores is not None


def test_a_module_the_model_lacks_is_named(loaded):
    with HookRegistry(loaded.module) as registry:
        with pytest.raises(HookscopeError) as hooked:
            registry.add("layer9.conv", "forward")
        with pytest.raises(HookscopeError) as edited:
            registry.add_edit(parse_edit("zero:layer9.conv:1"))
    assert hooked.value.module_path == "layer9.conv" and hooked.value.edit_spec is None
    assert edited.value.module_path == "layer9.conv" and edited.value.edit_spec == "zero:layer9.conv:1"


def test_grad_cam_failures_name_the_module(loaded, photo):
    with HookRegistry(loaded.module) as registry:
        registry.add("layer4", "forward")  # no gradient
        registry.add("fc", "forward")
        registry.add("fc", "tensor")
        result = run_image(loaded, registry, photo)
    with pytest.raises(HookscopeError) as untied:
        run_grad_cam(result, "layer4")
    with pytest.raises(HookscopeError) as flat:
        run_grad_cam(result, "fc")  # (1, 1000): no spatial map
    assert untied.value.module_path == "layer4" and "tick both" in str(untied.value)
    assert flat.value.module_path == "fc" and "spatial output" in str(flat.value)


def test_a_bad_edit_spec_is_named():
    with pytest.raises(HookscopeError) as failed:
        parse_edit("zero:layer1:x")
    assert failed.value.edit_spec == "zero:layer1:x"


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit is deprecated, and still what users have
def test_model_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "gone.pth"
    with pytest.raises(ModelError) as failed:
        open_model(ModelSource(file=missing))
    assert failed.value.path == str(missing)

    scripted = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), scripted)
    with pytest.raises(ModelError) as failed:
        open_model(ModelSource(file=scripted))
    assert failed.value.path == str(scripted) and "TorchScript" in str(failed.value)

    wrong = tmp_path / "linear.pth"
    torch.save(torch.nn.Linear(2, 2).state_dict(), wrong)
    with pytest.raises(ModelError) as failed:
        open_model(ModelSource(file=wrong, arch="resnet18"))
    assert failed.value.path == str(wrong) and "does not fit resnet18" in str(failed.value)

    with pytest.raises(ModelError) as failed:  # a weights file for a catalogue model
        open_model(ModelSource("resnet18", weights=str(wrong)))
    assert failed.value.path == str(wrong)

    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01 not a torch file")
    with pytest.raises(ModelError) as failed:
        open_model(ModelSource("resnet18", weights=str(garbage)))
    assert failed.value.path == str(garbage)


def test_a_session_whose_model_file_moved_names_the_file(tmp_path, photo):
    weights = tmp_path / "w.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), weights)
    loaded = open_model(ModelSource(file=weights, arch="resnet18"))
    save_session(session_from(loaded, [], [photo]), tmp_path / "s.hookscope.json")
    weights.unlink()
    session, _ = load_session(tmp_path / "s.hookscope.json")
    with pytest.raises(ModelError) as failed:
        ModelSource.from_session(session)
    assert failed.value.path == str(weights) and "was not found" in str(failed.value)


def test_a_missing_session_file_is_named(tmp_path):
    with pytest.raises(HookscopeError) as failed:
        load_session(tmp_path / "nowhere.hookscope.json")
    assert failed.value.path == str(tmp_path / "nowhere.hookscope.json")


def test_fields_survive_pickling():
    error = pickle.loads(pickle.dumps(RunError("failed", edit_spec="zero:conv1:3", module_path="conv1")))
    assert (str(error), error.edit_spec, error.module_path, error.path) == ("failed", "zero:conv1:3", "conv1", None)
    asked = pickle.loads(pickle.dumps(TrustRequired("trust?", "model.pt", ("a.B",))))
    assert (asked.path, asked.objects) == ("model.pt", ("a.B",))


# ---- devices -----------------------------------------------------------------------------------------------
def test_devices_not_offered_say_why():
    reasons = unavailable_devices()
    offered = available_devices()
    assert "cuda" in reasons or any(d.startswith("cuda:") for d in offered)
    assert ("mps" in reasons) != ("mps" in offered)
    for device, reason in reasons.items():
        assert reason.startswith(f"{device.upper()}: ") and "\n" not in reason
    if not torch.cuda.is_available():
        expected = "no CUDA support" if torch.version.cuda is None and not torch.version.hip else "GPU"
        assert expected in reasons["cuda"]
    if sys.platform != "darwin":
        assert reasons["mps"] == "MPS: only on Apple silicon Macs"
