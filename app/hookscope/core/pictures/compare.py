"""Comparing two runs: image A against image B, or a run with edits against one without.

Arrays are compared as captured, (1, C, ...) or (C, ...); channels are along the first non-batch axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.hooks import Record

ArrayLike = Record | torch.Tensor | np.ndarray


def as_array(value: ArrayLike) -> np.ndarray:
    """A record's (or tensor's) values as float32 numpy."""
    if isinstance(value, Record):
        value = value.tensor
    if isinstance(value, torch.Tensor):
        value = value.detach().to("cpu", torch.float32).numpy()
    return np.asarray(value, dtype=np.float32)


def difference(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """``a - b`` as float32, for the panels' "difference" view; the shapes must match."""
    left, right = as_array(a), as_array(b)
    if left.shape != right.shape:
        raise HookscopeError(f"A has shape {left.shape} and B {right.shape}: only equal shapes can be compared.")
    return left - right


def _by_channel(values: np.ndarray) -> np.ndarray:
    """(C, rest): the batch axis of a (1, C, ...) array dropped, the rest flattened; a vector is C channels of one."""
    if values.ndim >= 2 and values.shape[0] == 1:
        values = values[0]
    if values.ndim == 0:
        return values.reshape(1, 1)
    return values.reshape(values.shape[0], -1)


def channel_differences(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Mean |a - b| per channel, float32 (C,)."""
    return _by_channel(np.abs(difference(a, b))).mean(axis=1).astype(np.float32)


def rank_channels_by_difference(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Channel indices, the channel that differs most (mean |a - b|) first; ties keep channel order."""
    scores = channel_differences(a, b)
    return np.argsort(-scores, kind="stable")


@dataclass(frozen=True)
class RecordPair:
    kind: str
    key: str
    a: Record | None
    b: Record | None  # None when only one run has the record (e.g. a module skipped on one image)


def pair_records(result_a: RunResult, result_b: RunResult) -> list[RecordPair]:
    """The records of two runs matched by (kind, key), in A's order, then the ones only B has."""
    in_b = {(r.kind, r.key): r for r in result_b.records}
    pairs, seen = [], set()
    for record in result_a.records:
        ident = (record.kind, record.key)
        if ident in seen:
            continue
        seen.add(ident)
        pairs.append(RecordPair(record.kind, record.key, record, in_b.get(ident)))
    for ident, record in in_b.items():
        if ident not in seen:
            pairs.append(RecordPair(ident[0], ident[1], None, record))
    return pairs


@dataclass(frozen=True)
class PredictionChange:
    """One of the top classes after a change, with its probability before and the change."""

    index: int
    label: str
    probability: float
    before: float

    @property
    def delta(self) -> float:
        return self.probability - self.before


def _probabilities(scores: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.detach().float().cpu()[0], dim=0)


def prediction_changes(after: RunResult, before: torch.Tensor | RunResult | None = None) -> list[PredictionChange]:
    """``after``'s top-5 with each class's probability in ``before`` and the change.

    ``before`` is another run (e.g. image B, or the run without edits), its class scores, or, by default,
    ``after.baseline_scores`` (``capture_run(..., baseline=True)``). Empty when either has no class scores.
    """
    if before is None:
        before = after.baseline_scores
    if isinstance(before, RunResult):
        before = before.scores
    if before is None or after.scores is None:
        return []
    if before.shape != after.scores.shape:
        raise HookscopeError(f"The runs have {before.shape[-1]} and {after.scores.shape[-1]} classes: not comparable.")
    old = _probabilities(before)
    return [PredictionChange(p.index, p.label, p.probability, float(old[p.index])) for p in after.top5]
