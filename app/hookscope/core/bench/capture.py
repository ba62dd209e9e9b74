"""What ``hookscope.capture`` costs against the plain PyTorch a careful script would write for the same records.

Both sides do the whole of one call: register the hooks (Act and Grad on every module: a forward hook keeping the
output, a tensor hook keeping its gradient, copies where a later in-place op would overwrite them), run forward and
backward to the input, remove the hooks. ``hookscope.capture`` adds what it hands back (the class ranking, the
records, the model given back as lent). Interleaved in one process, each round in the other order, median of the
per-round ratios: the machine's drift cancels.

    hookscope bench --capture --model resnet50 [--size 224] [--repeat 10]
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from hookscope.core.engine.floor import bare_run, floor_hooks
from hookscope.core.engine.tree import survey
from hookscope.core.outputs.capture import capture


def capture_benchmark(model: nn.Module, size: int = 224, repeat: int = 10, warmup: int = 2) -> dict[str, list[float]]:
    """Times in ms of ``repeat`` rounds of (floor, capture) on every module of ``model``, after ``warmup`` rounds."""
    model.eval()
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    paths = [path for path, _ in model.named_modules() if path]
    hooks = {path: ["act", "grad"] for path in paths}
    known = survey(model, x.clone().requires_grad_(True))  # the floor's script knows where copies are needed

    def floor() -> None:
        kept: list[torch.Tensor] = []
        handles = floor_hooks(model, paths, ("forward", "tensor"), known, kept)
        try:
            bare_run(model, x)
        finally:
            for handle in handles:
                handle.remove()

    def hooked() -> None:
        capture(model, x, hooks)

    times: dict[str, list[float]] = {"floor": [], "capture": []}
    for index in range(warmup + repeat):
        order = [("floor", floor), ("capture", hooked)]
        for name, work in order if index % 2 else reversed(order):
            start = time.perf_counter()
            work()
            if index >= warmup:
                times[name].append((time.perf_counter() - start) * 1000)
    return times


def report(times: dict[str, list[float]], what: str) -> str:
    ratio = statistics.median(c / f for c, f in zip(times["capture"], times["floor"]))
    return (
        f"{what}: hookscope.capture {statistics.median(times['capture']):.1f} ms, plain-PyTorch floor "
        f"{statistics.median(times['floor']):.1f} ms (medians of {len(times['floor'])} interleaved rounds); "
        f"capture / floor = {ratio:.3f}"
    )
