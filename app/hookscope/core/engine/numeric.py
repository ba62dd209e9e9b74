"""NaN and inf: where a run's numbers broke down, said in one line instead of silence.

A model with NaN or inf in its weights (a diverged training run, a bad conversion) gives NaN class scores; the top-5
then ranks nothing, every gradient is NaN, and the pictures (which draw NaN as 0) look like an all-zero gradient. So
after a run Hookscope checks the weights, the output (class scores), the input gradient and every capture, and says
what is not finite: ``hookscope export`` prints a warning line on stderr and writes ``non_finite`` into
``manifest.json``; the window shows a banner.

Checking is cheap: a tensor's sum is finite exactly when none of its values is NaN or inf (barring an overflow of
huge finite values, which only leads to the exact count), so only the tensors that fail that test are counted value
by value; the weights' answer is kept per model until a parameter changes (its version counter).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from hookscope.core.common.vocabulary import word_of
from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.structure import tensor_leaves


@dataclass(frozen=True)
class NonFinite:
    """How many values of one tensor are NaN or inf."""

    name: str  # a parameter or buffer name, a record key, "output" or "input gradient"
    nan: int
    inf: int
    values: int

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "nan": self.nan, "inf": self.inf, "values": self.values}

    @classmethod
    def from_description(cls, data: dict[str, Any]) -> NonFinite:
        return cls(str(data["name"]), int(data["nan"]), int(data["inf"]), int(data["values"]))

    @property
    def words(self) -> str:
        """``NaN in 3 of 40 values``"""
        kinds = " and ".join(k for k, n in (("NaN", self.nan), ("inf", self.inf)) if n)
        return (
            f"{kinds} in {self.nan + self.inf if self.nan + self.inf < self.values else 'all'} of {self.values} values"
        )


@dataclass(frozen=True)
class NumericReport:
    """What in a run was not finite: weights (parameters and buffers), output, input gradient, captures."""

    weights: list[NonFinite] = field(default_factory=list)
    output: NonFinite | None = None
    input_grad: NonFinite | None = None
    records: list[NonFinite] = field(default_factory=list)  # in the order the hooks recorded them

    @property
    def clean(self) -> bool:
        return not (self.weights or self.output or self.input_grad or self.records)

    def describe(self) -> dict[str, Any] | None:
        """The manifest's ``non_finite``: None when every number was finite."""
        if self.clean:
            return None
        return {
            "weights": [w.describe() for w in self.weights],
            "output": self.output.describe() if self.output else None,
            "input_grad": self.input_grad.describe() if self.input_grad else None,
            "records": [r.describe() for r in self.records],
        }

    @classmethod
    def from_description(cls, data: dict[str, Any] | None) -> NumericReport:
        """The report a manifest's ``non_finite`` describes (``describe`` read back)."""
        if not data:
            return cls()
        one = NonFinite.from_description
        return cls(
            weights=[one(w) for w in data.get("weights", [])],
            output=one(data["output"]) if data.get("output") else None,
            input_grad=one(data["input_grad"]) if data.get("input_grad") else None,
            records=[one(r) for r in data.get("records", [])],
        )

    def line(self) -> str:
        """One sentence for stderr and the window's banner ("" when every number was finite)."""
        if self.clean:
            return ""
        parts = []
        if self.output is not None:
            parts.append(f"the model's output holds {self.output.words}")
        if self.weights:
            first = self.weights[0]
            more = f" and {len(self.weights) - 1} more tensors" if len(self.weights) > 1 else ""
            parts.append(f"its weights hold NaN or inf ({first.name}: {first.words}{more})")
        elif self.output is not None:
            parts.append("its weights are finite, so the values overflowed or were divided by zero on the way")
        if self.records:
            parts.append(f"the first capture with NaN or inf is {self.records[0].name}")
        if self.input_grad is not None and self.output is None:
            parts.append(f"the input gradient holds {self.input_grad.words}")
        consequence = (
            "the predictions and gradients of this run mean nothing"
            if self.output is not None or self.input_grad is not None
            else "the captures shown with NaN or inf (drawn as 0) mean nothing"
        )
        text = "; ".join(parts)
        return f"NaN or inf: {text}: {consequence}."


def count_non_finite(name: str, tensor: torch.Tensor) -> NonFinite | None:
    """The NaN and inf in ``tensor`` (None when all finite or not floating point)."""
    if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
        return None
    data = tensor.detach()
    if data.device.type == "cpu" and data.layout == torch.strided and data.dtype != torch.bfloat16:
        # numpy for a CPU tensor: a batch export checks its captures in its writer thread, where a torch reduction
        # would start a second OpenMP team and slow the model's own threads down (app/hookscope/core/outputs/batch.py says how much)
        values = data.resolve_conj().resolve_neg().numpy()
        with np.errstate(invalid="ignore", over="ignore"):  # the sum is a probe: inf - inf or an overflow is its answer
            total = values.sum(dtype=np.float32) if values.dtype == np.float16 else values.sum()
        if np.isfinite(total):
            return None
        nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
    else:
        if bool(torch.isfinite(data.sum())):
            return None
        nan = int(torch.isnan(data).sum())
        inf = int(torch.isinf(data).sum())
    if nan == 0 and inf == 0:  # only the sum overflowed: every value is finite
        return None
    return NonFinite(name, nan, inf, data.numel())


def first_non_finite_output(model: nn.Module, run: Callable[[], object]) -> str | None:
    """The path of the first module whose output held NaN or inf while ``run()`` ran ``model`` (a hook fires as its
    module returns, so the first is the innermost module that made them); None when none did."""
    found: list[str] = []

    def watch(path: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            if not found and any(count_non_finite(path, t) for _, t in tensor_leaves(output)):
                found.append(path)

        return hook

    handles = [module.register_forward_hook(watch(path)) for path, module in model.named_modules() if path]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


_WEIGHTS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[int, ...], list[NonFinite]]] = weakref.WeakKeyDictionary()


def non_finite_weights(module: nn.Module) -> list[NonFinite]:
    """The model's parameters and buffers that hold NaN or inf (kept until a parameter changes)."""
    tensors = list(module.named_parameters()) + list(module.named_buffers())
    versions = tuple(t._version for _, t in tensors) + (len(tensors),)
    known = _WEIGHTS.get(module)
    if known is not None and known[0] == versions:
        return list(known[1])
    with torch.no_grad():
        found = [bad for name, t in tensors if (bad := count_non_finite(name, t)) is not None]
    _WEIGHTS[module] = (versions, found)
    return list(found)


def numeric_report(module: nn.Module, result: RunResult, *, records: bool = True) -> NumericReport:
    """What in ``result`` (and ``module``'s weights) is not finite. ``records=False`` skips the captures (the window
    draws those itself, saying how many values it replaced)."""
    output = result.scores  # class scores; other outputs show in the captures and the input gradient
    found_records = []
    if records:
        for record in result.records:
            bad = count_non_finite(f"{record.key} ({word_of(record.kind)})", record.tensor)  # fc (act)
            if bad is not None:
                found_records.append(bad)
    return NumericReport(
        weights=non_finite_weights(module),
        output=count_non_finite("output", output) if output is not None else None,
        input_grad=count_non_finite("input gradient", result.input_grad) if result.input_grad is not None else None,
        records=found_records,
    )
