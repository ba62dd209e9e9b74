"""What the Attn tick costs (issue 43): forward + backward to the input of a vision transformer, fused attention.

Four sides, each the whole of one forward and backward (``engine.floor.bare_run``), interleaved in one process,
each round in a rotated order, medians of the per-round ratios against the model alone:

* ``alone``: the model, no hook;
* ``idle``: Attn ticked on every attention module, no run recording (the hooks are on the model; a pre-hook that
  finds no recording returns at once, so every module keeps its fused kernel);
* ``ticked``: Attn ticked on every attention module and recording (each computes its attention explicitly and
  keeps its weights and their gradient);
* ``eager``: the model alone with its attention switched to the unfused computation (timm's ``fused_attn=False``),
  what a hand-written hook on ``attn_drop`` needs, for comparison.

    hookscope bench --attention --model timm/vit_base_patch16_224
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.floor import bare_run
from hookscope.core.engine.hooks import HookRegistry


@dataclass
class AttentionBench:
    modules: int
    times: dict[str, list[float]]  # ms per round, by side

    def median(self, side: str) -> float:
        return statistics.median(self.times[side])

    def ratio(self, side: str) -> float:
        """Median over rounds of ``side`` / ``alone``."""
        return statistics.median(t / a for t, a in zip(self.times[side], self.times["alone"], strict=True))


def attention_benchmark(model: nn.Module, size: int = 224, repeat: int = 5, warmup: int = 1) -> AttentionBench:
    model.eval()
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    registry = HookRegistry(model)
    paths = [path for path, support in registry.attention_modules().items() if support.capturable]
    if not paths:
        raise HookscopeError("The model has no attention module whose weights can be captured.")
    eager = copy.deepcopy(model)
    switched = [m for m in eager.modules() if hasattr(m, "fused_attn")]
    for module in switched:
        setattr(module, "fused_attn", False)  # noqa: B010  (timm's flag; the module's type does not declare it)
    for path in paths:
        registry.add(path, "attention")

    def ticked() -> None:
        with registry.recording(registry.new_recorder()):
            bare_run(model, x)

    def attach(on: bool) -> None:  # the model alone has no hook at all: removed before its round, put back after
        for path in paths:
            if on:
                registry.add(path, "attention")
            else:
                registry.remove(path, "attention")

    sides: dict[str, Callable[[], None]] = {
        "alone": lambda: bare_run(model, x),
        "idle": lambda: bare_run(model, x),
        "ticked": ticked,
    }
    if switched:
        sides["eager"] = lambda: bare_run(eager, x)
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    try:
        for index in range(warmup + repeat):
            order = names[index % len(names) :] + names[: index % len(names)]
            for name in order:
                attach(name != "alone")
                start = time.perf_counter()
                sides[name]()
                if index >= warmup:
                    times[name].append((time.perf_counter() - start) * 1000)
    finally:
        registry.clear()
    return AttentionBench(len(paths), times)


def report(result: AttentionBench, what: str) -> list[str]:
    sides = ", ".join(f"{name} {result.median(name):.1f} ms" for name in result.times)
    ratios = ", ".join(f"{name}/alone {result.ratio(name):.3f}" for name in result.times if name != "alone")
    rounds = len(result.times["alone"])
    return [
        f"{what}: Attn on {result.modules} attention modules, forward+backward, medians of {rounds} interleaved "
        f"rounds: {sides}",
        f"ratios (median of rounds): {ratios}",
    ]
