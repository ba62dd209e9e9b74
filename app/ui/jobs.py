"""The work a background worker does for the window, frozen into immutable requests. No Qt here.

The GUI thread builds a request (model, hook registry, image, device, target, generation number); the worker
executes it and returns an outcome carrying the same generation number, so the window can drop any outcome that
a newer request has superseded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from PIL import Image

from app.core.capture import RunCancelled, RunResult, capture_run
from app.core.hooks import HookRegistry
from app.core.images import read_image
from app.core.models import LoadedModel, load_model
from app.core.tree import ModuleInfo, module_tree
from app.ui.pictures import PanelPicture, PanelSettings, prepare_pictures

# What the app ticks on a first start, so the first screen already shows feature maps and gradients.
DEFAULT_CHECKS: dict[str, tuple[str, ...]] = {
    "resnet18": ("layer1.0.conv1", "layer4.1.conv2"),
    "resnet50": ("layer1.0.conv2", "layer4.2.conv3"),
    "vit_b_16": ("encoder.layers.encoder_layer_3", "encoder.layers.encoder_layer_11"),
}


def default_checks(model_name: str, nodes: list[ModuleInfo]) -> list[str]:
    """Two telling layers of any model: an early and a late one (convolutions, else transformer blocks)."""
    paths = {n.path for n in nodes}
    known = DEFAULT_CHECKS.get(model_name)
    if known and all(p in paths for p in known):
        return list(known)
    convs = [n.path for n in nodes if n.type_name == "Conv2d"]
    if len(convs) >= 4:
        return [convs[max(1, len(convs) // 8)], convs[-1]]
    blocks = [n.path for n in nodes if n.type_name.endswith(("Block", "Layer")) and n.depth >= 2]
    if len(blocks) >= 2:
        return [blocks[len(blocks) // 4], blocks[-1]]
    leaves = [n.path for n in nodes if not n.children and n.params > 0]
    return leaves[:1] + leaves[-1:] if len(leaves) >= 2 else leaves


@dataclass(frozen=True)
class ImageSource:
    """An image the user asked for: a file (read in the worker) or pixels already in memory (clipboard)."""

    name: str  # what the user sees: the file name, or "clipboard image"
    path: str | None = None
    image: Image.Image | None = field(default=None, compare=False)

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> ImageSource:
        text = os.fspath(path)
        return cls(os.path.basename(text.rstrip("/\\")) or text, text)

    def load(self) -> Image.Image:
        if self.image is not None:
            return self.image
        if self.path is None:
            raise ValueError("An image source needs a path or pixels.")
        return read_image(self.path)

    def loaded(self, image: Image.Image) -> ImageSource:
        return ImageSource(self.name, self.path, image)


# ---- loading a model ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadRequest:
    generation: int
    name: str
    weights: str
    seed: int = 0


@dataclass(frozen=True)
class LoadOutcome:
    generation: int
    loaded: LoadedModel
    nodes: list[ModuleInfo]
    load_ms: float


def execute_load(request: LoadRequest) -> LoadOutcome:
    """Build the model and its module tree (seconds for big models: never on the GUI thread)."""
    start = time.perf_counter()
    loaded = load_model(request.name, request.weights, request.seed)
    nodes = module_tree(loaded.module)
    return LoadOutcome(request.generation, loaded, nodes, (time.perf_counter() - start) * 1000)


# ---- one run --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    generation: int
    loaded: LoadedModel
    registry: HookRegistry
    image: ImageSource
    device: str
    target: int | str
    settings: Mapping[tuple[str, str], PanelSettings]
    default_settings: PanelSettings

    @classmethod
    def freeze(
        cls,
        generation: int,
        loaded: LoadedModel,
        registry: HookRegistry,
        image: ImageSource,
        device: str,
        target: int | str,
        settings: Mapping[tuple[str, str], PanelSettings],
        default_settings: PanelSettings,
    ) -> RunRequest:
        """Copy the mutable parts, so later GUI changes cannot leak into a run in flight."""
        frozen = MappingProxyType(dict(settings))
        return cls(generation, loaded, registry, image, device, target, frozen, default_settings)

    def settings_for(self, path: str, kind: str) -> PanelSettings:
        return self.settings.get((path, kind), self.default_settings)


@dataclass(frozen=True)
class RunOutcome:
    generation: int
    image: ImageSource  # with its pixels, so later re-runs need not read the file again
    result: RunResult
    pictures: list[PanelPicture]
    input_display: np.ndarray  # uint8 (H, W, 3): the image as the model sees it
    saliency: np.ndarray | None  # float32 (H, W): |d target / d input|, max over colour channels
    timings: dict[str, float]  # read_ms, forward_ms, backward_ms, prepare_ms


def execute_run(request: RunRequest, cancelled: Callable[[], bool]) -> RunOutcome:
    """Read, preprocess, run forward and backward, and prepare every panel's picture.

    ``cancelled`` is checked between the steps; a superseded run stops with ``RunCancelled`` and nothing of it
    reaches the window.
    """
    if cancelled():
        raise RunCancelled()
    start = time.perf_counter()
    pixels = request.image.load()
    x = request.loaded.preprocess.to_tensor(pixels)
    read_ms = (time.perf_counter() - start) * 1000
    if cancelled():
        raise RunCancelled()
    result = capture_run(
        request.loaded.module,
        request.registry,
        x,
        device=request.device,
        target=request.target,
        categories=request.loaded.categories,
        cancelled=cancelled,
    )
    if cancelled():
        raise RunCancelled()
    start = time.perf_counter()
    pictures = prepare_pictures(result.records, request.settings_for)
    display = request.loaded.preprocess.to_display(result.input)
    saliency = None
    if result.input_grad is not None and result.input_grad.ndim == 4:
        saliency = np.ascontiguousarray(result.input_grad[0].abs().amax(dim=0).float().numpy())
    prepare_ms = (time.perf_counter() - start) * 1000
    timings = {"read_ms": read_ms, **result.timings, "prepare_ms": prepare_ms}
    return RunOutcome(request.generation, request.image.loaded(pixels), result, pictures, display, saliency, timings)
