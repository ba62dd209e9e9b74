"""Which modules of a model the lessons run on: :func:`plan` picks them from a survey, without running the model."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.tree import ModelSurvey, ModuleRun


@dataclass(frozen=True)
class Picks:
    """The modules the lessons use on one model (None: the model has none that fits).

    ``first``: the first module with parameters (the image goes into it); ``layer``: one at mid depth with one tensor
    in and out; ``grad_layer``: the same where a full backward hook works too (no in-place op after it); ``head``:
    the module whose output is the model's output; ``blocks``: containers of several operations where a full
    backward hook works (``block`` the first); ``victim``: a module whose output an in-place module (``culprit``)
    overwrites next.
    """

    first: str | None = None
    layer: str | None = None
    grad_layer: str | None = None
    head: str | None = None
    blocks: tuple[str, ...] = ()
    victim: str | None = None
    culprit: str | None = None

    @property
    def block(self) -> str | None:
        return self.blocks[0] if self.blocks else None

    def path(self, role: str) -> str:
        """The module picked for ``role`` (a field, or "block"); a lesson asks only for the one it needs, which
        ``Lesson.prepare`` made sure is there (else the built-in network is used)."""
        path = getattr(self, role)
        if path is None:
            raise HookscopeError(f"This model has {MISSING.get(role, f'no module for {role}')}.")
        return str(path)


def is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


def _single(run: ModuleRun) -> bool:
    """Runs once, takes a tensor that depends on the image, returns one tensor, does not write into its input."""
    return (
        run.calls == 1
        and run.output_form == "tensor"
        and len(run.output_shapes) == 1
        and not run.modifies_input
        and run.input_needs_grad
    )


def _hookable(run: ModuleRun) -> bool:
    """``_single``, and no in-place op changes its output later: a full backward hook works too."""
    return _single(run) and not run.output_modified_later


def _middle(paths: list[str], known: ModelSurvey) -> str | None:
    """The middle one, among those with spatial (N, C, H, W) output if there are any."""
    spatial = [p for p in paths if len(known.runs[p].output_shapes[0]) == 4] or paths
    return spatial[len(spatial) // 2] if spatial else None


def plan(model: nn.Module, known: ModelSurvey) -> Picks:
    """Pick the modules the lessons run on from a survey of ``model`` (``hookscope.core.engine.tree.survey``): no model runs."""
    modules = dict(model.named_modules())
    order = [path for path in known.runs if path in modules]  # modules in the order they (first) finished
    leaves = [p for p in order if p and is_leaf(modules[p])]
    weighted = [
        p
        for p in leaves
        if _single(known.runs[p])
        and any(True for _ in modules[p].parameters(recurse=False))
        and len(known.runs[p].output_shapes[0]) >= 2
    ]
    strict = [p for p in weighted if _hookable(known.runs[p])]
    root = known.run_of("")
    head = None
    if root.output_form == "tensor" and root.output_shapes:
        # the last module that gives the model's output (or the same numbers reshaped, as a flatten does)
        size = math.prod(root.output_shapes[0])
        same = [
            p
            for p in leaves
            if known.runs[p].calls == 1
            and known.runs[p].output_form == "tensor"
            and math.prod(known.runs[p].output_shapes[0]) == size
        ]
        head = same[-1] if same else None
    blocks = tuple(
        path
        for path in order
        if path
        and not is_leaf(modules[path])
        and _hookable(known.runs[path])
        and sum(1 for p in leaves if p.startswith(path + ".")) >= 2
    )
    victim = culprit = None
    for path, after in zip(order, order[1:]):
        if (
            path in leaves
            and known.runs[path].output_modified_later
            and known.runs[path].output_form == "tensor"
            and after in leaves
            and known.runs[after].modifies_input
            and getattr(modules[after], "inplace", False) is True
        ):
            victim, culprit = path, after
            break
    return Picks(
        first=weighted[0] if weighted else None,
        layer=_middle(strict, known) or _middle(weighted, known),
        grad_layer=_middle(strict, known),
        head=head,
        blocks=blocks,
        victim=victim,
        culprit=culprit,
    )


# What the model lacks when a role has no module (the lesson then runs on the built-in network).
MISSING = {
    "first": "no module with parameters that takes one tensor",
    "layer": "no module with parameters that takes one tensor and returns one",
    "head": "no module whose output is the model's output",
    "grad_layer": "no module a full backward hook works on (an in-place op follows every one)",
    "block": "no container module whose hooks work",
    "victim": "no module whose output an in-place module overwrites",
}
