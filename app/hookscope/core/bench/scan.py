"""Scan throughput: the dataset scan against bare batched inference over the same image files, in one process.

Bare batched inference is what a script without Hookscope would do over a folder: read and preprocess the images
(read ahead in a thread, exactly as the scan reads them), stack them into batches of the same size, run the model
forward under ``torch.no_grad``; nothing hooked, nothing kept. The scan is ``scan_images`` without the receptive
field boxes: the hooks, their per-channel reductions, the running top-k and statistics, as one scan of the whole
folder (as ``hookscope scan`` makes it). The two alternate over the same files, bare-scan then scan-bare and so on
(``rounds`` passes of each), so a machine that gets busier or quieter during the measurement tilts neither side.
The last scan pass also computes the default boxes (receptive fields from the architecture, where it allows them),
timed apart from its scan: their share of the whole scan is printed. The exact boxes (``--exact-boxes``: one gradient
pass per top-k entry, modules x channels x k, however many images there are) are timed on up to 16 entries per
module of the last scan, and that whole box phase is estimated from them.

Run it with ``hookscope bench --scan`` or ``python -m hookscope.core.bench.scan``. ``python -m hookscope.core.bench.scan
--small-batches`` times instead a plain one-image-at-a-time loop against the scan at batch size 1 and 32
(``small_batches``), the figures of docs/scan.md's "Small batches".
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from hookscope.core.bench.batch import spread_modules, write_test_images
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import Preprocess, read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import READ_AHEAD, find_images, read_ahead
from hookscope.core.scan.accumulators import Unit
from hookscope.core.scan.boxes import chunk_boxes
from hookscope.core.scan.channel_scanner import ChannelScanner
from hookscope.core.scan.reading import fit_batch, read_units, stacked
from hookscope.core.scan.results import ScanResult, ScanSettings
from hookscope.core.scan.run import scan_images


@dataclass(frozen=True)
class ScanBenchResult:
    model: str
    images: int
    modules: list[str]
    batch_size: int
    size: int  # input pixels (the crop)
    bare_s: float  # total over all rounds (each a pass over every image)
    scan_s: float
    rounds: tuple[tuple[float, float], ...]  # (bare_s, scan_s) per round
    box_ms: dict[str, float]  # per module: milliseconds per top-k entry's box
    box_estimate_s: float  # the whole --exact-boxes phase (every module, channel and rank), from box_ms
    top: int = 9
    boxes_s: float = 0.0  # the default box phase of the last scan pass
    last_scan_s: float = 0.0  # the scan phase of that pass
    box_definitions: tuple[str, ...] = ()  # per module, what its default boxes are

    @property
    def box_share(self) -> float:
        """The default box phase's share of the whole scan (scan phase + box phase) of the last pass."""
        total = self.boxes_s + self.last_scan_s
        return self.boxes_s / total if total > 0 else 0.0

    @property
    def ratio(self) -> float:
        """Scan throughput over bare throughput (1.0: the hooks and the bookkeeping cost nothing)."""
        return self.bare_s / self.scan_s

    @property
    def round_ratios(self) -> list[float]:
        return [bare / scan for bare, scan in self.rounds]


def bare_batched_pass(
    module: torch.nn.Module, preprocess: Preprocess, images: Sequence[Path], batch_size: int
) -> float:
    """Seconds to read, preprocess, stack and run ``images`` forward in batches, with nothing hooked."""
    start = time.perf_counter()
    batches = [list(range(i, min(i + batch_size, len(images)))) for i in range(0, len(images), batch_size)]
    with closing(read_ahead(batches, lambda b: fit_batch(images, preprocess, b), READ_AHEAD)) as reads:
        for _batch, future in reads:
            x = stacked(preprocess, future.result()[0])  # torch here, not in the reader thread (as the scan does)
            if x is not None:
                with torch.no_grad():
                    module(x)
    return time.perf_counter() - start


