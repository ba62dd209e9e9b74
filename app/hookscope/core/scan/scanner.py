"""What excites a channel: over a folder of images, per channel of each module, the images (and the part of each)
that excite it most, and how it behaves over the whole set.

For every module and channel the scan keeps:

- the top-k images by the channel's maximum over its positions (or by its mean, ``by="mean"``), with the score and
  the position (y, x) of the maximum;
- the region of the image that position sees: the bounding box of the nonzero gradient of that one unit with
  respect to the input (exact for any architecture: whatever the network does, a pixel is in the box iff changing
  it changes the unit, to first order), mapped back through the preprocessing's crop and resize to the pixels of
  the image as read (upright per EXIF);
- running statistics over every image: the mean and standard deviation of the channel's values over all positions
  of all images, and the fraction of images in which the channel is active (its maximum > 0).

How, and what it costs:

- Batched forward passes under ``torch.no_grad`` with forward hooks only; each hook reduces its module's output to
  (images x channels) numbers on the spot (max, sum, sum of squares; the position of the maximum only for the
  entries that can still enter a top-k), so nothing of the size of a feature map is kept, and a later in-place op
  (ResNet's ``ReLU(inplace=True)``) cannot change what was read. A pass stops once every scanned module has run
  (the rest of the network is not needed).
- Per channel a running top-k, merged per batch with a total order (score, then image index), so the result does
  not depend on how the images are split into batches or shards: memory is bounded by the batch size and k, not by
  the number of images. Statistics merge exactly (Chan et al.'s parallel update, in float64).
- Images are read ahead in a thread (``batch.read_ahead``, as batch export does), found with the same listing and
  skip rules (``batch.find_images``) and read as batch export reads them (``read_image``, then the model's own
  preprocessing).
- The boxes are computed only for the final top-k: the images are read again and the units run as one batch with
  gradients, one unit per batch element (batch elements do not mix in eval mode), stopping after the deepest
  module the batch needs.
- A checkpoint (``scan.partial.json``, written atomically every ``checkpoint_every_s`` and when the scan stops)
  lets a stopped scan go on where it stopped (``resume=True``), with bit-identical results.

The work itself is behind a small backend interface (batches of images in, partial top-k and moments out; units in,
boxes out): ``LocalScan`` runs in this process; ``hookscope.core.scan.on_ray`` runs the same code on a Ray cluster.

Nothing here prints; progress goes to a callback.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image
from torch import nn

from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.core.engine.memory_fit import activation_bytes
from hookscope.core.engine.structure import tensor_leaves
from hookscope.core.models.images import Preprocess, probe_image, read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import READ_AHEAD, read_ahead, write_json_atomically
from hookscope.core.scan.fields import Field, receptive_fields
from hookscope.core.scan.results import (
    CHECKPOINT_FILE,
    FIELD,
    FORMAT_VERSION,
    GRADIENT,
    SCAN_FILE,
    Box,
    Layout,
    ModuleScan,
    ScanResult,
    ScanSettings,
    TopImage,
    floats,
    read_scan,
    unfloats,
    write_scan,
)

__all__ = [
    "SCAN_FILE",
    "ChannelScanner",
    "Layout",
    "LocalScan",
    "ModuleScan",
    "ScanProgress",
    "ScanResult",
    "ScanSettings",
    "TopImage",
    "copy_without_hooks",
    "original_box",
    "read_scan",
    "run_scan",
    "scan_images",
    "write_scan",
]

CHECKPOINT_EVERY_S = 30.0
NO_IMAGE = 2**62  # the image index of an empty top-k slot: it ranks after every real image

Unit = tuple[str, int, int, int]  # (module path, channel, image index, flat position)


@dataclass(frozen=True)
class ScanProgress:
    """Where a scan stands: ``phase`` "scan" counts images, "boxes" counts units (one per top-k entry)."""

    phase: str
    done: int
    total: int
    processed: int  # images run through the model in this call
    skipped: int  # images that could not be read (so far)
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Images per second run in this call (scan phase)."""
        return self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0


