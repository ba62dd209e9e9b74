"""The hook registry: the one place that registers, tracks and removes every hook handle.

A hook is registered on the live model as soon as it is added, and stays until it is removed; it records only
while a run is recording (``registry.recording(recorder)``), so a tick between runs costs nothing.

Kinds:
    forward   ``register_forward_hook``: the module's output (the feature maps)
    pre       ``register_forward_pre_hook(with_kwargs=True)``: the module's inputs
    backward  ``register_full_backward_hook``: the gradient of the module's output; where an in-place op makes
              that hook raise, a ``Tensor.register_hook`` on the output, registered from a forward hook
    tensor    ``Tensor.register_hook`` on the module's output, registered from a forward hook
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from app.core.errors import HookscopeError
from app.core.structure import tensor_leaves
from app.core.tree import ModelSurvey

HookKind = Literal["forward", "pre", "backward", "tensor"]
KINDS: tuple[HookKind, ...] = ("forward", "pre", "backward", "tensor")

FORWARD = "register_forward_hook"
PRE = "register_forward_pre_hook"
FULL_BACKWARD = "register_full_backward_hook"
TENSOR = "Tensor.register_hook"
FALLBACK = "Tensor.register_hook (fallback)"


@dataclass(frozen=True)
class HookInfo:
    """A live hook as the UI lists it."""

    path: str
    kind: HookKind
    method: str
    note: str = ""  # why a fallback was used, in one sentence


@dataclass
class Record:
    """One tensor a hook saw during a run, already on the CPU."""

    path: str
    kind: HookKind
    call: int  # 0 for the first call of the module in the forward pass, 1 for the second...
    leaf: str  # "" for a plain tensor, else its path inside a structured value ("0", "logits")
    method: str
    tensor: torch.Tensor

    @property
    def key(self) -> str:
        return record_key(self.path, self.call, self.leaf)


def record_key(path: str, call: int = 0, leaf: str = "") -> str:
    """``layer1.0.conv1``, ``layer1.0.relu#1`` for a later call, ``self_attention/0`` for a leaf."""
    key = path or "(model)"
    if call:
        key += f"#{call}"
    if leaf:
        key += f"/{leaf}"
    return key


class StaleCapture(Exception):
    """A capture kept by reference was changed in place later; the run must be repeated with a clone."""

    def __init__(self, paths: set[tuple[str, str]]) -> None:
        super().__init__(f"changed in place after capture: {sorted(paths)}")
        self.paths = paths


class Recorder:
    """Collects the records of one run.

    On the CPU a capture is a detached reference (no copy); it is cloned only where the survey (or an earlier
    run) found that a later in-place op overwrites it. ``verify`` checks every reference's version counter, so a
    missed in-place change is detected instead of silently reported as data.
    """

    def __init__(self, clone: set[tuple[str, str]], survey: ModelSurvey | None) -> None:
        self.records: list[Record] = []
        self._clone = clone
        self._survey = survey
        self._calls: dict[tuple[str, str], int] = {}
        self._backward_calls: dict[str, int] = {}
        self._watched: list[tuple[Record, int]] = []
        self._copies: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}

    def next_call(self, path: str, kind: str) -> int:
        count = self._calls.get((path, kind), 0)
        self._calls[(path, kind)] = count + 1
        return count

    def backward_call(self, path: str) -> int:
        """Full backward hooks fire in reverse order of the forward calls."""
        seen = self._backward_calls.get(path, 0)
        self._backward_calls[path] = seen + 1
        calls = self._survey.run_of(path).calls if self._survey else 1
        return max(calls - 1 - seen, 0)

    def keep(self, path: str, kind: HookKind, call: int, leaf: str, method: str, tensor: torch.Tensor) -> None:
        record = Record(path, kind, call, leaf, method, self._to_cpu(tensor, (path, kind) in self._clone))
        self.records.append(record)
        if tensor.device.type == "cpu" and record.tensor._version == tensor._version:
            self._watched.append((record, record.tensor._version))

    def _to_cpu(self, tensor: torch.Tensor, clone: bool) -> torch.Tensor:
        tensor = tensor.detach()
        if tensor.device.type == "cpu":
            if not clone:
                return tensor
        # One copy per tensor: a container's output is usually the very tensor its last child returned.
        cached = self._copies.get(id(tensor))
        if cached is not None and cached[0] is tensor and cached[1] == tensor._version:
            return cached[2]
        copy = tensor.clone() if tensor.device.type == "cpu" else tensor.to("cpu")
        self._copies[id(tensor)] = (tensor, tensor._version, copy)
        return copy

    def verify(self) -> None:
        stale = {(r.path, r.kind) for r, version in self._watched if r.tensor._version != version}
        if stale:
            raise StaleCapture(stale)

    def grad_hook(self, path: str, kind: HookKind, call: int, leaf: str, method: str):
        def hook(grad: torch.Tensor) -> None:
            self.keep(path, kind, call, leaf, method, grad)

        return hook


