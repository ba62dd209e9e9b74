"""Grad-CAM's scale (issue 13, item 8): each map min-max scaled to [0, 1], as pytorch-grad-cam does.

The reference is written out here in plain PyTorch, from the definition: the channel weights are the spatial
means of the gradient, the map is the ReLU of the weighted sum of the activations, upsampled bilinearly to the
input size, then its minimum goes to 0 and its maximum to 1.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.pictures.cam import grad_cam, run_grad_cam


def min_max(cam: torch.Tensor) -> torch.Tensor:
    low, high = cam.min(), cam.max()
    return (cam - low) / (high - low) if high > low else torch.zeros_like(cam)


def reference(activation: torch.Tensor, gradient: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(C, h, w) activations and gradients -> the (H, W) map, in float64."""
    activation, gradient = activation.double(), gradient.double()
    weights = gradient.mean(dim=(1, 2))  # one weight per channel
    cam = torch.relu((weights[:, None, None] * activation).sum(dim=0))
    up = F.interpolate(cam[None, None], size=size, mode="bilinear", align_corners=False)[0, 0]
    return min_max(up)


def test_a_map_that_is_positive_everywhere_still_spans_zero_to_one():
    rng = np.random.default_rng(0)
    activation = rng.uniform(1.0, 2.0, (4, 6, 6)).astype(np.float32)  # positive everywhere, so is the map
    gradient = rng.uniform(0.5, 1.0, (4, 6, 6)).astype(np.float32)
    cam = grad_cam(activation, gradient, (24, 24))
    assert cam.min() == 0.0 and cam.max() == pytest.approx(1.0, abs=1e-6)
    expected = reference(torch.from_numpy(activation), torch.from_numpy(gradient), (24, 24))
    np.testing.assert_allclose(cam, expected.numpy(), atol=1e-6)


def test_flat_maps_come_back_zero():
    flat = np.ones((3, 5, 5), dtype=np.float32)
    assert not grad_cam(flat, flat, (10, 10)).any(), "the same value everywhere points nowhere"
    assert not grad_cam(flat, -flat, (10, 10)).any(), "negative everywhere: zero after the ReLU"


@pytest.mark.parametrize("path", ["layer2", "layer3"])
def test_resnet_grad_cam_matches_plain_pytorch(resnet18, path):
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(11))
    with HookRegistry(resnet18) as registry:
        registry.add(path, "forward")
        registry.add(path, "backward")
        result = capture_run(resnet18, registry, x, target=3)
    cam = run_grad_cam(result, path)
    model, kept = copy.deepcopy(resnet18), {}

    def hook(module, inputs, output):
        kept["act"] = output.detach().clone()
        output.register_hook(lambda grad: kept.__setitem__("grad", grad.detach().clone()))

    model.get_submodule(path).register_forward_hook(hook)
    model(x.clone().requires_grad_(True))[0, 3].backward()
    expected = reference(kept["act"][0], kept["grad"][0], (96, 96))
    assert cam.min() == 0.0 and cam.max() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(cam, expected.numpy(), atol=1e-5)
