"""Batch throughput: ``run_batch`` with hooks against bare inference over the same image files, in one process.

Bare inference is what a script without Hookscope would do per image: read the file, preprocess, forward,
backward to the input (``bench.bare_run``), nothing kept or written. The batch is exactly what
``hookscope export --images`` runs (``run_batch``: read-ahead, hooks, writing the export layout drop-behind,
done.json once the files are on disk; PNGs off, as ``--no-png``), without its progress line. The two alternate in
rounds of ``chunk`` images, bare first in even rounds and the batch first in odd ones, so that a machine that slows
down or speeds up during the measurement tilts neither side.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from app.core.batch import find_images, run_batch
from app.core.bench import bare_run
from app.core.hooks import HookRegistry
from app.core.images import read_image
from app.core.models import LoadedModel, load_model


@dataclass(frozen=True)
class BatchBenchResult:
    images: int
    modules: list[str]
    kinds: tuple[str, ...]
    chunk: int  # images per interleaved round
    bare_s: float  # total over all rounds
    batch_s: float
    written_bytes: int
    rounds: tuple[tuple[float, float], ...] = ()  # (bare_s, batch_s) per round

    @property
    def bare_rate(self) -> float:
        return self.images / self.bare_s

    @property
    def batch_rate(self) -> float:
        return self.images / self.batch_s

    @property
    def ratio(self) -> float:
        """Batch throughput over bare throughput (1.0: hooks, writing and the summary cost nothing)."""
        return self.batch_rate / self.bare_rate

    @property
    def round_ratios(self) -> list[float]:
        """Per round, bare time over batch time: their spread shows how noisy the machine was."""
        return [bare / batch for bare, batch in self.rounds]


def write_test_images(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` photo-sized JPEG files of smooth random colour (noise alone would make decoding unrealistic)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        width, height = int(rng.integers(400, 640)), int(rng.integers(300, 480))
        small = rng.integers(0, 256, size=(height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
        picture = Image.fromarray(small).resize((width, height), Image.BILINEAR)
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


def _bare_pass(loaded: LoadedModel, images: list[Path]) -> float:
    start = time.perf_counter()
    for path in images:
        bare_run(loaded.module, loaded.preprocess.to_tensor(read_image(path)))
    return time.perf_counter() - start


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
    """Time bare inference and ``run_batch`` over the same ``n_images`` files, interleaved in rounds of ``chunk``
    images (bare first in even rounds, batch first in odd ones), so that a busy machine tilts neither side."""
    say = note or (lambda _text: None)
    work = Path(tempfile.mkdtemp(prefix="hookscope-batch-bench-", dir=folder))
    try:
        say(f"writing {n_images} test images to {work}")
        write_test_images(work / "images", n_images)
        images = find_images(work / "images")
        loaded = load_model(model, "none", 0)
        modules = layers if isinstance(layers, list) else spread_modules(loaded, layers)
        plan = [(path, kind) for path in modules for kind in kinds]
        rounds_s: list[tuple[float, float]] = []
        with HookRegistry(loaded.module) as registry:
            say("warming up")
            _batch_pass(loaded, registry, plan, images[:2], work / "images", work / "warmup")
            _bare_pass(loaded, images[:2])
            rounds = [images[i : i + chunk] for i in range(0, len(images), max(1, chunk))]
            for index, part in enumerate(rounds):
                say(f"round {index + 1}/{len(rounds)}")
                if index % 2:
                    batch = _batch_pass(loaded, registry, plan, part, work / "images", work / "out")
                    bare = _bare_pass(loaded, part)
                else:
                    bare = _bare_pass(loaded, part)
                    batch = _batch_pass(loaded, registry, plan, part, work / "images", work / "out")
                rounds_s.append((bare, batch))
        written = sum(p.stat().st_size for p in (work / "out").rglob("*") if p.is_file())
        bare_s, batch_s = sum(r[0] for r in rounds_s), sum(r[1] for r in rounds_s)
        return BatchBenchResult(len(images), list(modules), kinds, chunk, bare_s, batch_s, written, tuple(rounds_s))
    finally:
        shutil.rmtree(work, ignore_errors=True)
