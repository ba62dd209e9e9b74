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

from hookscope.core.engine.capture import RunCancelled, RunResult
from hookscope.core.engine.hooks import HookRegistry, Record
from hookscope.core.engine.objectives import with_reference
from hookscope.core.engine.run import run_image
from hookscope.core.engine.target_words import Objective
from hookscope.core.engine.tree import ModuleInfo, module_tree
from hookscope.core.models.images import read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.pictures.ab import Comparison, compare_runs
from hookscope.core.pictures.display import saliency_map
from hookscope.core.pictures.panels import PanelPicture, PanelSettings, prepare_pictures
from hookscope.ui.state.rendering import with_rendering


@dataclass(frozen=True)
class ImageSource:
    """An image the user asked for: a file (read in the worker) or pixels already in memory (clipboard)."""

    name: str  # what the user sees: the file name, or "clipboard image"
    path: str | None = None
    image: Image.Image | None = field(default=None, compare=False)
    # a frame of a playing video or camera: one of many a second, so the window renews its per-run lines (status,
    # timings) at a reading pace instead of repainting them every frame
    frame: bool = False
    # called on the worker as soon as the model's passes are done, before the pictures are made: a playing video
    # asks its reader for the next frame then, so that it is decoded by the time the run path frees
    after_model: Callable[[], object] | None = field(default=None, compare=False)

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
        return ImageSource(self.name, self.path, image, self.frame)


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
    loaded = open_model(ModelSource(request.name, request.weights, request.seed))
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
    target: Objective
    settings: Mapping[tuple[str, str], PanelSettings]
    default_settings: PanelSettings
    others: tuple[ImageSource, ...] = ()  # the other images the enabled mix edits blend in (read in the worker)
    baseline: bool = False  # edits on: also run without them, for the change of each prediction
    image_b: ImageSource | None = None  # image B: run right after A through the same hooks, to compare
    fit: tuple[int, int] | None = None  # the panels' view size in device pixels: mosaics are coloured at that size
    channel_orders: Mapping[str, np.ndarray] = field(default_factory=dict)  # a dataset scan's order per module path
    # Panels (kind, record key) out of view: their records are kept, their pictures made when they scroll in
    # (``execute_pictures``), so the work of a run follows the screen, not the number of panels.
    hidden: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def freeze(
        cls,
        generation: int,
        loaded: LoadedModel,
        registry: HookRegistry,
        image: ImageSource,
        device: str,
        target: Objective,
        settings: Mapping[tuple[str, str], PanelSettings],
        default_settings: PanelSettings,
        *,
        image_b: ImageSource | None = None,
        fit: tuple[int, int] | None = None,
        channel_orders: Mapping[str, np.ndarray] | None = None,
        hidden: frozenset[tuple[str, str]] = frozenset(),
    ) -> RunRequest:
        """Copy the mutable parts, so later GUI changes cannot leak into a run in flight."""
        frozen = MappingProxyType(dict(settings))
        edits = registry.enabled_edits()
        mixes = dict.fromkeys(e.other_image for e in edits if e.kind == "mix" and e.other_image)
        others = tuple(ImageSource.from_path(path) for path in mixes)
        return cls(
            generation,
            loaded,
            registry,
            image,
            device,
            target,
            frozen,
            default_settings,
            others,
            bool(edits),
            image_b,
            fit,
            MappingProxyType(dict(channel_orders or {})),
            frozenset(hidden),
        )

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
    comparison: Comparison | None = None  # image B's run and the A / B / A - B views, when B is set
    image_b: ImageSource | None = None  # with its pixels
    deferred: tuple[Record, ...] = ()  # records of the panels out of view: pictures made when they are shown


