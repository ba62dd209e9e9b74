"""What hooks cost: bare forward+backward, a plain-PyTorch floor and Hookscope, interleaved in one process, so that
the ratios survive a noisy machine.

The floor is what a careful script without Hookscope would do to see the same things: a forward hook per module
keeping a reference to its output (a copy where a later in-place op overwrites it), a tensor hook per output keeping
its gradient, a full backward hook keeping ``grad_output`` / ``grad_input`` where one works. It shows how far above
the cost of the hooks themselves Hookscope's engine is.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from itertools import permutations

import torch
from torch import nn

from hookscope.core.common.vocabulary import HookKind
from hookscope.core.engine.floor import bare_run, floor_hooks
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.run import run_image
from hookscope.core.engine.tree import survey


@dataclass(frozen=True)
class BenchResult:
    bare_ms: list[float]
    hooked_ms: list[float]
    hooks: int
    floor_ms: list[float]

    @property
    def bare_median(self) -> float:
        return statistics.median(self.bare_ms)

    @property
    def hooked_median(self) -> float:
        return statistics.median(self.hooked_ms)

    @property
    def floor_median(self) -> float:
        return statistics.median(self.floor_ms)

    @property
    def ratio(self) -> float:
        """Median over rounds of hooked/bare, each round measured back to back."""
        return statistics.median(h / b for h, b in zip(self.hooked_ms, self.bare_ms))

    @property
    def floor_ratio(self) -> float:
        """Median over rounds of floor/bare: what the hooks themselves cost."""
        return statistics.median(f / b for f, b in zip(self.floor_ms, self.bare_ms))

    @property
    def above_floor(self) -> float:
        """Median over rounds of hooked/floor: what Hookscope's engine adds to the hooks."""
        return statistics.median(h / f for h, f in zip(self.hooked_ms, self.floor_ms))


def benchmark(
    model: nn.Module,
    paths: list[str],
    kinds: tuple[HookKind, ...] = ("forward", "backward"),
    size: int = 224,
    repeat: int = 10,
    warmup: int = 2,
) -> BenchResult:
    """Time ``repeat`` rounds of (bare, floor, hooked) after ``warmup`` rounds. Both sets of hooks are registered
    outside the timing (as ticks are, before a run) and removed after it, so bare runs without any; what they kept
    is dropped at once, as a result nobody looks at would be. Each round runs the three in another order, so that
    none always follows the same one (what the previous run left in the allocator shows in the next)."""
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    known = survey(model, x.clone().requires_grad_(True))
    registry = HookRegistry(model)
    orders = list(permutations(("bare", "floor", "hooked")))
    times: dict[str, list[float]] = {"bare": [], "floor": [], "hooked": []}

    def run(which: str) -> float:
        kept: list[torch.Tensor] = []
        handles = floor_hooks(model, paths, kinds, known, kept) if which == "floor" else []
        if which == "hooked":
            for path in paths:
                for kind in kinds:
                    registry.add(path, kind)
        try:
            start = time.perf_counter()
            if which == "hooked":
                run_image(model, registry, x)
            else:
                bare_run(model, x)
            return (time.perf_counter() - start) * 1000
        finally:
            for handle in handles:
                handle.remove()
            registry.clear()

    for path in paths:
        for kind in kinds:
            registry.add(path, kind)
    hooks = len(registry.handles())
    registry.clear()
    try:
        for index in range(warmup + repeat):
            round_ms = {which: run(which) for which in orders[index % len(orders)]}
            if index >= warmup:
                for which, ms in round_ms.items():
                    times[which].append(ms)
        return BenchResult(times["bare"], times["hooked"], hooks, times["floor"])
    finally:
        registry.clear()