@dataclass
class _Live:
    info: HookInfo
    handles: list[RemovableHandle]


class HookRegistry:
    """Registers hooks on ``model``'s modules by dotted path and removes them again.

    Thread use: the GUI thread adds and removes hooks while a worker may be running the model; a lock keeps the
    registry's own state consistent, and torch copies a module's hook dict before calling it.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._modules = dict(model.named_modules())
        self._live: dict[tuple[str, HookKind], _Live] = {}
        self._lock = threading.RLock()
        self._recorder: Recorder | None = None
        self._survey: ModelSurvey | None = None
        self._clone: set[tuple[str, str]] = set()

    # ---- what is registered -------------------------------------------------------------------------------
    def handles(self) -> list[HookInfo]:
        with self._lock:
            return [live.info for live in self._live.values()]

    def has(self, path: str, kind: HookKind) -> bool:
        return (path, kind) in self._live

    def module(self, path: str) -> nn.Module:
        try:
            return self._modules[path]
        except KeyError:
            raise HookscopeError(f"The model has no module '{path}'.") from None

    @property
    def paths(self) -> list[str]:
        return list(self._modules)

    @property
    def survey(self) -> ModelSurvey | None:
        return self._survey

    # ---- adding and removing ------------------------------------------------------------------------------
    def add(self, path: str, kind: HookKind) -> HookInfo:
        """Register a hook of ``kind`` on the module at ``path`` (a second add of the same pair is a no-op)."""
        if kind not in KINDS:
            raise HookscopeError(f"Unknown hook kind '{kind}'; use one of: {', '.join(KINDS)}.")
        module = self.module(path)
        with self._lock:
            if (path, kind) in self._live:
                return self._live[(path, kind)].info
            live = self._register(path, kind, module)
            self._live[(path, kind)] = live
            return live.info

    def remove(self, path: str, kind: HookKind) -> None:
        with self._lock:
            live = self._live.pop((path, kind), None)
            if live is not None:
                for handle in live.handles:
                    handle.remove()

    def clear(self) -> None:
        """Remove every hook this registry registered."""
        with self._lock:
            for path, kind in list(self._live):
                self.remove(path, kind)

    def __enter__(self) -> HookRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    # ---- the hook functions -------------------------------------------------------------------------------
    def _register(self, path: str, kind: HookKind, module: nn.Module) -> _Live:
        if kind == "forward":
            handle = module.register_forward_hook(self._forward_capture(path))
            return _Live(HookInfo(path, kind, FORWARD), [handle])
        if kind == "pre":
            handle = module.register_forward_pre_hook(self._pre_capture(path), with_kwargs=True)
            return _Live(HookInfo(path, kind, PRE), [handle])
        if kind == "tensor":
            handle = module.register_forward_hook(self._grad_capture(path, "tensor", TENSOR))
            return _Live(HookInfo(path, kind, TENSOR), [handle])
        reason = self._full_backward_obstacle(path)
        if reason:
            handle = module.register_forward_hook(self._grad_capture(path, "backward", FALLBACK))
            return _Live(HookInfo(path, kind, FALLBACK, reason), [handle])
        handle = module.register_full_backward_hook(self._full_backward_capture(path))
        return _Live(HookInfo(path, kind, FULL_BACKWARD), [handle])

    def _full_backward_obstacle(self, path: str) -> str:
        """Why ``register_full_backward_hook`` would fail on this module, or "" if it works (as far as known)."""
        if self._survey is None:
            return ""
        run = self._survey.run_of(path)
        if run.modifies_input:
            return "The module changes its input in place, so a full backward hook would raise; a tensor hook on its output is used instead."
        if run.output_modified_later:
            return "An in-place operation after this module changes its output, so a full backward hook would raise; a tensor hook on its output is used instead."
        if run.output_form == "structured":
            return "The module returns a nested structure that full backward hooks do not see into; a tensor hook on each output tensor is used instead."
        return ""

    def _forward_capture(self, path: str):
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = recorder.next_call(path, "forward")
            for leaf, tensor in tensor_leaves(output):
                recorder.keep(path, "forward", call, leaf, FORWARD, tensor)

        return hook

    def _pre_capture(self, path: str):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = recorder.next_call(path, "pre")
            leaves = list(tensor_leaves(args)) + list(tensor_leaves(kwargs))
            if len(leaves) == 1 and leaves[0][0] == "0":  # the usual single input needs no leaf name
                leaves = [("", leaves[0][1])]
            for leaf, tensor in leaves:
                recorder.keep(path, "pre", call, leaf, PRE, tensor)

        return hook

    def _grad_capture(self, path: str, kind: HookKind, method: str):
        """A forward hook that puts a tensor hook on each output tensor, so the gradient arrives there."""

        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            recorder = self._recorder
            if recorder is None or not torch.is_grad_enabled():
                return
            call = recorder.next_call(path, kind)
            for leaf, tensor in tensor_leaves(output):
                if tensor.requires_grad:
                    tensor.register_hook(recorder.grad_hook(path, kind, call, leaf, method))

        return hook

    def _full_backward_capture(self, path: str):
        def hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = recorder.backward_call(path)
            # grad_output has one entry per element of a tuple output (None for non-tensors).
            tuple_output = self._survey is not None and self._survey.run_of(path).output_form == "tuple"
            names = [str(i) for i in range(len(grad_output))] if tuple_output else [""]
            for leaf, grad in zip(names, grad_output):
                if grad is not None:
                    recorder.keep(path, "backward", call, leaf, FULL_BACKWARD, grad)

        return hook

    # ---- runs ---------------------------------------------------------------------------------------------
    def adopt_survey(self, survey: ModelSurvey) -> None:
        """Use what a survey found: choose clones and re-register backward hooks that need the fallback."""
        with self._lock:
            self._survey = survey
            self._clone = {(p, "forward") for p, run in survey.runs.items() if run.output_modified_later}
            self._clone |= {(p, "pre") for p, run in survey.runs.items() if run.modifies_input}
            for (path, kind), live in list(self._live.items()):
                if kind == "backward" and bool(self._full_backward_obstacle(path)) != (live.info.method == FALLBACK):
                    self.remove(path, kind)
                    self.add(path, kind)

    def learn_clones(self, paths: set[tuple[str, str]]) -> None:
        with self._lock:
            self._clone |= paths

    def use_fallback_everywhere(self) -> None:
        """Last resort when a full backward hook raised in a way the survey did not predict."""
        with self._lock:
            for (path, kind), live in list(self._live.items()):
                if kind == "backward" and live.info.method == FULL_BACKWARD:
                    module = self._modules[path]
                    for handle in live.handles:
                        handle.remove()
                    handle = module.register_forward_hook(self._grad_capture(path, "backward", FALLBACK))
                    note = "A full backward hook raised during the run; a tensor hook on its output is used instead."
                    self._live[(path, kind)] = _Live(HookInfo(path, kind, FALLBACK, note), [handle])

    @contextmanager
    def recording(self, recorder: Recorder) -> Iterator[Recorder]:
        self._recorder = recorder
        try:
            yield recorder
        finally:
            self._recorder = None

    def new_recorder(self) -> Recorder:
        with self._lock:
            return Recorder(set(self._clone), self._survey)
