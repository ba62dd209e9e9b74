"""Will it fit? Refuse a size or a count that cannot fit in memory before allocating it, saying what would fit.

The need is a lower bound, never a guess that could refuse what works: the tensors a run must hold at once (its
input, the parameters it optimises, the activations autograd keeps), from the model's own activation bytes per
input pixel measured by one small forward pass (``activation_bytes``), against the memory available now (the
device's free memory on a GPU; on the CPU, Linux's MemAvailable, less where a cgroup limits the process).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.structure import tensor_leaves

PROBE_SIZE = 64  # pixels: small enough to cost nothing, large enough for every catalogue convnet


def _bytes(value: int | float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value / 1e3:.0f} kB"


def available_memory(device: str | torch.device = "cpu") -> int | None:
    """Bytes that can be allocated now on ``device``; None when this system does not say."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # a container's limit (cgroup v2) is lower than the machine's memory
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            free = min(free if free is not None else math.inf, int(limit) - used)  # type: ignore[assignment]
    except (OSError, ValueError):
        pass
    if free is None and hasattr(os, "sysconf"):
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return None
    return None if free is None else max(0, int(free))


@dataclass(frozen=True)
class ActivationBytes:
    """Per input pixel of one image: every module output of a forward pass together (what autograd keeps), the
    same as far as a module (``upto``, included), and the largest one as far as it (what even a pass without
    gradients must hold)."""

    total: float
    upto: float
    largest: float
    shapes: dict[str, tuple[int, ...]]  # the first output's shape of each ``upto`` module, at the probe's size


def activation_bytes(module: nn.Module, channels: int, upto: str | Collection[str] | None = None,
                     probe: int = PROBE_SIZE) -> ActivationBytes:  # fmt: skip
    """Measured by one forward pass of ``probe`` x ``probe`` pixels without gradients; ``upto``: a module path, or
    several (then the first of them to run: a lower bound for each). Outputs that share storage
    (an in-place ReLU's) count once. A model that refuses the probe's size counts as zero (the input alone is then
    the bound; the real run says what the model refuses, in its own words)."""
    seen: dict[int, int] = {}
    kept: list[torch.Tensor] = []  # alive until the end, so that no address is reused for another output
    upto_bytes: list[int] = []
    named = dict(module.named_modules())
    paths = [upto] if isinstance(upto, str) else list(upto or [])
    targets = {id(named[p]): p for p in paths if p in named}
    shapes: dict[str, tuple[int, ...]] = {}

    largest = [0]

    def hook(current: nn.Module, _args: object, output: object) -> None:
        for _name, tensor in tensor_leaves(output):
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
            kept.append(tensor)
            if not upto_bytes:
                largest[0] = max(largest[0], storage.nbytes())
        if id(current) in targets:
            first = next(iter(tensor_leaves(output)), None)
            if first is not None:
                shapes.setdefault(targets[id(current)], tuple(first[1].shape))
            if not upto_bytes:
                upto_bytes.append(sum(seen.values()))

    handles = [m.register_forward_hook(hook) for m in module.modules()]
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    training = {m: m.training for m in module.modules()}
    module.eval()  # the probe must not move a BatchNorm's running statistics
    try:
        with torch.no_grad():
            module(torch.zeros(1, channels, probe, probe, device=device))
    except Exception:
        return ActivationBytes(0.0, 0.0, 0.0, {})
    finally:
        for handle in handles:
            handle.remove()
        for m, mode in training.items():
            m.training = mode
    pixels = probe * probe
    total = sum(seen.values())
    return ActivationBytes(total / pixels, (upto_bytes[0] if upto_bytes else total) / pixels, largest[0] / pixels,
                           shapes)  # fmt: skip


def largest_fitting(need: Callable[[int], float], low: int, high: int, free: float) -> int | None:
    """The largest n in [low, high] with ``need(n) <= free`` (``need`` grows with n); None when not even ``low``."""
    if need(low) > free:
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if need(middle) <= free:
            low = middle
        else:
            high = middle - 1
    return low


def refuse_unless_fits(what: str, value: int, need: Callable[[int], float], low: int, free: int | None,
                       option: str, other: str = "") -> None:  # fmt: skip
    """Raise one line when ``need(value)`` bytes exceed ``free``, with the largest value of ``option`` that fits.

    ``what`` names the allocation (``one batch of 32 images``); ``other`` names another way out."""
    if free is None or need(value) <= free:
        return
    fits = largest_fitting(need, low, value - 1, free) if value > low else None
    advice = f"at most {option} {fits} would fit" if fits is not None else f"not even {option} {low} would fit"
    raise HookscopeError(
        f"{option} {value} needs at least {_bytes(need(value))} of memory for {what}, more than the "
        f"{_bytes(free)} available; {advice}{other}."
    )
