"""The scan's default boxes, receptive fields from the architecture (hookscope.core.scan.fields), checked against the exact
gradient definition: equal to it on the network with every gate open, holding it on the real one, and the
gradient definition kept where the architecture does not allow a field."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from hookscope.core.models.images import Preprocess
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.channel_scanner import ChannelScanner
from hookscope.core.scan.fields import receptive_fields
from hookscope.core.scan.results import ScanSettings, write_scan
from hookscope.core.scan.run import scan_images

SIZE = 64
FLAT = Preprocess(resize=None, crop=SIZE, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def _open_gates(model: nn.Module) -> nn.Module:
    """The network made linear: every ReLU passes everything, every max-pool averages its whole window."""
    model = copy.deepcopy(model).eval()
    for child in list(model.modules()):
        for attribute, module in list(child.named_children()):
            if isinstance(module, nn.ReLU):
                setattr(child, attribute, nn.Identity())
            elif isinstance(module, nn.MaxPool2d):
                setattr(child, attribute, nn.AvgPool2d(module.kernel_size, module.stride, module.padding,
                                                       ceil_mode=module.ceil_mode))  # fmt: skip
    return model


def _positions(height: int, width: int) -> list[tuple[int, int]]:
    """Corners, edges and the middle: where padding and strides make the field differ."""
    rows = sorted({0, 1, height // 2, height - 2, height - 1} & set(range(height)))
    cols = sorted({0, 1, width // 2, width - 2, width - 1} & set(range(width)))
    return [(y, x) for y in rows for x in cols]


@pytest.mark.parametrize("path", ["conv1", "maxpool", "layer1", "layer2.0.relu", "layer2", "layer3", "fc"])
def test_the_field_is_the_gradient_box_of_the_open_network(resnet18_loaded, path):
    """The exact gradient definition (the scan's own ``unit_boxes``) on ResNet-18 with its gates open gives, at
    every checked position, exactly the field computed from the architecture; a ReLU's first call in a block
    (layer2.0.relu, called twice per block) and the classifier (every pixel) included."""
    model = _open_gates(resnet18_loaded.module)
    fields, reasons = receptive_fields(resnet18_loaded.module, [path], (3, SIZE, SIZE))
    assert not reasons and path in fields
    field = fields[path]
    scanner = ChannelScanner(model, ScanSettings((path,)))
    height, width = (1, 1) if field.whole else (len(field.rows), len(field.cols))
    torch.manual_seed(0)
    x = torch.randn(1, 3, SIZE, SIZE)
    positions = _positions(height, width)
    units = [(path, 5, 0, y * width + x_) for y, x_ in positions]
    found = scanner.unit_boxes(x.expand(len(units), -1, -1, -1), units)
    assert len(found) == len(positions)
    for (y, x_), box in zip(positions, found):
        assert box == field.box(y, x_), (path, y, x_)


def _pictures(folder: Path, count: int) -> list[Path]:
    rng = np.random.default_rng(3)
    folder.mkdir()
    for index in range(count):
        size = (int(rng.integers(64, 90)), int(rng.integers(64, 90)))
        small = rng.integers(0, 256, size=(size[1] // 6 + 2, size[0] // 6 + 2, 3), dtype=np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(folder / f"p{index}.png")
    return find_images(folder)


def test_the_gradient_box_of_each_top_image_lies_inside_its_field(resnet18_loaded, tmp_path):
    """On the real network (ReLUs that are off, max-pools that route): every exact box is inside the default one,
    in the original image's pixels; some are strictly smaller; the scan.json says which definition each follows."""
    loaded = replace(resnet18_loaded, module=copy.deepcopy(resnet18_loaded.module), preprocess=FLAT)
    images = _pictures(tmp_path / "images", 6)
    modules = ("maxpool", "layer2")
    settings = ScanSettings(modules, top=1, batch_size=8)
    default = scan_images(loaded, images, settings)
    exact = scan_images(loaded, images, replace(settings, exact_boxes=True))
    smaller = 0
    for path in modules:
        assert default.modules[path].boxes == "receptive field" and exact.modules[path].boxes == "gradient"
        for channel in range(default.modules[path].channels):
            for field, gradient in zip(default.top(path, channel), exact.top(path, channel)):
                assert (field.image, field.y, field.x) == (gradient.image, gradient.y, gradient.x)
                assert field.box is not None
                if gradient.box is None:
                    continue
                assert field.box[0] <= gradient.box[0] and field.box[1] <= gradient.box[1], (path, channel)
                assert gradient.box[2] <= field.box[2] and gradient.box[3] <= field.box[3], (path, channel)
                smaller += gradient.box != field.box
    assert smaller > 0  # the fields are a bound, not a copy: max-pool routing and ReLUs narrow the gradient's
    data = json.loads(write_scan(default, tmp_path / "out").read_text())
    assert {m["boxes"] for m in data["modules"].values()} == {"receptive field"}


class Upsampled(nn.Module):
    """A conv, an interpolation (no field is carried through it) and a conv after it."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 4, 3, 2, 1)
        self.last = nn.Conv2d(4, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(nn.functional.interpolate(self.first(x), scale_factor=2.0))


def test_a_module_the_field_cannot_reach_keeps_the_gradient_definition(tmp_path):
    torch.manual_seed(0)
    model = Upsampled()
    preprocess = Preprocess(resize=None, crop=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    loaded = LoadedModel("upsampled", model, "none", False, preprocess, None)
    fields, reasons = receptive_fields(model, ["first", "last"], (3, 32, 32))
    assert list(fields) == ["first"] and "interpolate" in reasons["last"]
    images = _pictures(tmp_path / "images", 3)
    settings = ScanSettings(("first", "last"), top=2, batch_size=4)
    default, exact = (
        scan_images(loaded, images, settings),
        scan_images(loaded, images, replace(settings, exact_boxes=True)),
    )
    assert default.modules["first"].boxes == "receptive field" and default.modules["last"].boxes == "gradient"
    assert default.modules["last"].top == exact.modules["last"].top  # the very boxes of --exact-boxes


@pytest.mark.parametrize("path", ["0", "1", "2", "3"])
def test_fields_follow_stride_padding_dilation_and_ceil_mode(path):
    """A dilated conv, a ceil-mode max-pool (its last window half outside), a 'same' conv with an even kernel and an
    adaptive pool of overlapping bins: the field of every position is the gradient box of the open network."""
    torch.manual_seed(0)
    stack = nn.Sequential(nn.Conv2d(2, 3, 3, 1, 2, dilation=2), nn.MaxPool2d(2, 2, ceil_mode=True),
                          nn.Conv2d(3, 3, (4, 3), padding="same"), nn.AdaptiveAvgPool2d(2))  # fmt: skip
    fields, reasons = receptive_fields(stack, [path], (2, 11, 9))
    assert not reasons
    field = fields[path]
    height, width = len(field.rows), len(field.cols)
    assert (height, width) == {"0": (11, 9), "1": (6, 5), "2": (6, 5), "3": (2, 2)}[path]
    units = [(path, 1, 0, y * width + x) for y in range(height) for x in range(width)]
    scanner = ChannelScanner(_open_gates(stack), ScanSettings((path,)))
    found = scanner.unit_boxes(torch.randn(1, 2, 11, 9).expand(len(units), -1, -1, -1), units)
    assert found == [field.box(y, x) for y in range(height) for x in range(width)]