def box_timings(loaded: LoadedModel, result: ScanResult, per_module: int = 16) -> dict[str, float]:
    """Milliseconds per box, per module: the boxes of the best image of the first ``per_module`` channels."""
    timings = {}
    paths = [Path(p) for p in result.images]
    for path, module in result.modules.items():
        units: list[Unit] = [(path, c, top[0].image, top[0].y * module.layout.width + top[0].x)
                             for c, top in enumerate(module.top[:per_module]) if top]  # fmt: skip
        scanner = ChannelScanner(loaded.module, ScanSettings((path,)))
        start = time.perf_counter()
        chunk_boxes(scanner, loaded.preprocess, units, read_units(paths, loaded.preprocess, units))
        timings[path] = 1000 * (time.perf_counter() - start) / max(1, len(units))
    return timings


def scan_benchmark(
    n_images: int = 96,
    layers: int | list[str] = 4,
    *,
    model: str = "resnet18",
    batch_size: int = 16,
    top: int = 9,
    size: int | None = None,
    rounds: int = 4,
    folder: Path | None = None,
    note: Callable[[str], None] | None = None,
) -> ScanBenchResult:
    """Time bare batched inference and the scan over the same ``n_images`` files, ``rounds`` passes each,
    alternating which goes first; ``size`` replaces the model's input size (its crop; the resize keeps torchvision's
    256/224)."""
    say = note or (lambda _text: None)
    work = Path(tempfile.mkdtemp(prefix="hookscope-scan-bench-", dir=folder))
    try:
        say(f"writing {n_images} test images to {work}")
        write_test_images(work / "images", n_images)
        images = find_images(work / "images")
        loaded = load_model(model, "none", 0)
        if size:
            loaded.preprocess = replace(loaded.preprocess, crop=size, resize=size * 256 // 224)
        modules = layers if isinstance(layers, list) else spread_modules(loaded, layers)
        plain = ScanSettings(tuple(modules), top=top, batch_size=batch_size, boxes=False)
        say("warming up")
        bare_batched_pass(loaded.module, loaded.preprocess, images[:batch_size], batch_size)
        scan_images(loaded, images[:batch_size], plain)
        timings: list[tuple[float, float]] = []
        for index in range(max(1, rounds)):
            say(f"round {index + 1}/{rounds}")
            settings = replace(plain, boxes=True) if index == max(1, rounds) - 1 else plain  # the last: boxes too
            if index % 2:
                result = scan_images(loaded, images, settings)
                bare = bare_batched_pass(loaded.module, loaded.preprocess, images, batch_size)
            else:
                bare = bare_batched_pass(loaded.module, loaded.preprocess, images, batch_size)
                result = scan_images(loaded, images, settings)
            timings.append((bare, result.scan_s))
        say("timing receptive-field boxes")
        box_ms = box_timings(loaded, result)
        estimate = sum(box_ms[p] * m.channels * top for p, m in result.modules.items()) / 1000
        return ScanBenchResult(
            model, len(images), list(modules), batch_size, loaded.preprocess.crop, sum(t[0] for t in timings),
            sum(t[1] for t in timings), tuple(timings), box_ms, estimate, top, result.boxes_s, result.scan_s,
            tuple(str(m.boxes) for m in result.modules.values()),
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def plain_loop(loaded: LoadedModel, images: Sequence[Path], modules: Sequence[str]) -> float:
    """Seconds for what a script without Hookscope does one image at a time: read, preprocess, run the whole model
    under ``torch.no_grad`` with forward hooks taking each channel's max and mean on ``modules``."""
    named = dict(loaded.module.named_modules())

    def hook(_module: torch.nn.Module, _args: tuple, output: torch.Tensor) -> None:
        dims = tuple(range(2, output.dim()))
        output.amax(dim=dims), output.mean(dim=dims)

    handles = [named[path].register_forward_hook(hook) for path in modules]
    loaded.module.eval()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            for path in images:
                loaded.module(loaded.preprocess.as_input(loaded.preprocess.fitted(read_image(path))))
        return time.perf_counter() - start
    finally:
        for handle in handles:
            handle.remove()


def small_batches(n_images: int = 40, layers: Sequence[str] = ("layer2", "layer3"), *, model: str = "resnet18",
                  rounds: int = 5, folder: Path | None = None) -> dict[str, float]:  # fmt: skip
    """Median seconds over ``rounds`` alternating rounds, in one process over the same files: the plain loop, the
    scan (default boxes) at batch size 1 and at 32."""
    work = Path(tempfile.mkdtemp(prefix="hookscope-scan-bench-", dir=folder))
    try:
        write_test_images(work / "images", n_images)
        images = find_images(work / "images")
        loaded = load_model(model, "none", 0)
        settings = ScanSettings(tuple(layers), top=9)
        runs = {"plain": lambda: plain_loop(loaded, images, layers),
                "batch 1": lambda: scan_images(loaded, images, replace(settings, batch_size=1)),
                "batch 32": lambda: scan_images(loaded, images, replace(settings, batch_size=32))}  # fmt: skip
        plain_loop(loaded, images[:2], layers), scan_images(loaded, images[:2], settings)  # warm up
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _round in range(max(1, rounds)):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        return {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(result: ScanBenchResult) -> list[str]:
    """The benchmark's lines, as ``hookscope bench --scan`` prints them."""
    rounds = result.round_ratios
    median = sorted(rounds)[len(rounds) // 2]
    return [
        f"modules scanned: {', '.join(result.modules)}",
        f"{result.model}, {result.images} images at {result.size}x{result.size}, batches of {result.batch_size}, "
        f"{len(result.modules)} modules, {len(result.rounds)} alternating passes each: bare batched inference "
        f"{result.images * len(result.rounds) / result.bare_s:.2f} img/s, scan "
        f"{result.images * len(result.rounds) / result.scan_s:.2f} img/s, ratio {result.ratio:.3f}",
        f"per-pass ratios ({torch.get_num_threads()} torch threads; median {median:.3f}): "
        + ", ".join(f"{r:.2f}" for r in rounds),
        f"boxes (default: {', '.join(sorted(set(result.box_definitions)))}): {result.boxes_s:.2f} s after a "
        f"{result.last_scan_s:.2f} s scan, {100 * result.box_share:.1f}% of the whole scan",
        "--exact-boxes (gradient boxes, a fixed cost, not per image), ms per top-k entry: "
        + ", ".join(f"{path} {ms:.0f}" for path, ms in result.box_ms.items())
        + f"; that box phase (every channel, top {result.top}) would take about {result.box_estimate_s:.0f} s",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hookscope.core.bench.scan", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--images", type=int, help="test images (default: 96; 40 with --small-batches)")
    parser.add_argument("--layers", help="module paths separated by commas (default: 4 spread over the model)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--top", type=int, default=9)
    parser.add_argument("--size", type=int, default=0, help="input size in pixels (default: the model's own)")
    parser.add_argument("--small-batches", action="store_true",
                        help="a plain one-image loop against the scan at batch size 1 and 32 (default: 40 images, "
                        "layer2,layer3)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.small_batches:
        picked = [p.strip() for p in (args.layers or "layer2,layer3").split(",") if p.strip()]
        images = args.images or 40
        med = small_batches(images, picked, model=args.model, rounds=args.rounds)
        print(f"{args.model}, {images} images, {','.join(picked)}, {torch.get_num_threads()} torch threads, median of "
              f"{args.rounds}: plain loop {med['plain']:.2f} s, scan at batch 1 {med['batch 1']:.2f} s, at 32 "
              f"{med['batch 32']:.2f} s; batch 1 / 32 {med['batch 1'] / med['batch 32']:.2f}, batch 1 / plain "
              f"{med['batch 1'] / med['plain']:.2f}")  # fmt: skip
        return 0
    layers: int | list[str] = [p.strip() for p in args.layers.split(",") if p.strip()] if args.layers else 4
    result = scan_benchmark(args.images or 96, layers, model=args.model, batch_size=args.batch_size, top=args.top,
                            size=args.size or None, note=lambda text: print(f"scan bench: {text}", flush=True))  # fmt: skip
    for line in report(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
