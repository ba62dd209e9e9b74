"""Hooked against bare forward+backward, interleaved in one process, so that the ratio survives a noisy machine."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

from app.core.capture import capture_run
from app.core.hooks import HookKind, HookRegistry


@dataclass(frozen=True)
class BenchResult:
    bare_ms: list[float]
    hooked_ms: list[float]
    hooks: int

    @property
    def bare_median(self) -> float:
        return statistics.median(self.bare_ms)

    @property
    def hooked_median(self) -> float:
        return statistics.median(self.hooked_ms)

    @property
    def ratio(self) -> float:
        """Median over pairs of hooked/bare, each pair measured back to back."""
        return statistics.median(h / b for h, b in zip(self.hooked_ms, self.bare_ms))


def bare_run(model: nn.Module, x: torch.Tensor) -> None:
    """The same work as ``capture_run`` without any hook: forward, top-1 logit, backward to the input."""
    with torch.enable_grad():
        xin = x.detach().clone().requires_grad_(True)
        out = model(xin)
        objective = out[0, out[0].argmax()]
        torch.autograd.backward(objective, inputs=[xin])


def benchmark(
    model: nn.Module,
    paths: list[str],
    kinds: tuple[HookKind, ...] = ("forward", "backward"),
    size: int = 224,
    repeat: int = 10,
    warmup: int = 2,
) -> BenchResult:
    """Time ``repeat`` interleaved pairs (bare, hooked) after ``warmup`` pairs; hooks are added outside the timing."""
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    registry = HookRegistry(model)
    bare, hooked = [], []
    try:
        for index in range(warmup + repeat):
            registry.clear()
            start = time.perf_counter()
            bare_run(model, x)
            bare_ms = (time.perf_counter() - start) * 1000
            for path in paths:
                for kind in kinds:
                    registry.add(path, kind)
            start = time.perf_counter()
            capture_run(model, registry, x)
            hooked_ms = (time.perf_counter() - start) * 1000
            if index >= warmup:
                bare.append(bare_ms)
                hooked.append(hooked_ms)
        return BenchResult(bare, hooked, len(registry.handles()))
    finally:
        registry.clear()