# ============================================================================================== layout ====
def layout_of(shape: Sequence[int], path: str) -> Layout:
    """The layout of a batched output shape; any other rank is one clear error naming the module."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 4:
        _, a, b, c = shape
        if a == b and c > a:
            return Layout("maps-last", c, a, b)
        return Layout("maps", a, b, c)
    if len(shape) == 3:
        return Layout("tokens", shape[2], shape[1], 1)
    if len(shape) == 2:
        return Layout("vector", shape[1], 1, 1)
    raise HookscopeError(
        f"{path or 'The model'}'s output is {'x'.join(map(str, shape[1:])) or 'a scalar'} per image; the scan reads "
        "(C, H, W) maps, (tokens, C) sequences and (C,) vectors.",
        module_path=path,
    )


def _output_tensor(output: Any, path: str) -> torch.Tensor:
    """The tensor a module's output is scanned by: the output itself, or the first floating-point leaf of a tuple,
    dict or dataclass (as the window's first record of it)."""
    for _leaf, tensor in tensor_leaves(output):
        if tensor.is_floating_point():
            return tensor
    raise HookscopeError(f"{path or 'The model'} gives no floating-point tensor to scan.", module_path=path)


# ============================================================================== running top-k, moments ====
def rank_order(score: torch.Tensor, image: torch.Tensor, k: int) -> torch.Tensor:
    """Per row, the indexes of the best ``k`` of (C, M) candidates in a total order: higher score first, then lower
    image index (so ties, common at 0 after a ReLU, are broken the same way however the images were batched or
    sharded); NaN last."""
    if score.shape[1] == 1:  # one candidate per row (a batch of one image): nothing to order
        return torch.zeros_like(image[:, :1])
    key = torch.nan_to_num(score, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
    by_image = torch.argsort(image, dim=1, stable=True)
    by_score = torch.argsort(key.gather(1, by_image), dim=1, descending=True, stable=True)
    return by_image.gather(1, by_score)[:, :k]


@dataclass
class TopK:
    """Per channel, the best entries so far, best first: (C, k) scores, image indexes and flat positions."""

    score: torch.Tensor  # float32
    image: torch.Tensor  # int64; NO_IMAGE in an empty slot
    position: torch.Tensor  # int64

    @classmethod
    def empty(cls, channels: int, k: int) -> TopK:
        return cls(
            torch.full((channels, k), -math.inf, dtype=torch.float32),
            torch.full((channels, k), NO_IMAGE, dtype=torch.int64),
            torch.zeros((channels, k), dtype=torch.int64),
        )

    @classmethod
    def ranked(cls, score: torch.Tensor, image: torch.Tensor, position: torch.Tensor, k: int) -> TopK:
        """The best ``k`` of (C, M) candidates (see ``rank_order``)."""
        order = rank_order(score, image, k)
        return cls(score.gather(1, order), image.gather(1, order), position.gather(1, order))

    def floor(self) -> torch.Tensor:
        """Per channel, the score a new entry must reach to have a chance of a place: the k-th best score, or -inf
        while a slot is empty (or the k-th is not a number). Reaching it is not enough (ties go to the lower image
        index), so it sorts out only entries that certainly lose."""
        last = torch.nan_to_num(self.score[:, -1], nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        return torch.where(self.image[:, -1] == NO_IMAGE, torch.full_like(last, -math.inf), last)

    def merged(self, other: TopK, k: int) -> TopK:
        if not bool((other.image != NO_IMAGE).any()):  # only empty slots: they rank after every entry, so nothing
            return self  # changes (a long scan's batches mostly bring none)
        return TopK.ranked(
            torch.cat([self.score, other.score], 1),
            torch.cat([self.image, other.image], 1),
            torch.cat([self.position, other.position], 1),
            k,
        )

    def to_json(self) -> dict[str, Any]:
        return {"score": floats(self.score), "image": self.image.tolist(), "position": self.position.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopK:
        return cls(
            torch.tensor(unfloats(data["score"], -math.inf), dtype=torch.float32),
            torch.tensor(data["image"], dtype=torch.int64),
            torch.tensor(data["position"], dtype=torch.int64),
        )


@dataclass
class Moments:
    """Per channel: the mean and the sum of squared deviations (m2) of its values over every position of every
    image seen, in float64, and in how many images it was active (maximum > 0)."""

    values: int  # values per channel seen: images x positions
    images: int
    mean: np.ndarray
    m2: np.ndarray
    active: np.ndarray  # int64

    @classmethod
    def empty(cls, channels: int) -> Moments:
        return cls(0, 0, np.zeros(channels), np.zeros(channels), np.zeros(channels, dtype=np.int64))

    @classmethod
    def of_batch(cls, total: torch.Tensor, squares: torch.Tensor, peak: torch.Tensor, positions: int) -> Moments:
        """From per-image (N, C) sums of values and of squares over ``positions`` values each (float32 sums: the
        spread of a channel is accurate while its mean is not thousands of times its spread), then the exact update
        for equal counts, in float64."""
        sums = total.double().numpy()
        means = sums / positions
        m2 = np.maximum(squares.double().numpy() - sums * means, 0.0)
        batch_mean = means.mean(axis=0)
        spread = m2.sum(axis=0) + positions * np.square(means - batch_mean).sum(axis=0)
        active = (peak > 0).sum(dim=0).numpy().astype(np.int64)
        return cls(positions * means.shape[0], means.shape[0], batch_mean, spread, active)

    def merged(self, other: Moments) -> Moments:
        """Chan et al.'s parallel update: exact for any split of the images."""
        if self.values == 0:
            return other
        if other.values == 0:
            return self
        total = self.values + other.values
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.values / total)
        m2 = self.m2 + other.m2 + np.square(delta) * (self.values * other.values / total)
        return Moments(total, self.images + other.images, mean, m2, self.active + other.active)

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation over every value seen."""
        return np.sqrt(self.m2 / self.values) if self.values else np.full_like(self.m2, math.nan)

    @property
    def active_fraction(self) -> np.ndarray:
        return self.active / self.images if self.images else np.full(self.active.shape, math.nan)

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "images": self.images, "mean": floats(self.mean), "m2": floats(self.m2),
                "active": self.active.tolist()}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Moments:
        return cls(int(data["values"]), int(data["images"]), np.array(unfloats(data["mean"]), dtype=np.float64),
                   np.array(unfloats(data["m2"]), dtype=np.float64), np.array(data["active"], dtype=np.int64))  # fmt: skip


@dataclass
class ModulePartial:
    """What one batch (or shard) says about one module: its layout, its top-k (already cut to k) and moments."""

    layout: Layout
    top: TopK
    moments: Moments


# ======================================================================================= the hooks ====
class _StopForward(Exception):
    """Raised by the last hook a pass needs: the rest of the network need not run."""


class _PassHooks:
    """Forward hooks on ``paths``, one pass at a time: during ``run`` the first call of each module goes to
    ``take(path, tensor)`` (a module called twice, as ResNet's ``relu``, is read at its first call); once every
    module has been read, the pass stops. Outside ``run`` the hooks do nothing, so they can stay registered over
    many passes (a scan registers them once, not once per batch) without touching any other use of the model."""

    def __init__(self, model: nn.Module, paths: Sequence[str], take: Callable[[str, torch.Tensor], None]) -> None:
        modules = dict(model.named_modules())
        missing = [p for p in paths if p not in modules]
        if missing:
            raise HookscopeError(
                f"The model has no module named {', '.join(repr(m) for m in missing)}.", module_path=missing[0]
            )
        self.paths = list(paths)
        self.take = take
        self.seen: set[str] = set()
        self.running = False
        self._handles = [modules[path].register_forward_hook(self._hook(path)) for path in self.paths]

    def _hook(self, path: str) -> Callable:
        def hook(_module: nn.Module, _args: tuple, output: Any) -> None:
            if not self.running or path in self.seen:
                return
            self.seen.add(path)
            self.take(path, _output_tensor(output, path))
            if len(self.seen) == len(self.paths):
                raise _StopForward

        return hook

    def run(self, model: nn.Module, x: torch.Tensor) -> None:
        self.seen = set()
        self.running = True
        try:
            model(x)
        except _StopForward:
            pass
        finally:
            self.running = False
        not_run = [p for p in self.paths if p not in self.seen]
        if not_run:
            raise HookscopeError(
                f"{not_run[0] or 'The model'} did not run in the forward pass, so it cannot be scanned.",
                module_path=not_run[0],
            )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode while scanning (batch elements must not mix, as training-mode batch norm would make them)."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


class ChannelScanner:
    """The scan's work on one model in one process: a batch of images to per-module partial results, and units to
    input-pixel boxes. Used by ``LocalScan`` and by the Ray actors alike, so both compute the same numbers."""

    def __init__(self, model: nn.Module, settings: ScanSettings, device: str | torch.device = "cpu") -> None:
        self.model = model
        self.settings = settings
        self.device = torch.device(device)
        self.layouts: dict[str, Layout] = {}
        self.running: dict[str, TopK] = {}  # this scanner's own top-k so far: its floor spares most argmax work
        self._hooks: _PassHooks | None = None  # the scan's hooks while ``scanning`` holds them

    @contextmanager
    def scanning(self) -> Iterator[None]:
        """Hold the scan's forward hooks and eval mode over many batches: ``partial`` called inside registers no
        hooks and switches no mode per batch (each costs a walk over every module of the model). Between batches
        the hooks do nothing; the model is in eval mode throughout. Outside, ``partial`` does both itself."""
        if self._hooks is not None:
            yield
            return
        hooks = _PassHooks(self.model, self.settings.modules, lambda _path, _tensor: None)
        self._hooks = hooks
        try:
            with _eval_mode(self.model):
                yield
        finally:
            self._hooks = None
            hooks.remove()

    def _layout(self, path: str, tensor: torch.Tensor) -> Layout:
        layout = layout_of(tensor.shape, path)
        known = self.layouts.setdefault(path, layout)
        if known != layout:
            raise HookscopeError(
                f"{path}'s output changed shape between images ({known.describe()} then {layout.describe()}); "
                "the scan needs one shape for every image.",
                module_path=path,
            )
        return known

    def partial(self, x: torch.Tensor, images: Sequence[int]) -> dict[str, ModulePartial]:
        """Run a batch (image indexes ``images``) and reduce every scanned module's output to a ``ModulePartial``:
        the batch's entries that can still enter this scanner's top-k (the others certainly cannot enter any top-k
        this scanner's results are merged into), and the batch's moments."""
        reduced: dict[str, tuple[Layout, TopK, tuple[torch.Tensor, ...]]] = {}
        by_mean = self.settings.by == "mean"
        k = self.settings.top
        device_ids = torch.as_tensor(list(images), dtype=torch.int64, device=self.device)

        def take(path: str, tensor: torch.Tensor) -> None:
            layout = self._layout(path, tensor)
            values = layout.view(tensor).float()  # (N, C, P); float32 for half-precision models too
            # Three fast reductions (a max with its position costs ten times an amax on the CPU) ...
            peak = values.amax(dim=2)
            total = values.sum(dim=2)
            squares = torch.linalg.vector_norm(values, dim=2).square()
            key = (total / layout.positions if by_mean else peak).T  # (C, N)
            # ... and the position of the maximum only where an entry can still take a place.
            image = device_ids.expand(layout.channels, -1)
            order = rank_order(key, image, k)  # (C, min(k, N))
            score = key.gather(1, order)
            running = self.running.get(path)
            floor = running.floor().to(score.device) if running is not None else torch.full_like(score[:, 0], -math.inf)
            keep = (score >= floor.unsqueeze(1)) | torch.isneginf(floor).unsqueeze(1)
            channel, rank = torch.nonzero(keep, as_tuple=True)
            position = torch.zeros_like(order)
            position[channel, rank] = values[order[channel, rank], channel].argmax(dim=1)
            top = TopK(torch.where(keep, score, torch.full_like(score, -math.inf)),
                       torch.where(keep, image.gather(1, order), torch.full_like(order, NO_IMAGE)), position)  # fmt: skip
            reduced[path] = (layout, top, (total, squares, peak))

        with self.scanning():
            hooks = self._hooks
            assert hooks is not None
            hooks.take = take
            try:
                with torch.no_grad():
                    hooks.run(self.model, x.to(self.device))
            finally:
                hooks.take = lambda _path, _tensor: None  # nothing of this batch kept alive by the hooks
        partials = {}
        for path, (layout, top, tensors) in reduced.items():
            top = TopK(*(t.to("cpu") for t in (top.score, top.image, top.position)))
            total, squares, peak = (t.to("cpu") for t in tensors)
            running = self.running.get(path) or TopK.empty(layout.channels, k)
            self.running[path] = running.merged(top, k)
            partials[path] = ModulePartial(layout, top, Moments.of_batch(total, squares, peak, layout.positions))
        return partials

    def unit_boxes(self, x: torch.Tensor, units: Sequence[Unit]) -> list[Box | None]:
        """For batch element i (an image) and ``units[i]`` (path, channel, image, position), the bounding box in
        input pixels of the nonzero gradient of that one unit with respect to the input; None where the gradient is
        zero everywhere (e.g. a unit at 0 behind a ReLU)."""
        if not units:
            return []
        rows: dict[str, list[int]] = {}
        for index, (path, _channel, _image, _position) in enumerate(units):
            rows.setdefault(path, []).append(index)
        picked: list[torch.Tensor] = []

        def take(path: str, tensor: torch.Tensor) -> None:
            values = self._layout(path, tensor).view(tensor)
            index = rows[path]
            # Picked here, before anything later in the network changes the tensor in place.
            picked.append(values[torch.tensor(index, device=values.device),
                                 torch.tensor([units[i][1] for i in index], device=values.device),
                                 torch.tensor([units[i][3] for i in index], device=values.device)].sum())  # fmt: skip

        paths = list(rows)
        x = x.detach().to(self.device).clone().requires_grad_(True)
        hooks = _PassHooks(self.model, paths, take)
        try:
            with torch.enable_grad(), _eval_mode(self.model):
                hooks.run(self.model, x)
                wanted = [p for p in picked if p.requires_grad]
                grad = torch.autograd.grad(torch.stack(wanted).sum(), x, allow_unused=True)[0] if wanted else None
        finally:
            hooks.remove()
        if grad is None:
            return [None] * len(units)
        support = (grad != 0).any(dim=1).to("cpu")  # (B, H, W)
        return [_bounding_box(support[i]) for i in range(len(units))]


def _bounding_box(mask: torch.Tensor) -> Box | None:
    rows = torch.nonzero(mask.any(dim=1)).flatten()
    cols = torch.nonzero(mask.any(dim=0)).flatten()
    if rows.numel() == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


# ======================================================================== back to the original pixels ====
def resized_size(size: tuple[int, int], preprocess: Preprocess) -> tuple[int, int]:
    """(width, height) after the preprocessing's resize (torchvision's rule: the shorter side to ``resize``)."""
    width, height = size
    if preprocess.squash:  # the whole picture to a square (transformers' height x width resize)
        side = preprocess.resize or preprocess.crop
        return side, side
    if preprocess.resize is None:
        return width, height
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = preprocess.resize, int(preprocess.resize * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def original_box(box: Box, size: tuple[int, int], preprocess: Preprocess) -> Box | None:
    """A box in the model input's pixels as a box in the pixels of the image (``size``: width, height) it was
    made from: the centre crop (and the padding torchvision adds when the crop is larger) undone, then the resize
    (pixel areas scaled; the resize filter's blur of a pixel or two is not added). None when the box lies
    entirely in the crop's padding."""
    width, height = size
    resized_w, resized_h = resized_size(size, preprocess)
    crop = preprocess.crop
    pad_left = (crop - resized_w) // 2 if crop > resized_w else 0
    pad_top = (crop - resized_h) // 2 if crop > resized_h else 0
    padded_w, padded_h = max(resized_w, crop), max(resized_h, crop)
    left = int(round((padded_w - crop) / 2.0)) - pad_left  # torchvision's center_crop, to the letter
    top = int(round((padded_h - crop) / 2.0)) - pad_top
    x0, y0, x1, y1 = box
    x0, x1 = max(0, x0 + left), min(resized_w, x1 + left)
    y0, y1 = max(0, y0 + top), min(resized_h, y1 + top)
    if x0 >= x1 or y0 >= y1:
        return None
    # Integer arithmetic: floor for the start, ceiling for the end, never off by one from rounding.
    return (x0 * width // resized_w, y0 * height // resized_h,
            -(-x1 * width // resized_w), -(-y1 * height // resized_h))  # fmt: skip


# ============================================================================================ backends ====
ScanBatch = tuple[int, list[tuple[int, str]], dict[str, ModulePartial]]  # batch number, skipped, partials
BoxChunk = tuple[int, list[Box | None]]  # chunk number, boxes in the original image's pixels


class ScanBackend(Protocol):
    """Where the work runs: batches of image indexes in (in order), partials out; chunks of units in, boxes out."""

    def scan(self, batches: Sequence[Sequence[int]], start: int) -> Iterator[ScanBatch]: ...

    def boxes(self, chunks: Sequence[Sequence[Unit]], start: int) -> Iterator[BoxChunk]: ...


FittedBatch = tuple[list[Image.Image], list[int], list[tuple[int, str]]]
FittedUnits = tuple[dict[int, Image.Image], dict[int, tuple[int, int]]]


def fit_batch(paths: Sequence[Path], preprocess: Preprocess, indexes: Sequence[int]) -> FittedBatch:
    """Read the images ``indexes`` and fit them to the model's input (``Preprocess.fitted``: Pillow only, so a
    read-ahead thread can do it without starting a second OpenMP team): the pictures that could be read, their
    indexes, and (index, one-line reason) for those that could not."""
    pictures, kept, skipped = [], [], []
    for index in indexes:
        try:
            pictures.append(preprocess.fitted(read_image(paths[index])))
            kept.append(index)
        except ImageError as error:
            skipped.append((index, str(error)))
    return pictures, kept, skipped


def stacked(preprocess: Preprocess, pictures: Sequence[Image.Image]) -> torch.Tensor | None:
    """Fitted pictures as one normalised input batch (torch: on the thread that runs the model)."""
    return torch.cat([preprocess.as_input(picture) for picture in pictures]) if pictures else None


def read_batch(paths: Sequence[Path], preprocess: Preprocess, indexes: Sequence[int]
               ) -> tuple[torch.Tensor | None, list[int], list[tuple[int, str]]]:  # fmt: skip
    """Read and preprocess the images ``indexes``: the stacked batch of those that could be read, their indexes,
    and (index, one-line reason) for those that could not."""
    pictures, kept, skipped = fit_batch(paths, preprocess, indexes)
    return stacked(preprocess, pictures), kept, skipped


def fit_units(paths: Sequence[Path], preprocess: Preprocess, units: Sequence[Unit]) -> FittedUnits:
    """Each image of a chunk of units read once and fitted (Pillow only, as ``fit_batch``), and each image's size
    as read (width, height); (0, 0) for one that cannot be read any more."""
    pictures: dict[int, Image.Image] = {}
    sizes: dict[int, tuple[int, int]] = {}
    for _path, _channel, image, _position in units:
        if image not in pictures and image not in sizes:
            try:
                picture = read_image(paths[image])
            except ImageError:
                sizes[image] = (0, 0)  # gone since the scan: no box
                continue
            sizes[image] = picture.size
            pictures[image] = preprocess.fitted(picture)
    return pictures, sizes


def units_input(preprocess: Preprocess, units: Sequence[Unit], fitted: FittedUnits
                ) -> tuple[torch.Tensor | None, list[int], dict[int, tuple[int, int]]]:  # fmt: skip
    """The input batch for a chunk of units (one element per unit), the units whose image could be read, and the
    images' sizes: what ``chunk_boxes`` takes."""
    pictures, sizes = fitted
    kept = [i for i, unit in enumerate(units) if unit[2] in pictures]
    return stacked(preprocess, [pictures[units[i][2]] for i in kept]), kept, sizes


def read_units(paths: Sequence[Path], preprocess: Preprocess, units: Sequence[Unit]
               ) -> tuple[torch.Tensor | None, list[int], dict[int, tuple[int, int]]]:  # fmt: skip
    """The input batch for a chunk of units (one element per unit, each image read once), the units whose image
    could be read, and each image's size as read (width, height)."""
    return units_input(preprocess, units, fit_units(paths, preprocess, units))


def chunk_boxes(scanner: ChannelScanner, preprocess: Preprocess, units: Sequence[Unit],
                read: tuple[torch.Tensor | None, list[int], dict[int, tuple[int, int]]]) -> list[Box | None]:  # fmt: skip
    """Boxes in original pixels for a chunk of units, from what ``read_units`` read."""
    x, kept, sizes = read
    boxes: list[Box | None] = [None] * len(units)
    if x is None:
        return boxes
    found = scanner.unit_boxes(x, [units[i] for i in kept])
    for i, box in zip(kept, found):
        boxes[i] = original_box(box, sizes[units[i][2]], preprocess) if box is not None else None
    return boxes


class LocalScan:
    """The scan in this process: a reader thread reads the next batches while the model runs this one."""

    def __init__(self, loaded: LoadedModel, settings: ScanSettings, paths: Sequence[Path], device: str = "cpu") -> None:
        self.preprocess = loaded.preprocess
        self.paths = list(paths)
        loaded.module.to(device)
        self.scanner = ChannelScanner(loaded.module, settings, device)

    def scan(self, batches: Sequence[Sequence[int]], start: int) -> Iterator[ScanBatch]:
        # The reader thread only decodes and fits (Pillow); the tensors are made here, on the model's thread.
        def read(number: int) -> FittedBatch:
            return fit_batch(self.paths, self.preprocess, batches[number])

        # The hooks and eval mode are set once for the whole scan, not once per batch (the scanner's ``scanning``).
        with self.scanner.scanning(), closing(read_ahead(range(start, len(batches)), read, READ_AHEAD,
                                                         "hookscope-scan-read")) as reads:  # fmt: skip
            for number, future in reads:
                pictures, kept, skipped = future.result()
                x = stacked(self.preprocess, pictures)
                yield number, skipped, (self.scanner.partial(x, kept) if x is not None else {})

    def boxes(self, chunks: Sequence[Sequence[Unit]], start: int) -> Iterator[BoxChunk]:
        def read(number: int) -> FittedUnits:
            return fit_units(self.paths, self.preprocess, chunks[number])

        with closing(read_ahead(range(start, len(chunks)), read, READ_AHEAD, "hookscope-scan-read")) as reads:
            for number, future in reads:
                read_input = units_input(self.preprocess, chunks[number], future.result())
                yield number, chunk_boxes(self.scanner, self.preprocess, chunks[number], read_input)


def memory_need(loaded: LoadedModel, settings: ScanSettings, images: int) -> Callable[[int, int], float]:
    """``need(size, batch)``: the bytes a scan of ``images`` images must hold at once, at least, at ``size`` pixels
    with ``batch`` as its batch size. A batch of the scan: per image the decoded picture resized (uint8), its input
    tensor and the model's largest output; a chunk of the boxes (with gradients): per top-k entry its input and
    what autograd keeps as far as the first of the modules."""
    preprocess = loaded.preprocess
    per_pixel = activation_bytes(loaded.module, preprocess.channels, settings.modules)
    ratio = (preprocess.resize or preprocess.crop) / preprocess.crop  # the resize's shorter side, per crop pixel
    tensor = preprocess.channels * 4
    channels = sum(layout_of(shape, path).channels for path, shape in per_pixel.shapes.items() if 2 <= len(shape) <= 4)
    entries = max(1, channels) * min(settings.top, images) if settings.boxes else 0

    def need(size: int, batch: int) -> float:
        resized = int(size * ratio)
        scan = min(batch, images) * (resized * resized * 3 + (tensor + per_pixel.largest) * size * size)
        return max(scan, min(batch, entries) * (tensor + per_pixel.upto) * size * size)

    return need


# =========================================================================================== the scan ====
@dataclass
class _State:
    """Everything a scan has so far; a checkpoint is this, as JSON."""

    layouts: dict[str, Layout]
    tops: dict[str, TopK]
    moments: dict[str, Moments]
    next_batch: int = 0
    processed: int = 0
    skipped: list[tuple[int, str]] | None = None
    boxes: list[Box | None] | None = None  # in the order of ``_units``, once the box phase has started
    scan_s: float = 0.0
    boxes_s: float = 0.0
    box_kinds: dict[str, str] | None = None  # per module, the definition its boxes follow (not checkpointed)

    def merge(self, number: int, skipped: list[tuple[int, str]], partials: dict[str, ModulePartial], k: int) -> None:
        for path, part in partials.items():
            if path not in self.layouts:
                self.layouts[path] = part.layout
                self.tops[path] = TopK.empty(part.layout.channels, k)
                self.moments[path] = Moments.empty(part.layout.channels)
            self.tops[path] = self.tops[path].merged(part.top, k)
            self.moments[path] = self.moments[path].merged(part.moments)
        self.skipped = (self.skipped or []) + list(skipped)
        self.processed += next(iter(partials.values())).moments.images if partials else 0
        self.next_batch = number + 1

    def to_json(self, fingerprint: dict[str, Any]) -> dict[str, Any]:
        return {
            "fingerprint": fingerprint,
            "next_batch": self.next_batch,
            "processed": self.processed,
            "skipped": [[i, r] for i, r in self.skipped or []],
            "boxes": None if self.boxes is None else [list(b) if b is not None else None for b in self.boxes],
            "scan_s": self.scan_s,
            "boxes_s": self.boxes_s,
            "modules": {path: {"layout": self.layouts[path].describe(), "top": self.tops[path].to_json(),
                               "moments": self.moments[path].to_json()} for path in self.layouts},
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _State:
        modules = data["modules"]
        layouts = {p: Layout(**m["layout"]) for p, m in modules.items()}
        return cls(
            layouts=layouts,
            tops={p: TopK.from_json(m["top"]) for p, m in modules.items()},
            moments={p: Moments.from_json(m["moments"]) for p, m in modules.items()},
            next_batch=int(data["next_batch"]),
            processed=int(data["processed"]),
            skipped=[(int(i), str(r)) for i, r in data["skipped"]],
            boxes=None if data["boxes"] is None else [tuple(b) if b is not None else None for b in data["boxes"]],
            scan_s=float(data.get("scan_s", 0.0)),
            boxes_s=float(data.get("boxes_s", 0.0)),
        )


def _relative(image: Path, root: Path) -> str:
    try:
        return image.relative_to(root).as_posix()
    except ValueError:
        return image.as_posix()


def scan_fingerprint(loaded: LoadedModel, settings: ScanSettings, images: Sequence[Path], root: Path) -> dict:
    """What makes two scans' partial results interchangeable: a resume goes on only when it matches. The batch
    size is part of it: a different batching could round the last bit of a score differently."""
    names = "\n".join(_relative(p, root) for p in images)
    model = {k: v for k, v in loaded.describe().items() if k != "notice"}
    return {
        "version": FORMAT_VERSION,
        "model": model,
        "preprocessing": loaded.preprocess.describe(),
        "modules": list(settings.modules),
        "top": settings.top,
        "by": settings.by,
        "batch_size": settings.batch_size,
        "boxes": settings.boxes,
        "exact_boxes": settings.exact_boxes,
        "images": len(images),
        "images_sha256": hashlib.sha256(names.encode("utf-8")).hexdigest(),
    }


def _units(state: _State, modules: Sequence[str]) -> list[Unit]:
    """Every entry of the final top-k (empty slots left out), module by module (a chunk of one module's units stops
    its pass right after that module), then by image: neighbouring units share their image."""
    units: list[Unit] = []
    for path in modules:
        top = state.tops.get(path)
        if top is None:
            continue
        entries = [(path, channel, int(image), int(position))
                   for channel, (images, positions) in enumerate(zip(top.image.tolist(), top.position.tolist()))
                   for image, position in zip(images, positions) if image != NO_IMAGE]  # fmt: skip
        units += sorted(entries, key=lambda u: (u[2], u[1]))
    return units


def _read_checkpoint(out: Path, fingerprint: dict) -> _State | None:
    file = out / CHECKPOINT_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise HookscopeError(f"The scan's checkpoint '{file}' cannot be read ({error}); start again without "
                             "resuming.", path=str(file)) from error  # fmt: skip
    if not isinstance(data, dict):
        raise HookscopeError(f"The scan's checkpoint '{file}' is damaged (it holds no scan); start again without "
                             "resuming.", path=str(file))  # fmt: skip
    if data.get("fingerprint") != fingerprint:
        old = data.get("fingerprint")
        old = old if isinstance(old, dict) else {}
        differs = [k for k in fingerprint if old.get(k) != fingerprint[k]]
        raise HookscopeError(
            f"'{out}' holds a scan of something else (its {', '.join(differs) or 'format'} differ); start again "
            "without resuming, or choose another output folder.", path=str(file),
        )  # fmt: skip
    try:
        state = _State.from_json(data)
        _check_state(state, fingerprint)
        return state
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
        raise HookscopeError(f"The scan's checkpoint '{file}' is damaged ({error}); start again without "
                             "resuming.", path=str(file)) from error  # fmt: skip


def _check_state(state: _State, fingerprint: dict) -> None:
    """A checkpoint that parsed but does not fit its own fingerprint (hand-edited, damaged) raises ValueError."""
    top, modules = fingerprint["top"], fingerprint["modules"]
    for path, layout in state.layouts.items():
        shapes = {tuple(t.shape) for t in (state.tops[path].score, state.tops[path].image, state.tops[path].position)}
        moments = state.moments[path]
        if (
            path not in modules
            or layout.channels < 1
            or shapes != {(layout.channels, top)}
            or any(len(a) != layout.channels for a in (moments.mean, moments.m2, moments.active))
        ):
            raise ValueError(f"the entry of '{path}' does not fit its layout")
    if not 0 <= state.processed <= fingerprint["images"] or state.next_batch < 0:
        raise ValueError("its counts are out of range")


def _fields(loaded: LoadedModel, state: _State, modules: Sequence[str]) -> dict[str, Field]:
    """The receptive fields of the scanned modules the architecture allows, at the scan's input size (a module
    whose field does not match the layout the scan read keeps the gradient definition)."""
    preprocess = loaded.preprocess
    found, _reasons = receptive_fields(loaded.module, [p for p in modules if p in state.layouts],
                                       (preprocess.channels, preprocess.crop, preprocess.crop))  # fmt: skip
    fields = {}
    for path, field in found.items():
        layout = state.layouts[path]
        if field.whole or (layout.kind == "maps" and (len(field.rows), len(field.cols)) == (layout.height,
                                                                                             layout.width)):  # fmt: skip
            fields[path] = field
    return fields


def upright_size(path: Path) -> tuple[int, int]:
    """An image's (width, height) as ``read_image`` gives it (upright per EXIF), from its header: not decoded."""
    width, height = probe_image(path)
    try:
        with Image.open(path) as opened:
            orientation = opened.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block: read_image keeps the picture as stored
        orientation = 1
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def _field_boxes(paths: Sequence[Path], preprocess: Preprocess, units: Sequence[Unit], fields: dict[str, Field]
                 ) -> dict[tuple[str, int, int], Box | None]:  # fmt: skip
    """Receptive-field boxes in original pixels: no model run, each image's header read once for its size."""
    sizes: dict[int, tuple[int, int] | None] = {}
    boxes: dict[tuple[str, int, int], Box | None] = {}
    for path, channel, image, position in units:
        if image not in sizes:
            try:
                sizes[image] = upright_size(paths[image])
            except ImageError:
                sizes[image] = None  # gone since the scan: no box
        field, size = fields[path], sizes[image]
        y, x = divmod(position, max(1, len(field.cols))) if not field.whole else (0, 0)
        box = field.box(y, x) if size is not None else None
        boxes[(path, channel, image)] = (
            original_box(box, size, preprocess) if box is not None and size is not None else None
        )
    return boxes


def run_scan(
    backend: ScanBackend,
    loaded: LoadedModel,
    images: Sequence[str | Path],
    settings: ScanSettings,
    *,
    root: str | Path | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[ScanProgress], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    checkpoint_every_s: float = CHECKPOINT_EVERY_S,
) -> ScanResult:
    """Scan ``images`` on ``backend``; ``loaded`` names the model and its preprocessing (the backend runs it).

    ``out_dir``: where the checkpoint lives (None: no checkpoint); ``resume`` goes on from it (it must match:
    same model, preprocessing, settings and image list). ``cancelled`` is asked before each batch and chunk; a
    stopped scan writes its checkpoint and comes back with ``complete`` False; a finished one writes it too, and
    ``write_scan`` removes it once scan.json is on disk. An unreadable image is skipped with
    its reason; a scan in which no image could be read is an error.
    """
    paths = [Path(p) for p in images]
    if not paths:
        raise HookscopeError("There are no images to scan.")
    base = Path(root) if root is not None else Path(paths[0]).parent
    fingerprint = scan_fingerprint(loaded, settings, paths, base)
    out = Path(out_dir) if out_dir is not None else None
    state = _read_checkpoint(out, fingerprint) if (resume and out is not None) else None
    state = state or _State({}, {}, {}, skipped=[])
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise HookscopeError(f"Cannot create the output folder '{out}': {error.strerror or error}.",
                                 path=str(out)) from error  # fmt: skip
    batch = settings.batch_size
    batches = [list(range(i, min(i + batch, len(paths)))) for i in range(0, len(paths), batch)]
    start = time.perf_counter()
    processed_here = 0
    last_save = [time.perf_counter()]

    def save(force: bool = False) -> None:
        if out is not None and (force or time.perf_counter() - last_save[0] >= checkpoint_every_s):
            try:
                write_json_atomically(state.to_json(fingerprint), out / CHECKPOINT_FILE)
            except OSError as error:  # the earlier checkpoint stays whole (written atomically)
                raise HookscopeError(
                    f"Cannot write the scan's checkpoint '{out / CHECKPOINT_FILE}': {error.strerror or error}.",
                    path=str(out / CHECKPOINT_FILE),
                ) from error
            last_save[0] = time.perf_counter()

    def tell(phase: str, done: int, total: int) -> None:
        if progress is not None:
            progress(ScanProgress(phase, done, total, processed_here, len(state.skipped or []),
                                  time.perf_counter() - start))  # fmt: skip

    def stopped() -> bool:
        return cancelled is not None and cancelled()

    boxes: dict[tuple[str, int, int], Box | None] = {}

    try:
        # ---- the scan: every image once, batched, no gradients ----
        phase_start = time.perf_counter()
        if state.next_batch < len(batches):
            tell("scan", min(state.next_batch * batch, len(paths)), len(paths))
            scan = backend.scan(batches, state.next_batch)
            try:
                while not stopped():
                    item = next(scan, None)
                    if item is None:
                        break
                    number, skipped, partials = item
                    state.merge(number, skipped, partials, settings.top)
                    processed_here += len(batches[number]) - len(skipped)
                    tell("scan", min((number + 1) * batch, len(paths)), len(paths))
                    save()
                if state.next_batch < len(batches):
                    return _result(loaded, paths, base, settings, state, complete=False)
            finally:
                scan.close()  # type: ignore[attr-defined]
                state.scan_s += time.perf_counter() - phase_start
        if not state.tops:
            reasons = state.skipped or []
            first = f": {reasons[0][1]}" if reasons else ""
            raise HookscopeError(f"None of the {len(paths)} images could be read{first}")
        # ---- the boxes: only the final top-k; by the receptive field where the architecture allows it ----
        if settings.boxes:
            units = _units(state, settings.modules)
            phase_start = time.perf_counter()
            tell("boxes", 0, len(units))
            fields = {} if settings.exact_boxes else _fields(loaded, state, settings.modules)
            boxes.update(_field_boxes(paths, loaded.preprocess, [u for u in units if u[0] in fields], fields))
            # the gradient boxes (checkpointed: state.boxes holds them in the order of these units)
            gradient = [u for u in units if u[0] not in fields]
            state.boxes = list(state.boxes or [])
            state.box_kinds = {p: (FIELD if p in fields else GRADIENT) for p in settings.modules}
            chunks = [gradient[i : i + batch] for i in range(len(state.boxes), len(gradient), batch)]
            done_fields = len(units) - len(gradient)
            state.boxes_s += time.perf_counter() - phase_start
            tell("boxes", done_fields + len(state.boxes), len(units))
            if chunks:
                phase_start = time.perf_counter()
                work = backend.boxes(chunks, 0)
                try:
                    while not stopped():
                        chunk = next(work, None)
                        if chunk is None:
                            break
                        state.boxes.extend(chunk[1])
                        tell("boxes", done_fields + len(state.boxes), len(units))
                        save()
                finally:
                    work.close()  # type: ignore[attr-defined]
                    state.boxes_s += time.perf_counter() - phase_start
            boxes.update({(u[0], u[1], u[2]): box for u, box in zip(gradient, state.boxes)})
            if len(state.boxes) < len(gradient):
                return _result(loaded, paths, base, settings, state, complete=False, boxes=boxes)
        return _result(loaded, paths, base, settings, state, complete=True, boxes=boxes)
    finally:
        # stopped, cancelled, interrupted or failed: a resume goes on from here; finished: kept until write_scan
        # has scan.json on disk, so that a full disk loses nothing
        save(force=True)


def _result(loaded: LoadedModel, paths: list[Path], root: Path, settings: ScanSettings, state: _State,
            complete: bool, boxes: dict[tuple[str, int, int], Box | None] | None = None) -> ScanResult:  # fmt: skip
    boxes = boxes or {}
    modules = {}
    for path in settings.modules:
        if path not in state.tops:
            continue
        layout, top, moments = state.layouts[path], state.tops[path], state.moments[path]
        channels = []
        for channel in range(layout.channels):
            entries = []
            for score, image, position in zip(top.score[channel].tolist(), top.image[channel].tolist(),
                                               top.position[channel].tolist()):  # fmt: skip
                if image == NO_IMAGE:
                    continue
                y, x = layout.yx(position)
                entries.append(TopImage(int(image), float(score), y, x, boxes.get((path, channel, int(image)))))
            channels.append(entries)
        modules[path] = ModuleScan(path, layout, channels, moments.mean.copy(), moments.std,
                                   moments.active_fraction, (state.box_kinds or {}).get(path))  # fmt: skip
    return ScanResult(
        model={k: v for k, v in loaded.describe().items() if k != "notice"},
        images=[str(p) for p in paths],
        root=str(root),
        settings=settings,
        preprocessing=loaded.preprocess.describe(),
        modules=modules,
        processed=state.processed,
        skipped=list(state.skipped or []),
        complete=complete,
        scan_s=state.scan_s,
        boxes_s=state.boxes_s,
    )


def scan_images(
    loaded: LoadedModel,
    images: Sequence[str | Path],
    settings: ScanSettings,
    *,
    device: str = "cpu",
    root: str | Path | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[ScanProgress], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    checkpoint_every_s: float = CHECKPOINT_EVERY_S,
) -> ScanResult:
    """Scan ``images`` with ``loaded.module`` in this process (see ``run_scan``). The module is moved to ``device``
    and run in eval mode; its hooks are registered once for the scan phase and removed after it."""
    backend = LocalScan(loaded, settings, [Path(p) for p in images], device)
    return run_scan(backend, loaded, images, settings, root=root, out_dir=out_dir, resume=resume, progress=progress,
                    cancelled=cancelled, checkpoint_every_s=checkpoint_every_s)  # fmt: skip


# ============================================================================= the model, for a window ====
def copy_without_hooks(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with none of its hooks: the copy runs the plain network, whatever the live model's
    hook registry and edits do meanwhile, and nothing the copy does reaches them."""
    memo: dict[int, Any] = {}
    for module in model.modules():
        for name, value in vars(module).items():
            if "_hooks" in name and isinstance(value, dict):
                memo[id(value)] = type(value)()  # every hook dict (and its bookkeeping) copies as an empty one
    return copy.deepcopy(model, memo)


def channel_boxes(
    loaded: LoadedModel, result: ScanResult, path: str, channel: int, device: str = "cpu"
) -> list[TopImage]:
    """One channel's top images with their boxes computed now, as the scan's box phase would (one gradient pass for
    the channel's k units): the window scans without boxes and computes them for the channel the user looks at.
    ``loaded`` must be the model the scan ran (its preprocessing is taken from the scan)."""
    module = result.modules[path]
    entries = result.top(path, channel)
    units: list[Unit] = [(path, channel, t.image, t.y * module.layout.width + t.x) for t in entries]
    if not units:
        return []
    preprocess = Preprocess(**result.preprocessing) if result.preprocessing else loaded.preprocess
    scanner = ChannelScanner(loaded.module.to(device), ScanSettings((path,), top=len(units)), device)
    paths = [Path(p) for p in result.images]
    boxes = chunk_boxes(scanner, preprocess, units, read_units(paths, preprocess, units))
    return [TopImage(t.image, t.score, t.y, t.x, box) for t, box in zip(entries, boxes)]
