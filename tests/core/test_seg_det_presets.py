"""torchvision's segmentation and detection presets as Hookscope's Preprocess: the same sizes and statistics the
catalogue gives these models, and the same tensor as the preset's own transform where the preset fixes it."""

from __future__ import annotations

import pytest
import torch
import torchvision
from PIL import Image

from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import Preprocess


def test_a_segmentation_preset_is_a_square_of_its_resize_with_its_statistics():
    preset = torchvision.models.get_model_weights("lraspp_mobilenet_v3_large").DEFAULT.transforms()
    preprocess = Preprocess.from_torchvision(preset)
    assert (preprocess.resize, preprocess.crop) == (520, 520)
    assert preprocess.mean == pytest.approx((0.485, 0.456, 0.406)) and preprocess.std == pytest.approx(
        (0.229, 0.224, 0.225)
    )
    assert preprocess == load_model("lraspp_mobilenet_v3_large", "none").preprocess
    square = Image.new("RGB", (300, 300), (200, 30, 90))  # a square picture: the preset's own resize is the same
    torch.testing.assert_close(preprocess.to_tensor(square), preset(square).unsqueeze(0), rtol=0, atol=2e-2)


def test_a_detection_preset_is_a_float_conversion_at_the_models_size():
    preset = torchvision.models.get_model_weights("ssdlite320_mobilenet_v3_large").DEFAULT.transforms()
    with pytest.raises(ValueError, match="give size"):
        Preprocess.from_torchvision(preset)
    preprocess = Preprocess.from_torchvision(preset, size=320)
    assert preprocess == load_model("ssdlite320_mobilenet_v3_large", "none").preprocess
    picture = Image.new("RGB", (320, 320), (255, 0, 128))
    torch.testing.assert_close(preprocess.to_tensor(picture), preset(picture).unsqueeze(0))
