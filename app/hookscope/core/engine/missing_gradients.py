"""Why a ticked gradient has no record: which output parts of a run received no gradient, and the reason for each.

A gradient hook (``tensor`` or ``backward``) records only what the backward pass delivers. An output part gets
nothing when it holds integers, when autograd does not track it (computed under ``torch.no_grad``, detached, from
constants), or when the target does not depend on it (``nn.MultiheadAttention``'s head-averaged attention
weights, a branch whose result is dropped). The survey of the forward pass says which parts were tracked; the
records of the run say which parts got a gradient; what is left is listed here, with the reason in words.

A ``grad_input`` hook (the gradient of the module's inputs) is listed per call: a call none of whose inputs got a
gradient is one entry (leaf ""), because its inputs do not depend on the image (integer indices, a fixed table)
or because the target does not depend on the module. The survey records the module's outputs part by part but its
inputs only as a whole (``ModuleRun.input_needs_grad``), so one input of several that got nothing (an attention
mask beside the queries) is not listed: its record is simply absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hookscope.core.engine.hooks import OUTPUT_GRADIENT_KINDS, Record, record_key
from hookscope.core.engine.tree import ModelSurvey

INPUT_UNTRACKED = (
    "its inputs do not depend on the image (integers such as token indices, or tensors autograd does not track, "
    "such as a fixed table), so no gradient flows back to them"
)


@dataclass(frozen=True)
class MissingGradient:
    """One output part of a module (``path``, ``call``, ``leaf``) that a ``kind`` hook got no gradient for."""

    path: str
    kind: str
    call: int
    leaf: str
    reason: str

    @property
    def key(self) -> str:
        """The key its gradient record would have had (``attention/1``), as in the export's archives."""
        return record_key(self.path, self.call, self.leaf)


def reason_for(autograd: str, target: str) -> str:
    """The reason in words for a part that autograd sees as ``autograd`` (``ModuleRun.leaf_autograd``)."""
    if autograd == "integer":
        return "it holds integers (or booleans), which have no gradient"
    if autograd == "untracked":
        return (
            "autograd does not track it (it was computed under torch.no_grad, detached, or from constants), "
            "so no gradient can flow back to it"
        )
    return (
        f"the target ({target}) does not depend on it: nothing computed from it reaches the target "
        "(e.g. attention weights returned for inspection only, or a result the model drops)"
    )


def input_reason(input_needs_grad: bool, output_autograd: Sequence[str], target: str) -> str:
    """Why a module's inputs got no gradient: they are not tracked, nothing tracked comes out of the module, or the
    target does not depend on what comes out."""
    if not input_needs_grad:
        return INPUT_UNTRACKED
    if output_autograd and "tracked" not in output_autograd:
        what = (
            "integers (or booleans)"
            if "untracked" not in output_autograd
            else ("not tracked by autograd (computed under torch.no_grad, detached, or from constants)")
        )
        return f"what the module returns is {what}, so no gradient flows back through it to its inputs"
    return (
        f"the target ({target}) does not depend on what the module returns, so no gradient flows back through it "
        "to its inputs (e.g. a result the model drops)"
    )


def missing_gradients(
    hooks: Iterable[tuple[str, str]],
    survey: ModelSurvey,
    records: Sequence[Record],
    target: str,
    no_target: str = "",
) -> list[MissingGradient]:
    """Every output part of a module with a gradient hook (``hooks``: (path, kind) pairs) that got no gradient,
    and every call of a module with a ``grad_input`` hook whose inputs got none.

    Modules that did not run are left out: they have no forward record either, and the survey says so. ``target``
    is what was differentiated, in words (``RunResult.target``); ``no_target``, when no gradient was taken at all,
    why (``RunResult.no_target``): then it is every part's reason.
    """
    if no_target:
        reason = f"no gradient was taken in this run: {no_target[0].lower()}{no_target[1:].rstrip('.')}"
        missing = missing_gradients(hooks, survey, records, target)
        return [MissingGradient(m.path, m.kind, m.call, m.leaf, reason) for m in missing]
    have = {(r.path, r.kind, r.call, r.leaf) for r in records}
    calls_with_input_grad = {(r.path, r.call) for r in records if r.kind == "grad_input"}
    missing = []
    for path, kind in hooks:
        if kind == "grad_input":
            run = survey.run_of(path)
            reason = input_reason(run.input_needs_grad, run.leaf_autograd, target)
            missing += [
                MissingGradient(path, kind, call, "", reason)
                for call in range(run.calls)
                if (path, call) not in calls_with_input_grad
            ]
            continue
        if kind not in OUTPUT_GRADIENT_KINDS:
            continue
        run = survey.run_of(path)
        states = run.leaf_autograd or ("tracked",) * len(run.output_leaves)
        for call in range(run.calls):
            for leaf, state in zip(run.output_leaves, states):
                if (path, kind, call, leaf) not in have:
                    missing.append(MissingGradient(path, kind, call, leaf, reason_for(state, target)))
    return missing
