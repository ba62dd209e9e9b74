"""The hook registry: the one place that registers, tracks and removes every hook handle.

A hook is registered on the live model as soon as it is added, and stays until it is removed; it records only
while a run is recording (``registry.recording(recorder)``), so a tick between runs costs nothing.

Kinds:
    forward   ``register_forward_hook``: the module's output (the feature maps)
    pre       ``register_forward_pre_hook(with_kwargs=True)``: the module's inputs
    backward  ``register_full_backward_hook``: the gradient of the module's output (its ``grad_output``); where
              an in-place op makes that hook raise, a ``Tensor.register_hook`` on the output, registered from a
              forward hook
    tensor    ``Tensor.register_hook`` on the module's output, registered from a forward hook: the gradient of
              the output, exact under in-place ops and edits (what the window's Grad column uses)
    grad_input ``register_full_backward_hook``: the gradient of the target with respect to the module's inputs
              (its ``grad_input``, which only this hook gives); where it cannot work, a ``Tensor.register_hook`` on
              each input tensor, registered from a forward pre-hook (the input tensor's whole gradient)
    attention a forward pre-hook and a forward hook on an attention module, around a torch function mode that
              computes its attention explicitly: the weights (batch, heads, queries, keys), also under fused
              attention (``hookscope.core.engine.attention``); refused on a module whose weights cannot be read

Each hook's decisions (copy or keep a reference, where the module's input comes from) are made once per survey of
the model, not per call (``_Site``), so a hook costs about what a plain PyTorch hook keeping a reference costs.

Edits (``add_edit``, see ``hookscope.core.engine.interventions``) are hooks that return a value and so change what flows. They
act in every run, recording or not, and run before the capture hooks of the same module (``prepend=True``), so a
capture sees the edited value. A disabled edit has no handle at all.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.core.common.errors import HookscopeError, RunError
from hookscope.core.common.vocabulary import KINDS, HookKind
from hookscope.core.engine.attention import ATTENTION_METHOD, AttentionHooks, AttentionSupport, attention_modules
from hookscope.core.engine.interventions import EditState, Intervention, check_channels, make_edit_hook
from hookscope.core.engine.structure import tensor_leaves
from hookscope.core.engine.tree import ModelSurvey, ModuleRun

# The kinds that record the gradient of a module's output (what Grad-CAM and the "no gradient" list are about), and
# every kind that records a gradient (drawn as |grad|).
OUTPUT_GRADIENT_KINDS: tuple[HookKind, ...] = ("tensor", "backward")
GRADIENT_KINDS: tuple[HookKind, ...] = (*OUTPUT_GRADIENT_KINDS, "grad_input")

FORWARD = "register_forward_hook"
PRE = "register_forward_pre_hook"
FULL_BACKWARD = "register_full_backward_hook"
TENSOR = "Tensor.register_hook"
FALLBACK = "Tensor.register_hook (fallback)"
FULL_BACKWARD_KINDS = ("backward", "grad_input")  # the kinds that register_full_backward_hook serves
INPUT_FALLBACK_NOTE = (
    "a tensor hook on each input tensor is used instead: it gets the gradient of the input tensor as a whole, so "
    "where the input also feeds other modules, their share is included"
)


@dataclass(frozen=True)
class HookInfo:
    """A live hook as the UI lists it."""

    path: str
    kind: HookKind
    method: str
    note: str = ""  # why a fallback was used, in one sentence
    reads_or_edits: str = "reads"  # "edits" for an intervention (a hook that returns a value)
    edit_id: int | None = None  # the id ``add_edit`` returned, for edits
    label: str = ""  # an edit's description in words
    yours: bool = False  # a hook the model's owner put on it, not Hookscope (``callers_hooks``): listed, never removed


class Record:
    """One tensor a hook saw during a run.

    ``data`` is the tensor as the hook saw it, detached, on the run's device: a hook never copies it to the CPU,
    so a run on a GPU moves only what is shown (``hookscope.core.pictures.display`` prepares screen-sized images there).
    ``tensor`` is the CPU tensor that exports and arrays read: ``data`` itself on the CPU, a copy made on first use
    (and kept) on another device.
    """

    __slots__ = ("path", "kind", "call", "leaf", "method", "data", "_cpu")

    def __init__(self, path: str, kind: HookKind, call: int, leaf: str, method: str, data: torch.Tensor) -> None:
        self.path = path
        self.kind = kind
        self.call = call  # 0 for the first call of the module in the forward pass, 1 for the second...
        self.leaf = leaf  # "" for a plain tensor, else its path inside a structured value ("0", "logits")
        self.method = method
        self.data = data
        self._cpu: torch.Tensor | None = data if data.device.type == "cpu" else None

    @property
    def tensor(self) -> torch.Tensor:
        if self._cpu is None:
            self._cpu = self.data.to("cpu")
        return self._cpu

    @property
    def key(self) -> str:
        return record_key(self.path, self.call, self.leaf)

    def __repr__(self) -> str:
        return f"Record({self.key!r}, {self.kind!r}, {self.method!r}, {tuple(self.data.shape)}, {self.data.device})"


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

    def __init__(self, paths: set[tuple[str, HookKind]]) -> None:
        super().__init__(f"changed in place after capture: {sorted(paths)}")
        self.paths = paths


class _Site:
    """What one capture hook needs to know, decided once (at registration, and again when a survey arrives), so
    that the hook itself does no more than record: whether to copy what it sees (a later in-place op overwrites
    it), how often the module runs, whether its input lies off the path to the image.

    It also counts the module's calls within a run (``next_call``), by the run's serial number rather than a
    reference to the run, so that a site never keeps an old run's records alive.
    """

    __slots__ = (
        "path",
        "kind",
        "method",
        "clone",
        "calls",
        "off_path",
        "rebase_view",
        "tuple_output",
        "_serial",
        "_count",
    )

    def __init__(self, path: str, kind: HookKind, method: str) -> None:
        self.path = path
        self.kind = kind
        self.method = method
        self.clone = False  # copy what the hook sees: a later in-place op would overwrite it
        self.calls = 1  # calls of the module in a forward pass, as the survey saw them
        self.off_path: bool | None = None  # its input does not depend on the image (None: unknown, look per call)
        self.rebase_view = False  # its output is later changed in place: a view would route around a tensor hook
        self.tuple_output = False  # a flat tuple: a full backward hook's grad_output has an entry per element
        self._serial = 0
        self._count = 0

    def learn(self, survey: ModelSurvey) -> None:
        run = survey.run_of(self.path)
        self.clone = (
            run.modifies_input if self.kind == "pre" else (self.kind == "forward" and run.output_modified_later)
        )
        self.calls = max(run.calls, 1)
        self.off_path = run.ran and not run.input_needs_grad
        self.rebase_view = run.output_modified_later
        self.tuple_output = run.output_form == "tuple"

    def next_call(self, serial: int) -> int:
        """0 for the module's first call in run ``serial``, 1 for the second..."""
        if self._serial != serial:
            self._serial, self._count = serial, 0
        call = self._count
        self._count = call + 1
        return call

    def backward_call(self, serial: int) -> int:
        """Full backward hooks fire in reverse order of the forward calls."""
        return max(self.calls - 1 - self.next_call(serial), 0)