def execute_run(request: RunRequest, cancelled: Callable[[], bool]) -> RunOutcome:
    """Read, preprocess, run forward and backward, and prepare every panel's picture.

    ``cancelled`` is checked between the steps; a superseded run stops with ``RunCancelled`` and nothing of it
    reaches the window.
    """
    if cancelled():
        raise RunCancelled()
    start = time.perf_counter()
    pixels = request.image.load()
    preprocess = request.loaded.preprocess
    fitted = preprocess.fitted(pixels)
    x = preprocess.as_input(fitted)
    others = {source.path: preprocess.to_tensor(source.load()) for source in request.others if source.path}
    pixels_b = request.image_b.load() if request.image_b is not None else None
    read_ms = (time.perf_counter() - start) * 1000
    if cancelled():
        raise RunCancelled()
    target = with_reference(request.target, request.loaded)  # similar:/text: the embedding compared with, once
    result = run_image(
        request.loaded,
        request.registry,
        x,
        device=request.device,
        target=target,
        cancelled=cancelled,
        others=others or None,
        baseline=request.baseline,
    )
    if cancelled():
        raise RunCancelled()
    result_b = None
    if pixels_b is not None:
        # The same hooks and edits; gradients of A's target class, so that A's and B's gradients compare.
        result_b = run_image(
            request.loaded,
            request.registry,
            preprocess.to_tensor(pixels_b),
            device=request.device,
            # A's class (a segmentation model's over B's own pixels of it); a detector's box:N as it is (N is no
            # class), a similarity with its reference.
            target=result.target_index if result.target_index is not None and result.task != "detection" else target,
            cancelled=cancelled,
            others=others or None,
            baseline=request.baseline,
        )
        if cancelled():
            raise RunCancelled()
    if request.image.after_model is not None:
        request.image.after_model()
    start = time.perf_counter()
    shown = [r for r in result.records if (r.kind, r.key) not in request.hidden]
    deferred = tuple(r for r in result.records if (r.kind, r.key) in request.hidden)
    display = preprocess.shown(fitted)  # the input as the model sees it: the picture it was made of
    display_b = preprocess.to_display(result_b.input) if result_b is not None else None
    pictures, comparison = pictures_of_records(
        shown, request.settings_for, request.channel_orders, request.fit, result, result_b, display_b
    )
    saliency = None
    if result.input_grad is not None and result.input_grad.ndim == 4:
        saliency = saliency_map(result.input_grad)
    prepare_ms = (time.perf_counter() - start) * 1000
    timings = {"read_ms": read_ms, **result.timings, "prepare_ms": prepare_ms}
    image_b = request.image_b.loaded(pixels_b) if request.image_b is not None and pixels_b is not None else None
    return RunOutcome(
        request.generation,
        request.image.loaded(pixels),
        result,
        pictures,
        display,
        saliency,
        timings,
        comparison,
        image_b,
        deferred,
    )


def pictures_of_records(
    records: list[Record],
    settings_for: Callable[[str, str], PanelSettings],
    channel_orders: Mapping[str, np.ndarray],
    fit: tuple[int, int] | None,
    result: RunResult,
    result_b: RunResult | None = None,
    display_b: np.ndarray | None = None,
) -> tuple[list[PanelPicture], Comparison | None]:
    """The pictures of ``records`` (with image B's views when B ran), coloured at the size ``fit`` shows them, so
    the GUI thread only paints: the one way a run's records become what the panels draw, for the panels in view
    after a run and for those scrolled in later."""
    pictures = prepare_pictures(records, settings_for, channel_orders)
    comparison = None
    if result_b is not None and display_b is not None:
        pictures, comparison = compare_runs(result, result_b, pictures, display_b)
    return [with_rendering(picture, fit) for picture in pictures], comparison


@dataclass(frozen=True)
class PictureRequest:
    """Pictures for panels that scrolled into view after their run (its records were kept: ``RunOutcome.deferred``)."""

    outcome: RunOutcome
    records: tuple[Record, ...]
    settings: Mapping[tuple[str, str], PanelSettings]
    default_settings: PanelSettings
    fit: tuple[int, int] | None
    channel_orders: Mapping[str, np.ndarray]

    def settings_for(self, path: str, kind: str) -> PanelSettings:
        return self.settings.get((path, kind), self.default_settings)


@dataclass(frozen=True)
class PictureOutcome:
    outcome: RunOutcome  # the run they belong to: dropped when another run is on screen by then
    pictures: list[PanelPicture]
    views: Mapping[tuple[str, str], Mapping[str, PanelPicture]]  # with image B: each record's A / B / A − B views
    prepare_ms: float


def execute_pictures(request: PictureRequest) -> PictureOutcome:
    start = time.perf_counter()
    outcome = request.outcome
    comparison = outcome.comparison
    pictures, compared = pictures_of_records(
        list(request.records),
        request.settings_for,
        request.channel_orders,
        request.fit,
        outcome.result,
        comparison.result if comparison is not None else None,
        comparison.input_display if comparison is not None else None,
    )
    views = dict(compared.views) if compared is not None else {}
    return PictureOutcome(outcome, pictures, views, (time.perf_counter() - start) * 1000)
