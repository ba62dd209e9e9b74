"""Grad-CAM: where in the image a module's activations push the chosen class.

For a module with spatial output, each channel is weighted by the spatial mean of the gradient of the target
with respect to it; the weighted sum over channels, through a ReLU, is the class activation map (Selvaraju et
al., 2017). It is upsampled to the input size and overlaid on the image. A transformer's tokens (1, N, C) are laid
on their patch grid first, the class token (and registers) dropped, as pytorch-grad-cam's ``reshape_transform``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.hooks import OUTPUT_GRADIENT_KINDS
from hookscope.core.pictures.attention import as_token_maps


def _maps(values: np.ndarray | torch.Tensor, what: str) -> np.ndarray:
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    elif array.ndim == 3 and array.shape[0] == 1:  # a transformer's (1, tokens, channels): on the patch grid
        grid = as_token_maps(array)
        array = grid if grid is not None else array
    if array.ndim != 3:
        raise HookscopeError(
            f"Grad-CAM needs a module with spatial output (C, H, W); its {what} has shape {tuple(array.shape)}."
        )
    return array.astype(np.float32, copy=False)


def grad_cam(
    activation: np.ndarray | torch.Tensor, gradient: np.ndarray | torch.Tensor, size: tuple[int, int]
) -> np.ndarray:
    """The Grad-CAM map, float32 (H', W') = ``size``, scaled to [0, 1]: its minimum to 0, its maximum to 1.

    ``activation`` and ``gradient`` are (C, H, W) or (1, C, H, W): a module's output and the gradient of the
    target with respect to it. The min-max scaling is pytorch-grad-cam's (``scale_cam_image``), done here after
    the upsampling so that the map shown really spans 0 to 1. A flat map (all zero after the ReLU, or the same
    everywhere) has nothing to point at and comes back all zero, as there.
    """
    act = _maps(activation, "activation")
    grad = _maps(gradient, "gradient")
    if act.shape != grad.shape:
        raise HookscopeError(f"Activation {act.shape} and gradient {grad.shape} of Grad-CAM differ in shape.")
    weights = grad.mean(axis=(1, 2))  # one weight per channel
    cam = np.maximum(np.tensordot(weights, act, axes=1), 0.0).astype(np.float32)
    up = F.interpolate(torch.from_numpy(cam)[None, None], size=tuple(size), mode="bilinear", align_corners=False)
    result = up[0, 0].numpy().astype(np.float32)
    result = np.nan_to_num(result, nan=0.0, posinf=0.0, neginf=0.0)
    low, high = (float(result.min()), float(result.max())) if result.size else (0.0, 0.0)
    result = (result - low) / (high - low) if high > low else np.zeros_like(result)
    return np.ascontiguousarray(np.clip(result, 0.0, 1.0), dtype=np.float32)


def has_spatial_output(shape: tuple[int, ...]) -> bool:
    """Whether Grad-CAM applies: (1, C, H, W) or (C, H, W) with H, W > 1."""
    dims = shape[1:] if len(shape) == 4 and shape[0] == 1 else shape
    return len(dims) == 3 and dims[1] > 1 and dims[2] > 1


def run_grad_cam(result: RunResult, path: str, call: int = 0) -> np.ndarray:
    """Grad-CAM of module ``path`` in a run, at the input's size, for the run's target class.

    Needs the module's activations (a forward hook) and its output gradient (a tensor or backward hook).
    """
    activation = next((r for r in result.of_kind("forward") if r.path == path and r.call == call and not r.leaf), None)
    gradient = next(
        (
            r
            for kind in OUTPUT_GRADIENT_KINDS
            for r in result.of_kind(kind)
            if r.path == path and r.call == call and not r.leaf
        ),
        None,
    )
    if activation is None or gradient is None:
        raise HookscopeError(
            f"Grad-CAM of {path} needs its activations and its gradient: tick both and run again.", module_path=path
        )
    try:
        height, width = result.input.shape[-2:]
        return grad_cam(activation.tensor, gradient.tensor, (int(height), int(width)))
    except HookscopeError as error:
        error.module_path = path
        raise


def overlay(image_rgb: np.ndarray, cam: np.ndarray, opacity: float, colormap: np.ndarray) -> np.ndarray:
    """``image_rgb`` (H, W, 3) uint8 with ``cam`` (H, W) in [0, 1] laid over it through a (256, 3) uint8 colormap.

    ``opacity`` 0 gives the image, 1 the coloured map alone.
    """
    image = np.asarray(image_rgb)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"overlay expects an (H, W, 3) image, got {image.shape}.")
    if cam.shape != image.shape[:2]:
        raise ValueError(f"The map {cam.shape} and the image {image.shape[:2]} differ in size.")
    lut = np.asarray(colormap)
    if lut.shape != (256, 3):
        raise ValueError(f"The colormap must be a (256, 3) table, not {lut.shape}.")
    alpha = float(np.clip(opacity, 0.0, 1.0))
    index = np.clip(np.round(np.nan_to_num(cam, nan=0.0) * 255), 0, 255).astype(np.uint8)
    heat = lut[index].astype(np.float32)
    blended = (1.0 - alpha) * image.astype(np.float32) + alpha * heat
    return np.ascontiguousarray(np.clip(np.round(blended), 0, 255).astype(np.uint8))
