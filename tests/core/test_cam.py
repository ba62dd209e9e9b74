"""Grad-CAM on ResNet-18 against a reference computed here with plain hooks and the formula written out."""

import copy

import numpy as np
import pytest
import torch

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import colormap_lut
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.pictures.cam import grad_cam, has_spatial_output, overlay, run_grad_cam


def bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize with half-pixel centres (what align_corners=False means), in plain numpy loops."""
    in_h, in_w = image.shape
    out = np.zeros((height, width), dtype=np.float64)

    def source(index, size_in, size_out):
        pos = max((index + 0.5) * size_in / size_out - 0.5, 0.0)
        low = min(int(np.floor(pos)), size_in - 1)
        high = min(low + 1, size_in - 1)
        return low, high, pos - low

    for y in range(height):
        y0, y1, fy = source(y, in_h, height)
        for x in range(width):
            x0, x1, fx = source(x, in_w, width)
            top = image[y0, x0] * (1 - fx) + image[y0, x1] * fx
            bottom = image[y1, x0] * (1 - fx) + image[y1, x1] * fx
            out[y, x] = top * (1 - fy) + bottom * fy
    return out


def reference_cam(model, x, path, target=None):
    """Activations and gradients from plain hooks on a copy; Grad-CAM from its definition."""
    model = copy.deepcopy(model)
    kept = {}

    def forward_hook(module, inputs, output):
        kept["activation"] = output.detach().clone()
        output.register_hook(lambda grad: kept.__setitem__("gradient", grad.detach().clone()))

    model.get_submodule(path).register_forward_hook(forward_hook)
    logits = model(x.clone().requires_grad_(True))
    index = int(logits[0].argmax()) if target is None else target
    logits[0, index].backward()
    activation = kept["activation"][0].double().numpy()  # (C, h, w)
    gradient = kept["gradient"][0].double().numpy()
    cam = np.zeros(activation.shape[1:])
    for channel in range(activation.shape[0]):
        weight = gradient[channel].sum() / gradient[channel].size  # the spatial mean of the gradient
        cam += weight * activation[channel]
    cam = np.maximum(cam, 0)  # ReLU
    cam = bilinear(cam, x.shape[2], x.shape[3])
    low, high = cam.min(), cam.max()
    return (cam - low) / (high - low) if high > low else np.zeros_like(cam)  # minimum to 0, maximum to 1


@pytest.mark.parametrize("target", ["top1", 7])
def test_grad_cam_matches_an_independent_reference(resnet18, target):
    x = torch.randn(1, 3, 160, 160, generator=torch.Generator().manual_seed(5))
    registry = HookRegistry(resnet18)
    registry.add("layer4", "forward")
    registry.add("layer4", "tensor")
    result = capture_run(resnet18, registry, x, target=target)
    cam = run_grad_cam(result, "layer4")
    expected = reference_cam(resnet18, x, "layer4", None if target == "top1" else target)
    assert cam.dtype == np.float32 and cam.shape == (160, 160)
    assert cam.max() == pytest.approx(1.0) and cam.min() >= 0
    np.testing.assert_allclose(cam, expected, atol=2e-5)
    # the same from the records directly, with the batch axis and at another size
    forward = next(r for r in result.records if r.kind == "forward")
    grad = next(r for r in result.records if r.kind == "tensor")
    small = grad_cam(forward.tensor.numpy()[0], grad.tensor.numpy()[0], (5, 5))
    np.testing.assert_allclose(small, grad_cam(forward.tensor, grad.tensor, (5, 5)))


def test_grad_cam_edge_cases():
    activation = np.ones((2, 3, 3), dtype=np.float32)
    negative = -np.ones((2, 3, 3), dtype=np.float32)
    assert not grad_cam(activation, negative, (6, 6)).any(), "all negative: the ReLU leaves zeros, and zeros stay zero"
    with pytest.raises(HookscopeError, match="spatial output"):
        grad_cam(np.ones((1, 1000)), np.ones((1, 1000)), (4, 4))
    assert (
        has_spatial_output((1, 512, 7, 7))
        and not has_spatial_output((1, 1000))
        and not has_spatial_output((1, 8, 1, 1))
    )


def test_overlay_blends_with_the_opacity():
    image = np.full((4, 5, 3), 100, dtype=np.uint8)
    cam = np.linspace(0, 1, 20, dtype=np.float32).reshape(4, 5)
    lut = colormap_lut("viridis")
    assert np.array_equal(overlay(image, cam, 0.0, lut), image)
    heat = lut[np.round(cam * 255).astype(np.uint8)]
    assert np.array_equal(overlay(image, cam, 1.0, lut), heat)
    half = overlay(image, cam, 0.5, lut)
    assert half.dtype == np.uint8 and half.shape == (4, 5, 3)
    assert np.abs(half.astype(int) - (image.astype(int) + heat.astype(int)) / 2).max() <= 0.5
    with pytest.raises(ValueError, match="differ in size"):
        overlay(image, cam[:3], 0.5, lut)
