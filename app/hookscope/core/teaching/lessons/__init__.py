"""Lessons: PyTorch's four hooks taught on the user's own model, each one registered for real, run and checked.

A :class:`Lesson` says in two or three sentences what its hook receives, what returning a value does and its
pitfall; :meth:`Lesson.run` registers real hooks on the model, runs it, and returns a :class:`LessonResult`: the
numbers before and after side by side, the claim and whether the run reproduced it, and the plain PyTorch that
does the same (runnable on its own). Every handle a lesson registers is removed before ``run`` returns, also when
it raises; ``LessonResult.handles_left`` counts any that were not (always 0 unless PyTorch misbehaves).

Lessons that need exact small numbers (2 x 1.6 = 3.2) run on a tiny built-in network; the others on the model and
image they are given, on the modules :func:`plan` picks from a survey of that model. Where the model has no
module a lesson needs (no in-place op after any module, no container), the lesson runs on a small built-in
convolutional network instead and says so in ``LessonResult.note``.

Where a lesson is one of Hookscope's own ticks or edits, it uses them (``HookRegistry``, ``capture_run``,
``Intervention``, the inspector's snippets), and :meth:`Lesson.setup` names them, so that the window can register
the same hooks through its workspace, where the hook inspector lists them.

The package: ``base`` (what a lesson is and returns, how it runs), ``plan`` (which modules it runs on),
``networks`` (the built-in networks, the code that builds a model), ``inputs`` (images A and B for one model), and
one module per hook family with its lessons: ``forward``, ``pre``, ``backward`` (full backward hooks), ``tensor``,
``all_hooks`` (handles and the in-place pitfalls). ``LESSONS`` lists them in that order.
"""

from __future__ import annotations

from hookscope.core.common.errors import HookscopeError
from hookscope.core.teaching.lessons import all_hooks, backward, forward, pre, tensor
from hookscope.core.teaching.lessons.base import Lesson, LessonResult

__all__ = ["LESSONS", "lesson", "result_line"]

LESSONS: tuple[Lesson, ...] = (*forward.LESSONS, *pre.LESSONS, *backward.LESSONS, *tensor.LESSONS, *all_hooks.LESSONS)


def lesson(lesson_id: str) -> Lesson:
    for candidate in LESSONS:
        if candidate.id == lesson_id:
            return candidate
    raise HookscopeError(f"There is no lesson '{lesson_id}'; lessons: {', '.join(item.id for item in LESSONS)}.")


def result_line(result: LessonResult) -> str:
    """One line per lesson for the command line: id, the numbers, ok or failed."""
    line = f"{result.lesson:<20} {result.summary}"
    if result.note:
        line += " [built-in network]"
    return f"{line}  {result.status}"