_serials = itertools.count(1)


class Recorder:
    """Collects the records of one run.

    A capture is a detached reference to the tensor the hook saw (no copy, on whatever device it is); it is cloned
    only where the survey (or an earlier run) found that a later in-place op overwrites it. ``verify`` checks every
    reference's version counter, so a missed in-place change is detected instead of silently reported as data.
    """

    def __init__(self) -> None:
        self.serial = next(_serials)
        self.records: list[Record] = []
        self.grad_roots: list[torch.Tensor] = []  # tensors off the input's path whose gradient is wanted
        self._watched: list[tuple[Record, int]] = []
        self._copies: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}

    def keep(self, site: _Site, call: int, leaf: str, tensor: torch.Tensor) -> None:
        if site.clone:
            record = Record(site.path, site.kind, call, leaf, site.method, self._copy(tensor))
        else:
            record = Record(site.path, site.kind, call, leaf, site.method, tensor.detach())
            self._watched.append((record, tensor._version))
        self.records.append(record)

    def _copy(self, tensor: torch.Tensor) -> torch.Tensor:
        # One copy per tensor: a container's output is usually the very tensor its last child returned.
        cached = self._copies.get(id(tensor))
        if cached is not None and cached[0] is tensor and cached[1] == tensor._version:
            return cached[2]
        copy = tensor.detach().clone()
        self._copies[id(tensor)] = (tensor, tensor._version, copy)
        return copy

    def release(self) -> None:
        """Drop what the run needed only while it ran. The copy cache holds the model's own output tensors, whose
        tensor hooks hold this recorder: a reference cycle that would keep a whole run's tensors alive until
        Python's cycle collector happens to run."""
        self._copies.clear()
        self.grad_roots.clear()

    def verify(self) -> None:
        stale = {(r.path, r.kind) for r, version in self._watched if r.data._version != version}
        if stale:
            raise StaleCapture(stale)

    def grad_hook(self, site: _Site, call: int, leaf: str) -> Callable[[torch.Tensor | None], None]:
        def hook(grad: torch.Tensor | None) -> None:
            # None: the node that made this output ran for another of its outputs, and this one got no gradient (a
            # full backward hook joins all a module's outputs in one node: nn.MultiheadAttention's unused weights).
            # Nothing to record; RunResult.no_gradient says why.
            if grad is not None:
                self.keep(site, call, leaf, grad)

        return hook


