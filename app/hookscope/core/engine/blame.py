"""Whose fault a failure during a run is: the model's own code, or Hookscope's.

A model that raises in its ``forward`` (a shape mismatch in someone's ``model.py``), or whose own in-place operation
breaks autograd in the backward pass, is not a Hookscope bug and must not be reported as an "unexpected error":
it is a :class:`ModelRaised` error (a ``RunError``, so one line on the command line, exit 2, and a message in the
window) that says which pass failed and what the model raised.

An exception counts as the model's unless its traceback, once it has left this package (into PyTorch and the
model), comes back into it: then it was raised inside one of Hookscope's hooks or edits, called by the model, and
stays what it is (a bug, or a ``RunError`` of its own). Failures the run already handles are left alone too: Hookscope's own errors, cancellation, running out of
memory, and PyTorch's complaint about full backward hooks next to in-place operations (the run retries with tensor
hooks).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import torch

from hookscope.core.common.errors import HookscopeError, RunError

_PACKAGE = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)  # .../hookscope (from hookscope/core/engine)
_IN_PLACE = "modified by an inplace operation"
T = TypeVar("T")


class ModelRaised(RunError):
    """The model's own code raised during its forward or backward pass (``phase``); ``cause`` is its exception's
    type name. Not a Hookscope bug: the model needs fixing (or other input)."""

    def __init__(self, message: str, *, phase: str, cause: str) -> None:
        super().__init__(message)
        self.phase = phase  # "forward" or "backward"
        self.cause = cause  # e.g. "ValueError"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def _raised_in_package(traceback: TracebackType | None) -> bool:
    """Whether the exception was raised in this package's code called from outside it (a hook the model ran)."""
    left = False
    while traceback is not None:
        ours = os.path.abspath(traceback.tb_frame.f_code.co_filename).startswith(_PACKAGE + os.sep)
        if ours and left:
            return True
        left = left or not ours
        traceback = traceback.tb_next
    return False


def model_pass(phase: str, run: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``run(*args, **kwargs)`` (the model's forward, or the backward pass), with the model's own failures raised as
    :class:`ModelRaised` and everything else unchanged."""
    try:
        return run(*args, **kwargs)
    except BaseException as error:
        failure = model_failure(error, phase)
        if failure is None:
            raise
        raise failure from error


def model_failure(error: BaseException, phase: str) -> ModelRaised | None:
    """``error`` (caught around the model's forward, or the backward pass) as a :class:`ModelRaised`, or None when
    it is not the model's own failure (see the module's docstring) and must propagate as it is."""
    if isinstance(error, (HookscopeError, KeyboardInterrupt, GeneratorExit, torch.OutOfMemoryError, MemoryError)):
        return None
    if not isinstance(error, (Exception, SystemExit)) or type(error).__module__.startswith("hookscope."):
        return None  # RunCancelled, StaleCapture and the like: the run's own signals
    text = _first_line(error).split(" Hint: ")[0]  # PyTorch's hint is about its anomaly mode, not for users
    if "BackwardHookFunction" in str(error) or _raised_in_package(error.__traceback__):
        return None
    if isinstance(error, SystemExit):
        text = f"SystemExit({error.code!r})"
    else:
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    message = f"The model raised during its {phase} pass: {text}"
    if phase == "backward" and _IN_PLACE in str(error):
        message += " (an in-place operation in the model's own code changed a tensor that autograd still needed)"
    return ModelRaised(message, phase=phase, cause=type(error).__name__)
