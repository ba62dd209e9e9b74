"""``--target``'s words, parsed: :class:`Objective` and :func:`parse_target`, without torch, so that the command
line's argument type (``hookscope.cli.common.target_argument``) checks them before anything heavy loads. What an
objective means for a model's output, and the scalar a run differentiates, are in ``hookscope.core.engine.objectives``
(which re-exports these names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hookscope.core.common.errors import RunError

if TYPE_CHECKING:
    import torch

_REGION = re.compile(r"class:(\d+)@(-?\d+),(-?\d+),(-?\d+),(-?\d+)")
_CLASS = re.compile(r"class:(\d+)")
_BOX = re.compile(r"box:(\d+)")
FORMS = "top1, a class index, class:C, class:C@x0,y0,x1,y1, box:N, similar:IMAGE or text:PROMPT"


@dataclass(frozen=True)
class Objective:
    """A parsed target. ``kind``: "top1", "class" (a class index or class:C), "region", "box", "similar", "text".
    ``reference``: the embedding ``similar`` and ``text`` compare with, once resolved (:func:`with_reference`)."""

    kind: str
    index: int | None = None
    region: tuple[int, int, int, int] | None = None
    image: str | None = None
    text: str | None = None
    reference: torch.Tensor | None = field(default=None, compare=False, repr=False)

    @property
    def spec(self) -> str:
        """The objective in ``--target``'s words."""
        if self.kind == "class":
            return f"class:{self.index}"
        if self.kind == "region":
            return f"class:{self.index}@" + ",".join(str(v) for v in self.region or ())
        if self.kind == "box":
            return f"box:{self.index}"
        if self.kind == "similar":
            return f"similar:{self.image}"
        if self.kind == "text":
            return f"text:{self.text}"
        return "top1"

    @property
    def needs_reference(self) -> bool:
        return self.kind in ("similar", "text")


def region_text(region: tuple[int, int, int, int]) -> str:
    """A rectangle of the input (x0, y0, x1, y1, pixels) in a person's words: "x 49-323, y 47-294", the two
    ranges it spans, not four numbers in a row that read as one."""
    x0, y0, x1, y1 = region
    return f"x {x0}-{x1}, y {y0}-{y1}"


Target = int | str | Objective  # a class index, "top1", any of --target's forms, or a parsed Objective


def parse_target(target: object) -> Objective:
    """An ``Objective`` from ``--target``'s text, a class index, or an ``Objective``; ``RunError`` (one line) when
    the text is none of the forms."""
    if isinstance(target, Objective):
        return target
    if isinstance(target, int) and not isinstance(target, bool):
        return Objective("class", index=target)  # out of range: said with the model's class count, at the run
    text = str(target).strip()
    if text == "top1":
        return Objective("top1")
    if text.lstrip("-").isdigit():
        return Objective("class", index=_number(text, text))
    if found := _REGION.fullmatch(text):
        x0, y0, x1, y1 = (_number(v, text) for v in found.groups()[1:])
        if x1 <= x0 or y1 <= y0:
            raise RunError(f"The region of '{text}' is empty: x0,y0,x1,y1 need x0 < x1 and y0 < y1.")
        return Objective("region", index=_number(found.group(1), text), region=(x0, y0, x1, y1))
    if found := _CLASS.fullmatch(text):
        return Objective("class", index=_number(found.group(1), text))
    if found := _BOX.fullmatch(text):
        return Objective("box", index=_number(found.group(1), text))
    if text.startswith("similar:") and text[len("similar:") :].strip():
        return Objective("similar", image=text[len("similar:") :].strip())
    if text.startswith("text:") and text[len("text:") :].strip():
        return Objective("text", text=text[len("text:") :].strip().strip("\"'"))
    raise RunError(f"The target '{text}' is not one of {FORMS}.")


_MAX_DIGITS = 9  # no model has a billion classes, boxes or pixels; longer numbers are refused before int() reads them


def _number(digits: str, text: str) -> int:
    """A number of the target's text, refused in one line when it is too long to be a class, box or pixel (int()
    itself would refuse past 4300 digits, in Python's words)."""
    if len(digits.lstrip("-")) > _MAX_DIGITS:
        shown = text if len(text) <= 40 else text[:30] + "…"
        raise RunError(f"The target '{shown}' holds a number of {len(digits.lstrip('-'))} digits: no model has that "
                       "many classes, boxes or pixels.")  # fmt: skip
    return int(digits)


def region_objective(index: int, region: tuple[int, int, int, int]) -> Objective:
    """Class ``index``'s logits over ``region`` (x0, y0, x1, y1: a rectangle dragged on the input); ``RunError``
    when the rectangle is empty, as ``class:C@x0,y0,x1,y1`` says."""
    x0, y0, x1, y1 = region
    if x1 <= x0 or y1 <= y0:
        raise RunError(f"The region {region_text(region)} is empty: x0,y0,x1,y1 need x0 < x1 and y0 < y1.")
    return Objective("region", index=index, region=(x0, y0, x1, y1))


def target_value(target: Target) -> str | int:
    """A target as JSON holds it (a session, a batch's fingerprint): a class index as a number, any other objective
    in ``--target``'s words ("top1", "class:3@0,0,40,40", "box:2", "similar:IMAGE", "text:PROMPT")."""
    objective = parse_target(target)
    return objective.index if objective.kind == "class" and objective.index is not None else objective.spec
