"""The model catalogue, weights (random, cached pretrained, state_dict files) and devices."""

import pathlib

import pytest
import torch
import torchvision

from hookscope.core.common.errors import DeviceError, ModelError
from hookscope.core.engine.devices import available_devices, resolve_device
from hookscope.core.models.catalogue import catalogue, default_preprocess, default_weights_file, load_model


def test_catalogue_is_every_torchvision_classification_segmentation_and_detection_model():
    names = catalogue()
    assert names == sorted(
        torchvision.models.list_models(module=torchvision.models)
        + torchvision.models.list_models(module=torchvision.models.segmentation)
        + torchvision.models.list_models(module=torchvision.models.detection)
    )
    assert len(names) >= 95 and "resnet18" in names and "vit_b_16" in names
    for name in (
        "fcn_resnet50",
        "deeplabv3_mobilenet_v3_large",
        "lraspp_mobilenet_v3_large",
        "fasterrcnn_mobilenet_v3_large_320_fpn",
        "retinanet_resnet50_fpn",
        "maskrcnn_resnet50_fpn",
    ):
        assert name in names


def test_random_weights_are_reproducible_per_seed():
    a, b, c = (
        load_model("resnet18", "none", seed=0),
        load_model("resnet18", "none", seed=0),
        load_model("resnet18", "none", seed=1),
    )
    assert torch.equal(a.module.conv1.weight, b.module.conv1.weight)
    assert not torch.equal(a.module.conv1.weight, c.module.conv1.weight)
    assert not a.pretrained and not a.module.training
    # random weights, yet the classes are named from the default weights' metadata
    assert (
        a.categories == torchvision.models.ResNet18_Weights.DEFAULT.meta["categories"] and a.categories[281] == "tabby"
    )
    assert (a.preprocess.resize, a.preprocess.crop) == (256, 224)


def test_untrained_vit_uses_its_own_input_size():
    # vit_h_14's default weights are for 518 pixels, but an untrained vit_h_14 is built for 224.
    assert torchvision.models.ViT_H_14_Weights.DEFAULT.transforms().crop_size == [518]
    model = torchvision.models.vit_b_16(weights=None)
    model.image_size = 224
    assert default_preprocess("vit_h_14", model).crop == 224


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ModelError, match="Unknown model 'resnet1800'.*resnet18"):
        load_model("resnet1800")


@pytest.fixture
def hub_dir(tmp_path):
    previous = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    yield tmp_path / "hub"
    torch.hub.set_dir(previous)


def test_default_weights_missing_offline_fall_back_with_notice(hub_dir):
    loaded = load_model("resnet18", "default")
    assert not loaded.pretrained
    assert "not in the torch hub cache" in loaded.notice and "random weights" in loaded.notice
    assert str(default_weights_file("resnet18")) in loaded.notice


def test_default_weights_from_the_hub_cache(hub_dir):
    source = load_model("resnet18", "none", seed=5).module
    path = default_weights_file("resnet18")
    path.parent.mkdir(parents=True)
    torch.save(source.state_dict(), path)
    loaded = load_model("resnet18", "default")
    assert loaded.pretrained and loaded.notice == ""
    assert loaded.categories[281] == "tabby"
    assert torch.equal(loaded.module.fc.weight, source.fc.weight)


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "dataparallel"])
def test_state_dict_files_in_common_wrappers(tmp_path, wrap):
    source = load_model("resnet18", "none", seed=3).module
    state = source.state_dict()
    data = {
        "plain": state,
        "state_dict": {"state_dict": state, "epoch": 3},
        "model": {"model": state, "optimizer": {}},
        "dataparallel": {f"module.{k}": v for k, v in state.items()},
    }[wrap]
    path = tmp_path / "weights.pth"
    torch.save(data, path)
    loaded = load_model("resnet18", str(path), seed=0)
    assert torch.equal(loaded.module.conv1.weight, source.conv1.weight)
    assert loaded.pretrained and loaded.weights == str(path)


def test_mismatched_state_dict_is_explained(tmp_path):
    state = load_model("resnet18", "none").module.state_dict()
    del state["fc.bias"]
    state["head.weight"] = torch.zeros(3)
    state["conv1.weight"] = torch.zeros(8, 3, 7, 7)
    path = tmp_path / "other.pt"
    torch.save(state, path)
    with pytest.raises(ModelError) as error:
        load_model("resnet18", str(path))
    message = str(error.value)
    assert "1 missing key(s): fc.bias" in message
    assert "1 unexpected key(s): head.weight" in message
    assert "conv1.weight (file (8, 3, 7, 7), model (64, 3, 7, 7))" in message
    assert "\n" not in message


class _Payload:
    """Unpickling this would create a file: proof that the loader never runs pickled code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_pickled_code_is_never_run(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"state_dict": _Payload(marker)}, path)
    with pytest.raises(ModelError, match="pathlib.Path.*would run code from the file, so it was not loaded"):
        load_model("resnet18", str(path))
    assert not marker.exists()


def test_missing_and_non_weights_files(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_model("resnet18", str(tmp_path / "nope.pth"))
    text = tmp_path / "notes.pth"
    text.write_text("not weights")
    with pytest.raises(ModelError, match="not a weights file"):
        load_model("resnet18", str(text))


def test_devices():
    assert available_devices()[0] == "cpu"
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match="'cuda:7' is not available.*available: cpu"):
        resolve_device("cuda:7")


def test_a_title_says_untrained_only_for_random_catalogue_weights() -> None:
    """Issue 44: pages, strips and the window title say when the weights are random; a model the caller holds
    (source "object") or a file's or a factory's own weights are never called untrained."""
    from hookscope.core.models.loaded import model_title

    untrained = {"name": "resnet18", "weights": "none", "pretrained": False, "seed": 3, "source": "catalogue"}
    assert model_title(untrained) == "resnet18 (untrained: random weights, seed 3)"
    assert model_title({**untrained, "weights": "default"}) == "resnet18 (untrained: random weights, seed 3)"
    assert model_title({**untrained, "weights": "default", "pretrained": True}) == "resnet18"
    assert model_title({**untrained, "source": "object", "name": "Net"}) == "Net"
    assert model_title({**untrained, "source": "python", "name": "net.py:build"}) == "net.py:build"
    assert model_title({**untrained, "source": "hub", "weights": "default", "pretrained": True}) == "resnet18"
