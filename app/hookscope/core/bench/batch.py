"""Batch throughput: ``run_batch`` with hooks against bare inference and against a plain-script floor, over the same
image files, in one process.

Bare inference is what a script without Hookscope would do per image: read the file, preprocess, forward,
backward to the input (``bench.bare_run``), nothing kept or written. The floor is what a competent plain PyTorch +
numpy script does to export the same things (``FloorExport``): the same reading and preprocessing, plain hooks
keeping the same tensors (``bench.floor_hooks``, registered once per pass), the same forward and backward as bare,
then the kept tensors written with ``np.save`` / ``np.savez`` (uncompressed, one archive per hook kind, as the
export's layout) through the page cache, into a folder of its own. The batch is exactly what
``hookscope export --images`` runs (``run_batch``: read-ahead, hooks, writing the export layout drop-behind,
done.json once the files are on disk; PNGs off, as ``--no-png``), without its progress line.

The three alternate in rounds of ``chunk`` images, each round in another order with each side first in turn
(``round_orders``), so that a machine that slows down or speeds up during the measurement tilts no side.

The gradients are of the same class in all three: ``bare_run`` differentiates ``out[0].argmax()``, the batch its
"top1" target (``capture.class_ranking``: the highest logit, the lowest index among equal ones), which is the same
class whenever the logits are finite (``argmax`` also returns the first of equal maxima).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.hooks import RemovableHandle

from hookscope.core.engine.floor import bare_run, floor_hooks
from hookscope.core.engine.hooks import GRADIENT_KINDS, HookRegistry, record_key
from hookscope.core.engine.tree import ModelSurvey, survey
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import find_images, folder_names, run_batch
from hookscope.core.outputs.export import ARCHIVES

SIDES = ("bare", "floor", "batch")


@dataclass(frozen=True)
class BatchBenchResult:
    images: int
    modules: list[str]
    kinds: tuple[str, ...]
    chunk: int  # images per interleaved round
    bare_s: float  # total over all rounds
    floor_s: float
    batch_s: float
    batch_bytes: int  # every file the batch wrote (arrays, manifests, done.json, summary.csv)
    floor_bytes: int  # every file the floor wrote (arrays)
    rounds: tuple[tuple[float, float, float], ...] = ()  # (bare_s, floor_s, batch_s) per round

    @property
    def bare_rate(self) -> float:
        return self.images / self.bare_s

    @property
    def floor_rate(self) -> float:
        return self.images / self.floor_s

    @property
    def batch_rate(self) -> float:
        return self.images / self.batch_s

    @property
    def ratio(self) -> float:
        """Batch throughput over bare throughput (1.0: hooks, writing and the summary cost nothing)."""
        return self.bare_s / self.batch_s

    @property
    def floor_ratio(self) -> float:
        """Floor throughput over bare throughput: what plain hooks and plain writes of the same arrays cost."""
        return self.bare_s / self.floor_s

    @property
    def above_floor(self) -> float:
        """Batch throughput over floor throughput (1.0: the batch costs what a plain script does)."""
        return self.floor_s / self.batch_s

    @property
    def round_ratios(self) -> list[float]:
        """Per round, batch over bare throughput: their spread shows how noisy the machine was."""
        return [bare / batch for bare, _, batch in self.rounds]

    @property
    def round_floor_ratios(self) -> list[float]:
        """Per round, floor over bare throughput."""
        return [bare / floor for bare, floor, _ in self.rounds]

    @property
    def round_above_floor(self) -> list[float]:
        """Per round, batch over floor throughput."""
        return [floor / batch for _, floor, batch in self.rounds]


def round_orders(rounds: int) -> list[tuple[str, ...]]:
    """The order of the sides in each round: each side first in turn, the two cyclic orders taking turns, so that
    what a pass leaves behind (in the allocator, the page cache, the processor's caches) falls on each side alike."""
    n = len(SIDES)
    cycle = [SIDES[i:] + SIDES[:i] for i in range(n)] + [tuple(SIDES[i - k] for k in range(n)) for i in range(n)]
    return [cycle[i % len(cycle)] for i in range(rounds)]


def write_test_images(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` photo-sized JPEG files of smooth random colour (noise alone would make decoding unrealistic)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        width, height = int(rng.integers(400, 640)), int(rng.integers(300, 480))
        small = rng.integers(0, 256, size=(height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
        picture = Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR)
        path = folder / f"image-{index:04d}.jpg"
        picture.save(path, quality=90)
        paths.append(path)
    return paths


def spread_modules(loaded: LoadedModel, count: int) -> list[str]:
    """``count`` module paths evenly spread over the model, from the first module to the last."""
    paths = [p for p, _ in loaded.module.named_modules() if p]
    if count >= len(paths):
        return paths
    picks = np.linspace(0, len(paths) - 1, count).round().astype(int)
    return [paths[i] for i in picks]


class FloorExport:
    """What a plain script keeps and writes per image to export what the batch exports: the input, its gradient
    and, per hook kind, one uncompressed ``np.savez`` archive (the export's file name) holding each module's
    tensors under the export's keys (``record_key``: the path, ``#k`` for the k-th later call), one folder per
    image named as the batch names it.

    Use as a context manager around a pass (the hooks are registered on entry and removed on exit); ``write``
    after each image's ``bare_run``. A module's tensors of one kind are named in call order: gradients arrive
    last call first, so their list is reversed. (A module whose output holds several tensors gets one key per
    tensor in the order kept, not the export's ``/leaf`` keys: names only, the bytes are the same.)
    """

    def __init__(
        self, loaded: LoadedModel, known: ModelSurvey, plan: list[tuple[str, str]], names: dict[Path, str], out: Path
    ) -> None:
        self.loaded, self.known, self.plan, self.names, self.out = loaded, known, plan, names, out
        self.kept: dict[tuple[str, str], list[torch.Tensor]] = {step: [] for step in plan}
        self.input_grads: list[torch.Tensor] = []
        self.written: list[Path] = []  # files written since the last ``settle``
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> FloorExport:
        for (path, kind), into in self.kept.items():
            self._handles += floor_hooks(self.loaded.module, [path], (kind,), self.known, into)  # type: ignore[arg-type]

        def keep_input_grad(module: torch.nn.Module, args: tuple) -> None:
            args[0].register_hook(self.input_grads.append)  # bare_run's input, which requires its gradient

        self._handles.append(self.loaded.module.register_forward_pre_hook(keep_input_grad))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def write(self, image: Path, x: torch.Tensor) -> None:
        """Write what the hooks kept of ``image``'s run (``x``: its input), then forget it."""
        folder = self.out / self.names[image]
        folder.mkdir(parents=True, exist_ok=True)
        self._save(folder / "input.npy", x.numpy())
        self._save(folder / "input_grad.npy", self.input_grads[0].numpy())
        for kind in dict.fromkeys(k for _, k in self.plan):
            arrays: dict[str, Any] = {}  # Any: numpy's stubs read a key as savez's allow_pickle
            for path in dict.fromkeys(p for p, k in self.plan if k == kind):
                tensors = self.kept[(path, kind)]
                for call, tensor in enumerate(reversed(tensors) if kind in GRADIENT_KINDS else tensors):
                    arrays[record_key(path, call)] = tensor.numpy()
            with open(folder / ARCHIVES[kind], "wb") as stream:
                np.savez(stream, **arrays)
            self.written.append(folder / ARCHIVES[kind])
        self.input_grads.clear()
        for tensors in self.kept.values():
            tensors.clear()

    def _save(self, path: Path, array: np.ndarray) -> None:
        np.save(path, array)
        self.written.append(path)

    def settle(self) -> None:
        """The files written so far on disk (outside the timing: see ``_floor_pass``)."""
        for path in self.written:
            with open(path, "rb") as stream:
                os.fsync(stream.fileno())
        self.written.clear()


def _plain_pass(
    loaded: LoadedModel, images: list[Path], after: Callable[[Path, torch.Tensor], None] | None = None
) -> float:
    """Bare inference over ``images``: read, preprocess, ``bare_run``; then ``after(image, input)`` if given."""
    start = time.perf_counter()
    for path in images:
        x = loaded.preprocess.to_tensor(read_image(path))
        bare_run(loaded.module, x)
        if after is not None:
            after(path, x)
    return time.perf_counter() - start


def _floor_pass(floor: FloorExport, images: list[Path]) -> float:
    """The floor over ``images``, its hooks registered outside the timing as the batch's are. Its files are then
    put on disk outside the timing too, so that their writeback does not land in the next side's time: the floor
    pays the write into the page cache, as a script does, not the disk: the most favourable floor. (One run each
    on two cores: floor/bare 0.79 so; 0.77 with no fsync at all, the writeback landing where it falls; 0.71 with
    the fsync inside the floor's time.)"""
    with floor:
        elapsed = _plain_pass(floor.loaded, images, floor.write)
    floor.settle()
    return elapsed


def _batch_pass(
    loaded: LoadedModel, registry: HookRegistry, plan: list[tuple[str, str]], images: list[Path], root: Path, out: Path
) -> float:
    for path, kind in plan:  # registered outside the timing, as the window or the CLI does before a batch
        registry.add(path, kind)  # type: ignore[arg-type]
    try:
        start = time.perf_counter()
        run_batch(loaded, registry, images, out, root=root, kinds=tuple(dict.fromkeys(k for _, k in plan)), png=False)
        return time.perf_counter() - start
    finally:
        registry.clear()  # bare inference runs without a single hook


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def batch_benchmark(
    n_images: int = 100,
    layers: int | list[str] = 10,
    *,
    model: str = "resnet18",
    kinds: tuple[str, ...] = ("forward", "backward"),
    chunk: int = 10,
    folder: Path | None = None,
    note: Callable[[str], None] | None = None,
) -> BatchBenchResult:
    """Time bare inference, the floor and ``run_batch`` over the same ``n_images`` files, interleaved in rounds of
    ``chunk`` images in the orders of ``round_orders``, so that a busy machine tilts no side."""
    say = note or (lambda _text: None)
    work = Path(tempfile.mkdtemp(prefix="hookscope-batch-bench-", dir=folder))
    try:
        say(f"writing {n_images} test images to {work}")
        write_test_images(work / "images", n_images)
        images = find_images(work / "images")
        loaded = load_model(model, "none", 0)
        modules = layers if isinstance(layers, list) else spread_modules(loaded, layers)
        plan = [(path, kind) for path in modules for kind in kinds]
        names = dict(zip(images, folder_names(images, work / "images")))
        known = survey(loaded.module, loaded.preprocess.to_tensor(read_image(images[0])).requires_grad_(True))
        rounds_s: list[tuple[float, float, float]] = []
        with HookRegistry(loaded.module) as registry:
            say("warming up")
            _batch_pass(loaded, registry, plan, images[:2], work / "images", work / "warmup")
            _floor_pass(FloorExport(loaded, known, plan, names, work / "warmup-floor"), images[:2])
            _plain_pass(loaded, images[:2])
            floor = FloorExport(loaded, known, plan, names, work / "floor")
            passes = {
                "bare": lambda part: _plain_pass(loaded, part),
                "floor": lambda part: _floor_pass(floor, part),
                "batch": lambda part: _batch_pass(loaded, registry, plan, part, work / "images", work / "out"),
            }
            rounds = [images[i : i + chunk] for i in range(0, len(images), max(1, chunk))]
            for index, (part, order) in enumerate(zip(rounds, round_orders(len(rounds)))):
                say(f"round {index + 1}/{len(rounds)} ({', '.join(order)})")
                times = {side: passes[side](part) for side in order}
                rounds_s.append((times["bare"], times["floor"], times["batch"]))
        return BatchBenchResult(
            images=len(images), modules=list(modules), kinds=kinds, chunk=chunk,
            bare_s=sum(r[0] for r in rounds_s), floor_s=sum(r[1] for r in rounds_s),
            batch_s=sum(r[2] for r in rounds_s), batch_bytes=folder_bytes(work / "out"),
            floor_bytes=folder_bytes(work / "floor"), rounds=tuple(rounds_s),
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