@dataclass
class _Live:
    info: HookInfo
    handles: list[RemovableHandle]
    site: _Site


@dataclass
class _Edit:
    edit: Intervention
    info: HookInfo
    handles: list[RemovableHandle]
    order: int = 0  # when its hook was (last) registered: prepended hooks run newest first


EDIT_METHODS = {"forward": FORWARD, "pre": PRE, "tensor": TENSOR, "backward": FULL_BACKWARD}


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
        self._edits: dict[int, _Edit] = {}
        self._next_edit = 1
        self._next_order = 0
        self._edit_state = EditState()
        self._attention: dict[str, AttentionSupport] | None = None  # the attention modules, found on first use
        # Edits change what the network does (a scaled input is a new tensor an in-place op then writes into), so
        # the survey's facts are re-checked on the next run after any edit is added, removed or switched.
        self.needs_survey = False

    # ---- what is registered -------------------------------------------------------------------------------
    def handles(self) -> list[HookInfo]:
        """The capture hooks (ticks); ``live_hooks`` adds the edits."""
        with self._lock:
            return [live.info for live in self._live.values()]

    def live_hooks(self) -> list[HookInfo]:
        """Every hook with a live handle, as the hook inspector lists it: enabled edits (in the order their hooks
        were registered), then capture hooks."""
        with self._lock:
            edits = sorted((e for e in self._edits.values() if e.handles), key=lambda e: e.order)
            return [e.info for e in edits] + [live.info for live in self._live.values()]

    def handle_ids(self) -> set[int]:
        """The ids of the handles this registry holds (a module's hook dicts are keyed by them)."""
        with self._lock:
            handles = [h for live in self._live.values() for h in live.handles]
            handles += [h for entry in self._edits.values() for h in entry.handles]
            return {handle.id for handle in handles}

    def handle_count(self) -> int:
        """How many handles this registry holds on the model right now."""
        with self._lock:
            return sum(len(live.handles) for live in self._live.values()) + sum(
                len(e.handles) for e in self._edits.values()
            )

    def has(self, path: str, kind: HookKind) -> bool:
        return (path, kind) in self._live

    def module(self, path: str) -> nn.Module:
        try:
            return self._modules[path]
        except KeyError:
            raise HookscopeError(f"The model has no module '{path}'.", module_path=path) from None

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
            raise HookscopeError(f"Unknown hook kind '{kind}'; use one of: {', '.join(KINDS)}.", module_path=path)
        module = self.module(path)
        if kind == "attention":
            self._check_attention(path)
        with self._lock:
            if (path, kind) in self._live:
                return self._live[(path, kind)].info
            live = self._register(path, kind, module)
            self._live[(path, kind)] = live
            return live.info

    def attention_modules(self) -> dict[str, AttentionSupport]:
        """The model's attention modules by path, each saying whether its weights can be captured (the Attn
        column's boxes); empty for a model without attention."""
        if self._attention is None:
            self._attention = attention_modules(self.model)
        return self._attention

    def _check_attention(self, path: str) -> None:
        support = self.attention_modules().get(path)
        if support is None:
            known = list(self.attention_modules())
            where = (
                f"its attention modules are {', '.join(known[:3])}{' ...' if len(known) > 3 else ''}"
                if known
                else "the model has none"
            )
            raise HookscopeError(
                f"'{path}' ({type(self.module(path)).__name__}) is not an attention module; {where}.",
                module_path=path,
            )
        if not support.capturable:
            raise HookscopeError(f"The attention weights of '{path}' cannot be captured: {support.reason}.",
                                 module_path=path)  # fmt: skip

    def remove(self, path: str, kind: HookKind) -> None:
        with self._lock:
            live = self._live.pop((path, kind), None)
            if live is not None:
                for handle in live.handles:
                    handle.remove()

    def clear(self) -> None:
        """Remove every hook this registry registered, edits included ("Remove all")."""
        with self._lock:
            for path, kind in list(self._live):
                self.remove(path, kind)
            for edit_id in list(self._edits):
                self.remove_edit(edit_id)

    def remove_hook(self, info: HookInfo) -> None:
        """Remove the hook an inspector row shows: a capture hook, or an edit (forgotten, not just disabled)."""
        if info.edit_id is not None:
            self.remove_edit(info.edit_id)
        else:
            self.remove(info.path, info.kind)

    # ---- edits (interventions) ----------------------------------------------------------------------------
    def add_edit(self, edit: Intervention) -> int:
        """Register ``edit`` (its hook only if ``edit.enabled``) and return its id.

        Raises ``HookscopeError`` for an unknown module, and, once a run has surveyed the model, for an edit that
        cannot work there (a channel that does not exist, a full backward hook an in-place op would break). The
        error's ``edit_spec`` is ``edit.spec``.
        """
        try:
            self.module(edit.path)
        except HookscopeError as error:
            error.edit_spec = edit.spec
            raise
        with self._lock:
            self._check_edit(edit)
            edit_id = self._next_edit
            self._next_edit += 1
            self._edits[edit_id] = _Edit(edit, self._edit_info(edit_id, edit), [])
            if edit.enabled:
                self._register_edit(edit_id)
                self.needs_survey = True
            return edit_id

    def remove_edit(self, edit_id: int) -> None:
        """Remove the edit's hook and forget it; other hooks are untouched (an unknown id is a no-op)."""
        with self._lock:
            entry = self._edits.pop(edit_id, None)
            if entry is not None:
                self.needs_survey = self.needs_survey or bool(entry.handles)
                for handle in entry.handles:
                    handle.remove()

    def set_edit_enabled(self, edit_id: int, enabled: bool) -> None:
        """Switch an edit on (its hook is registered again) or off (its hook is removed, not just ignored)."""
        with self._lock:
            entry = self._edit_entry(edit_id)
            if enabled == bool(entry.handles):
                return
            self.needs_survey = True
            if enabled:
                self._check_edit(entry.edit)
                entry.edit = replace(entry.edit, enabled=True)
                self._register_edit(edit_id)
            else:
                for handle in entry.handles:
                    handle.remove()
                entry.handles = []
                entry.edit = replace(entry.edit, enabled=False)

    def edits(self) -> list[tuple[int, Intervention, HookInfo]]:
        """Every edit, enabled or not, in the order added: (id, edit, hook info)."""
        with self._lock:
            return [(edit_id, e.edit, e.info) for edit_id, e in self._edits.items()]

    def edit(self, edit_id: int) -> Intervention:
        with self._lock:
            return self._edit_entry(edit_id).edit

    def enabled_edits(self) -> list[Intervention]:
        with self._lock:
            return [e.edit for e in self._edits.values() if e.handles]

    @contextmanager
    def edits_suspended(self) -> Iterator[None]:
        """Within the block every edit passes values through unchanged (for a run "without edits")."""
        with self._lock:
            self._edit_state.suspended += 1
        try:
            yield
        finally:
            with self._lock:
                self._edit_state.suspended -= 1

    def check_edits(self) -> None:
        """Raise ``RunError`` for an enabled edit the survey shows cannot work (called by each run)."""
        for edit in self.enabled_edits():
            self._check_edit(edit)

    @contextmanager
    def mix_references(self, others: Mapping[str, torch.Tensor] | None) -> Iterator[None]:
        """Run each other image a mix edit needs once (no gradients, edits off, nothing recorded), keep the mixed
        modules' outputs, and let the mix edits blend them in within the block. One pass per distinct image."""
        mixes = [e for e in self.enabled_edits() if e.kind == "mix"]
        if not mixes:
            yield
            return
        outputs: dict[tuple[str, str], list[torch.Tensor]] = {}
        for other in dict.fromkeys(e.other_image or "" for e in mixes):
            if not others or other not in others:
                edit = next(e for e in mixes if e.other_image == other)
                raise RunError(
                    f"The edit {edit.spec} needs the image '{other}', which was not given to the run.",
                    module_path=edit.path,
                    edit_spec=edit.spec,
                )
            handles = []
            try:
                for path in dict.fromkeys(e.path for e in mixes if e.other_image == other):
                    kept = outputs.setdefault((other, path), [])
                    handles.append(self.module(path).register_forward_hook(_keep_output(kept)))
                with torch.no_grad(), self.edits_suspended():
                    self.model(others[other])
            finally:
                for handle in handles:
                    handle.remove()
        state = self._edit_state
        state.mix_outputs, state.mix_calls = outputs, {}
        try:
            yield
        finally:
            state.mix_outputs, state.mix_calls = None, {}

    def _edit_entry(self, edit_id: int) -> _Edit:
        try:
            return self._edits[edit_id]
        except KeyError:
            raise HookscopeError(f"There is no edit with id {edit_id}.") from None

    def _edit_info(self, edit_id: int, edit: Intervention) -> HookInfo:
        kind: HookKind = edit.hook_kind  # type: ignore[assignment]
        return HookInfo(edit.path, kind, EDIT_METHODS[kind], "", "edits", edit_id, edit.describe())

    def _register_edit(self, edit_id: int) -> None:
        entry = self._edits[edit_id]
        edit, module = entry.edit, self.module(entry.edit.path)
        hook = make_edit_hook(edit, self._edit_state)
        # prepend=True: the edit runs before this module's capture hooks, so they record the edited value.
        if edit.hook_kind == "pre":
            handle = module.register_forward_pre_hook(hook, prepend=True)
        elif edit.hook_kind == "backward":
            handle = module.register_full_backward_hook(hook, prepend=True)
        else:
            handle = module.register_forward_hook(hook, prepend=True)
        entry.handles = [handle]
        entry.order = self._next_order
        self._next_order += 1

    def _check_edit(self, edit: Intervention) -> None:
        if self._survey is None:
            return
        run = self._survey.run_of(edit.path)
        if edit.kind == "scale-grad-input":
            why = ""
            if run.modifies_input:
                why = "the module changes its input in place"
            elif run.output_modified_later:
                why = "an in-place operation after it changes its output"
            elif run.output_form == "structured":
                why = "it returns a nested structure that full backward hooks do not see into"
            if why:
                raise RunError(
                    f"scale-grad-input cannot work on {edit.path}: register_full_backward_hook raises there because "
                    f"{why}; use scale-grad:{edit.path}:{edit.spec.rsplit(':', 1)[-1]} (a tensor hook on its output) instead.",
                    module_path=edit.path,
                    edit_spec=edit.spec,
                )
        if edit.channels and run.output_shapes and len(run.output_shapes[0]) >= 2:
            check_channels(edit, run.output_shapes[0][1])

    def __enter__(self) -> HookRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    # ---- the hook functions -------------------------------------------------------------------------------
    def _register(self, path: str, kind: HookKind, module: nn.Module) -> _Live:
        method, note = self._method_for(path, kind)
        site = _Site(path, kind, method)
        if self._survey is not None:
            site.learn(self._survey)
        if kind == "attention":
            hooks = self._attention_capture(site)
            handles = [
                module.register_forward_pre_hook(hooks.pre),
                module.register_forward_hook(hooks.post, always_call=True),
            ]
            return _Live(HookInfo(path, kind, method, note), handles, site)
        if kind == "forward":
            handle = module.register_forward_hook(self._forward_capture(site))
        elif kind == "pre":
            handle = module.register_forward_pre_hook(self._pre_capture(site), with_kwargs=True)
        elif method == FULL_BACKWARD:
            handle = module.register_full_backward_hook(self._full_backward_capture(site))
        elif kind == "grad_input":
            handle = module.register_forward_pre_hook(self._input_grad_capture(site))
        else:  # tensor, or the backward fallback
            handle = module.register_forward_hook(self._grad_capture(site))
        return _Live(HookInfo(path, kind, method, note), [handle], site)

    def _method_for(self, path: str, kind: HookKind) -> tuple[str, str]:
        """The hook method a (path, kind) pair uses, and, for a fallback, why, in the words the inspector shows."""
        if kind == "forward":
            return FORWARD, ""
        if kind == "pre":
            return PRE, ""
        if kind == "tensor":
            return TENSOR, ""
        if kind == "attention":
            return ATTENTION_METHOD, ""
        obstacle = self._full_backward_obstacle(path)
        if not obstacle:
            return FULL_BACKWARD, ""
        if kind == "grad_input":
            return FALLBACK, f"{obstacle}; {INPUT_FALLBACK_NOTE}."
        structured = self._survey is not None and self._survey.run_of(path).output_form == "structured"
        return (
            FALLBACK,
            f"{obstacle}; a tensor hook on {'each output tensor' if structured else 'its output'} is used instead.",
        )

    def _full_backward_obstacle(self, path: str) -> str:
        return full_backward_obstacle(self._survey.run_of(path)) if self._survey is not None else ""

    def _forward_capture(self, site: _Site) -> Callable[[nn.Module, tuple, Any], None]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = site.next_call(recorder.serial)
            if isinstance(output, torch.Tensor):
                recorder.keep(site, call, "", output)
            else:
                for leaf, tensor in tensor_leaves(output):
                    recorder.keep(site, call, leaf, tensor)

        return hook

    def _attention_capture(self, site: _Site) -> AttentionHooks:
        """The hooks of an Attn tick: the weights the module's attention computed in each call, recorded as the
        call's record (one leaf per attention where a module computes several), and, when the run takes a gradient,
        the objective's gradient with respect to them (a tensor hook on the weights: leaf ``grad``, ``0/grad``...),
        which gradient-weighted rollout needs."""

        def record(kept: list[torch.Tensor]) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = site.next_call(recorder.serial)
            for index, weights in enumerate(kept):
                leaf = "" if len(kept) == 1 else str(index)
                recorder.keep(site, call, leaf, weights)
                # nn.MultiheadAttention hands back a view of the weights it multiplied V with: the gradient reaches
                # that tensor, not the view.
                base = weights._base
                used = base if base is not None and base.numel() == weights.numel() else weights
                if torch.is_grad_enabled() and used.requires_grad:
                    keep = recorder.grad_hook(site, call, f"{leaf}/grad" if leaf else "grad")
                    used.register_hook(_reshaped(keep, weights.shape))

        return AttentionHooks(lambda: self._recorder is not None, record)

    def _pre_capture(self, site: _Site) -> Callable[[nn.Module, tuple, dict], None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = site.next_call(recorder.serial)
            if not kwargs and len(args) == 1 and isinstance(args[0], torch.Tensor):
                recorder.keep(site, call, "", args[0])  # the usual single input needs no leaf name
                return
            leaves = list(tensor_leaves(args)) + list(tensor_leaves(kwargs))
            if len(leaves) == 1 and leaves[0][0] == "0":
                leaves = [("", leaves[0][1])]
            for leaf, tensor in leaves:
                recorder.keep(site, call, leaf, tensor)

        return hook

    def _grad_capture(self, site: _Site) -> Callable[[nn.Module, tuple, Any], torch.Tensor | None]:
        """A forward hook that puts a tensor hook on each output tensor, so the gradient arrives there."""

        def hook(module: nn.Module, args: tuple, output: Any) -> torch.Tensor | None:
            recorder = self._recorder
            if recorder is None or not torch.is_grad_enabled():
                return None
            call = site.next_call(recorder.serial)
            # An output that depends on parameters but not on the image lies off the path to the input: the
            # backward pass must be asked to reach it, or its tensor hook never fires. The module's parameters
            # are asked for rather than the output itself, which a later in-place op may have rebased.
            off_path = site.off_path
            if off_path is None:  # no survey yet
                off_path = not any(t.requires_grad for _, t in tensor_leaves(args))
            if off_path:
                recorder.grad_roots.extend(p for p in module.parameters() if p.requires_grad)
            replaced = None
            if isinstance(output, torch.Tensor):
                if not output.requires_grad:
                    return None
                # Autograd re-routes a view that is later changed in place around the view's own node, so a hook
                # on it would never fire: hand the model an identical copy instead (rare: Swin V2's cpb_mlp.0).
                if site.rebase_view and output._is_view():
                    output = replaced = output.clone()
                output.register_hook(recorder.grad_hook(site, call, ""))
                if off_path:
                    recorder.grad_roots.append(output)
                return replaced
            for leaf, tensor in tensor_leaves(output):
                if tensor.requires_grad:
                    tensor.register_hook(recorder.grad_hook(site, call, leaf))
                    if off_path:
                        recorder.grad_roots.append(tensor)
            return None

        return hook

    def _input_grad_capture(self, site: _Site) -> Callable[[nn.Module, tuple], None]:
        """A forward pre-hook that puts a tensor hook on each input tensor: the ``grad_input`` fallback."""

        def hook(module: nn.Module, args: tuple) -> None:
            recorder = self._recorder
            if recorder is None or not torch.is_grad_enabled():
                return
            call = site.next_call(recorder.serial)
            leaves = list(tensor_leaves(args))
            if len(leaves) == 1 and leaves[0][0] == "0":
                leaves = [("", leaves[0][1])]
            for leaf, tensor in leaves:
                if tensor.requires_grad:
                    tensor.register_hook(recorder.grad_hook(site, call, leaf))

        return hook

    def _full_backward_capture(self, site: _Site) -> Callable[[nn.Module, tuple, tuple], None]:
        grad_input = site.kind == "grad_input"

        def hook(module: nn.Module, grads_in: tuple, grads_out: tuple) -> None:
            recorder = self._recorder
            if recorder is None:
                return
            call = site.backward_call(recorder.serial)
            # grad_output has one entry per element of a tuple output, grad_input one per positional argument
            # (None for non-tensors and for inputs that need no gradient).
            grads = grads_in if grad_input else grads_out
            single = len(grads) == 1 if grad_input else not site.tuple_output
            for index, grad in enumerate(grads):
                if grad is not None:
                    recorder.keep(site, call, "" if single else str(index), grad)

        return hook

    # ---- runs ---------------------------------------------------------------------------------------------
    def adopt_survey(self, survey: ModelSurvey) -> None:
        """Use what a survey found: every hook's decisions, and the full backward hooks that need the fallback."""
        with self._lock:
            self._survey = survey
            self.needs_survey = False
            for (path, kind), live in list(self._live.items()):
                if kind in FULL_BACKWARD_KINDS and self._method_for(path, kind)[0] != live.info.method:
                    self.remove(path, kind)
                    self.add(path, kind)
                else:
                    live.site.learn(survey)

    def learn_clones(self, paths: set[tuple[str, HookKind]]) -> None:
        """Copy what these (path, kind) hooks see from now on: a later in-place op changed it (until the next
        survey, which decides again)."""
        with self._lock:
            for pair in paths:
                live = self._live.get(pair)  # type: ignore[arg-type]
                if live is not None:
                    live.site.clone = True

    def use_fallback_everywhere(self) -> None:
        """Last resort when a full backward hook raised in a way the survey did not predict."""
        with self._lock:
            for (path, kind), live in list(self._live.items()):
                if kind in FULL_BACKWARD_KINDS and live.info.method == FULL_BACKWARD:
                    module = self._modules[path]
                    for handle in live.handles:
                        handle.remove()
                    site = _Site(path, kind, FALLBACK)
                    if self._survey is not None:
                        site.learn(self._survey)
                    if kind == "grad_input":
                        handle = module.register_forward_pre_hook(self._input_grad_capture(site))
                        note = f"A full backward hook raised during the run; {INPUT_FALLBACK_NOTE}."
                    else:
                        handle = module.register_forward_hook(self._grad_capture(site))
                        note = (
                            "A full backward hook raised during the run; a tensor hook on its output is used instead."
                        )
                    self._live[(path, kind)] = _Live(HookInfo(path, kind, FALLBACK, note), [handle], site)

    @contextmanager
    def recording(self, recorder: Recorder) -> Iterator[Recorder]:
        self._recorder = recorder
        try:
            yield recorder
        finally:
            self._recorder = None
            recorder.release()

    def new_recorder(self) -> Recorder:
        return Recorder()


def _reshaped(hook: Callable[[torch.Tensor | None], None], shape: torch.Size) -> Callable[[torch.Tensor | None], None]:
    """``hook`` given the gradient in ``shape`` (a view's shape, the gradient arriving at its base)."""

    def reshaped(grad: torch.Tensor | None) -> None:
        hook(None if grad is None else grad.reshape(shape))

    return reshaped


# A module's hook dicts, the PyTorch method that fills each, and the kind a hook in it is listed as.
HOOK_DICTS: dict[str, tuple[str, HookKind]] = {
    "_forward_pre_hooks": (PRE, "pre"),
    "_forward_hooks": (FORWARD, "forward"),
    "_backward_pre_hooks": ("register_full_backward_pre_hook", "backward"),
    "_backward_hooks": (FULL_BACKWARD, "backward"),
}


def is_hookscopes(function: object) -> bool:
    """Whether a hook function is defined in Hookscope's code: hooks Hookscope registers outside a registry (a
    feature's, a lesson's, a run's survey) while they live."""
    function = getattr(function, "func", function)  # functools.partial
    return str(getattr(function, "__module__", "") or "").split(".")[0] == "hookscope"


def callers_hooks(model: nn.Module, ours: Collection[int] = ()) -> list[HookInfo]:
    """The hooks on ``model``'s modules that Hookscope did not register: the model's owner's own (``yours``), found
    in each module's ``_forward_pre_hooks``, ``_forward_hooks``, ``_backward_pre_hooks`` and ``_backward_hooks``,
    leaving out the handle ids in ``ours`` (``HookRegistry.handle_ids``) and hooks whose function is Hookscope's.
    Nothing is changed: Hookscope lists them and leaves them where they are."""
    ours = set(ours)
    found = []
    for path, module in model.named_modules():
        for attribute, (method, kind) in HOOK_DICTS.items():
            hooks = getattr(module, attribute, None)
            if not hooks:
                continue
            for handle_id, function in list(hooks.items()):  # one C call: a worker may add or remove meanwhile
                if handle_id in ours or is_hookscopes(function):
                    continue
                if attribute == "_backward_hooks" and not getattr(module, "_is_full_backward_hook", True):
                    method = "register_backward_hook"
                name = getattr(getattr(function, "func", function), "__qualname__", type(function).__name__)
                found.append(HookInfo(path, kind, method, f"not Hookscope's: yours ({name})", "?", yours=True))
    return found


def full_backward_obstacle(run: ModuleRun) -> str:
    """Why ``register_full_backward_hook`` would fail on a module that ran as ``run``, or "" if it works."""
    if run.modifies_input:
        return "The module changes its input in place, so a full backward hook would raise"
    if run.output_modified_later:
        return "An in-place operation after this module changes its output, so a full backward hook would raise"
    if run.output_form == "structured":
        return "The module returns a nested structure that full backward hooks do not see into"
    if run.ran and not run.input_needs_grad:
        return "The module's inputs do not depend on the image (e.g. a fixed table), so a full backward hook would never fire"
    return ""


def _keep_output(kept: list[torch.Tensor]) -> Callable[[nn.Module, tuple, Any], None]:
    """A forward hook that keeps a copy of each output (a later in-place op must not change it)."""

    def hook(module: nn.Module, args: tuple, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            kept.append(output.detach().clone())

    return hook
