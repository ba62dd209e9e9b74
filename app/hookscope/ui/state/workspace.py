"""The window's state in one object: every change is a method, every change a signal.

The ``Workspace`` holds the loaded model and its hook registry, the device, the gradient target, image A (the one
asked for and the one on screen), image B, the image list, the panels' settings and the last run's outcome. Views
and features read it and subscribe to its signals; none of them reaches into another. Every change of the hook
registry (ticks, edits, a device move) goes through a method here, which announces it (``hooks_changed``) and asks
the ``RunScheduler`` for a run: nobody has to remember to.

The product decisions that follow a failure live here too: a device that fails falls back to the CPU; an image
that cannot be read leaves the previous results (and their image) in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import cast

import numpy as np
from PySide6.QtCore import QObject, Signal

from hookscope.core.common.errors import DeviceError, HookscopeError, ImageError, RunError
from hookscope.core.common.resources import sample_image
from hookscope.core.engine.capture import check_target
from hookscope.core.engine.devices import available_devices
from hookscope.core.engine.hooks import GRADIENT_KINDS, HookInfo, HookKind, HookRegistry
from hookscope.core.engine.interventions import Intervention
from hookscope.core.engine.objectives import parse_target
from hookscope.core.engine.tree import NOT_RUN_REASON, ModuleInfo, default_checks, module_tree
from hookscope.core.models.catalogue import DEFAULT_MODEL
from hookscope.core.models.images import Preprocess
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.pictures.panels import PanelSettings
from hookscope.ui.state.image_queue import ImageQueue
from hookscope.ui.state.requests import (
    ImageSource,
    LoadOutcome,
    LoadRequest,
    PictureOutcome,
    PictureRequest,
    RunOutcome,
    RunRequest,
    execute_load,
    execute_pictures,
)
from hookscope.ui.state.scheduler import RunScheduler
from hookscope.ui.state.tasks import Task, TaskPool
from hookscope.ui.state.worker import Job, JobRunner, collect_fully_soon

CHECK_KINDS = ("forward", "tensor")  # what a default or --check tick hooks: the Act and Grad columns
HookChange = tuple[str, str, bool]  # (path, kind, ticked)


@dataclass(frozen=True)
class HeldStart:
    """What a window on a model the caller holds (``hookscope.Viewer``) starts with: the model (its source
    "object"), the image shown first (None: the bundled sample), the (path, kind) pairs ticked first (None: the
    model's default layers, in ``check_kinds``) and the image list."""

    loaded: LoadedModel
    image: ImageSource | None = None
    checks: tuple[tuple[str, str], ...] | None = None
    queue: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunFailure:
    """A failed run or load, as views see it: the one-line message and the error (its fields route it)."""

    message: str
    error: BaseException
    load: bool = False


def error_text(error: BaseException) -> str:
    """One line for the status bar and the dialog; a traceback on stderr only for bugs."""
    import sys
    import traceback

    if isinstance(error, HookscopeError):
        return str(error)
    if isinstance(error, MemoryError):
        return "Out of memory: try a smaller model or a smaller image."
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    first = str(error).strip().splitlines()
    return f"Unexpected error: {type(error).__name__}: {first[0] if first else ''}".rstrip(": ")


class Workspace(QObject):
    """What the window shows and runs on. Methods change it; signals say what changed."""

    model_loading = Signal(str)  # a description of what is being loaded
    hub_model_asked = Signal(str)  # an "hf:ORG/NAME" chosen: the feature that fetches Hub models opens it
    load_cancelled = Signal(str)  # what was being loaded: the load was given up, the previous model stays
    model_changed = Signal(object)  # the LoadOutcome now in use (registry made, ticks and edits carried over)
    hooks_changed = Signal(object)  # list of (path, kind, ticked); [] when edits or a device move changed hooks
    external_hooks_changed = Signal(object)  # list of HookInfo: hooks a feature put on the model outside the registry
    device_changed = Signal(str)
    weights_changed = Signal(str)
    preprocess_changed = Signal(object)  # the Preprocess the loaded model is fed with from now on
    target_changed = Signal(object)
    image_requested = Signal(object)  # the ImageSource asked for (not yet run)
    image_list_changed = Signal()
    image_b_changed = Signal(object)  # ImageSource | None
    panel_settings_changed = Signal(object)  # list of (path, kind, PanelSettings) to apply to open panels
    channel_orders_changed = Signal()  # a dataset scan's channel orders came or went (the "dataset" sort)
    run_applied = Signal(object)  # RunOutcome now on screen
    pictures_ready = Signal(object)  # PictureOutcome: pictures of panels scrolled into view after the run on screen
    failed = Signal(object)  # RunFailure of the newest run or load
    busy_changed = Signal(bool)
    status = Signal(str, int)  # a status-bar message and how long to show it (ms)
    error = Signal(str, bool)  # a message for the user, and whether it deserves a dialog

    def __init__(
        self,
        weights: str = "default",
        device: str = "cpu",
        checks: list[str] | None = None,
        parent: QObject | None = None,
        check_kinds: tuple[str, ...] = CHECK_KINDS,
    ) -> None:
        super().__init__(parent)
        self.check_kinds = tuple(check_kinds)  # what a default or --check tick hooks
        self.weights = weights
        self.device = device if device in available_devices() else "cpu"
        self.requested_device = device
        self.target: int | str = "top1"
        self.loaded: LoadedModel | None = None
        self.registry: HookRegistry | None = None
        self.external_hooks: list[HookInfo] = []  # e.g. a feature visualization's hook, while it lives
        self.nodes: list[ModuleInfo] = []
        self.queue = ImageQueue()
        self.image: ImageSource | None = None  # the image of the results on screen
        self.wanted_image: ImageSource | None = None  # the newest image asked for
        self.image_b: ImageSource | None = None
        self.last: RunOutcome | None = None
        self.default_settings = PanelSettings()
        self.settings: dict[tuple[str, str], PanelSettings] = {}
        self.missing_checks: list[str] = []
        self.applied_generations: list[int] = []
        self.model_message = ""  # what the last load said; views take it (``take_model_message``) for a run's line
        # The view's (``attach_view``): the panels' size, and the panels (kind, record key) out of view when a run is
        # asked for, whose pictures wait until they scroll in (``prepare_pictures``).
        self.view_size: Callable[[], tuple[int, int] | None] = lambda: None
        self.hidden_panels: Callable[[], frozenset[tuple[str, str]]] = frozenset
        self.channel_orders: dict[str, np.ndarray] = {}  # module path -> a dataset scan's channel order
        # What features add to a saved session, by key: (save(session path) -> JSON value or None, restore(value,
        # session folder) -> problem lines). Features never import each other; the sessions feature calls these.
        self.session_parts: dict[str, tuple[Callable[[str], object], Callable[[object, str], list[str]]]] = {}
        self._initial_checks = checks
        self._initial_kinds: dict[str, tuple[str, ...]] = {}  # columns other than ``check_kinds`` for a first tick
        self._dirty = False  # ticks, target or device changed since the results on screen
        self._target_before: tuple[int | str] | None = None  # the target before one no run has succeeded with yet
        self._run_wanted = False  # a run was asked for while a model loaded
        self._load_failed: tuple[int, Callable[[BaseException], bool]] | None = None
        self.loading_what = ""  # what the load in flight opens, in a few words
        self._weights_in_use = weights  # the weights of the model on screen, restored when a load is cancelled
        self._closing = False
        self._shutdown_hooks: list[Callable[[], object]] = []
        self.scheduler = RunScheduler(self._freeze_run, self)
        self.scheduler.loaded.connect(self._apply_model)
        self.scheduler.load_failed.connect(self._on_load_failed)
        self.scheduler.ran.connect(self._apply_run)
        self.scheduler.run_failed.connect(self._on_run_failed)
        # Features' background work (``submit``): exclusive tasks take turns with the runs on the scheduler's runner.
        self.tasks = TaskPool(lambda: not self.scheduler.busy, self.scheduler.hold, self)
        self.scheduler.busy_changed.connect(self._on_runs_busy)
        self.tasks.busy_changed.connect(lambda *_: self.busy_changed.emit(self.busy))
        # Pictures of panels scrolled into view run beside the runs (they only read a finished run's records).
        self.picture_runner = JobRunner(self)
        self.picture_runner.returned.connect(self._on_pictures)
        self.picture_runner.failed.connect(self._on_pictures_failed)
        self.picture_runner.busy_changed.connect(self._next_pictures)  # what was asked meanwhile, once it is free
        self._pictures_wanted: set[tuple[str, str]] = set()

    # ================================================================================================ model ====
    @property
    def generation(self) -> int:
        return self.scheduler.generation

    @property
    def busy(self) -> bool:
        """A load or run is running, asked for or waiting, or an exclusive task is (what the busy bar shows)."""
        return not self._closing and (self.scheduler.busy or self.tasks.busy)

    def _on_runs_busy(self, busy: bool) -> None:
        # The scheduler's word, not its ``busy`` recomputed: asking for a frame's run says True just before it
        # submits the run, while nothing runs yet.
        if not busy and not self.scheduler.busy:
            self.tasks.runs_idle_now()  # an exclusive task waiting for the runs starts first
        self.busy_changed.emit(not self._closing and (busy or self.tasks.busy))

    # ======================================================================================== background ====
    def submit(self, label: str, work: Callable[[], object], exclusive: bool = False) -> Task:
        """Run ``work`` in the background; the ``Task`` returned says how it goes (``hookscope.ui.state.tasks``).

        ``exclusive``: the work uses the live model or its hook registry, so it runs between runs, never beside
        one, and exclusive tasks run one after another in the order submitted (none is dropped). Otherwise it
        starts at once. A generator function's yields come out of ``Task.progressed``. Closing cancels every task
        and waits a bounded time for them."""
        return self.tasks.submit(label, work, exclusive)

    def on_shutdown(self, hook: Callable[[], object]) -> None:
        """Call ``hook`` when the window closes, before the background work is cancelled and waited for: a feature
        stops what it started (a source, a flag its work polls) there."""
        self._shutdown_hooks.append(hook)

    # ============================================================================================== the view ====
    def attach_view(
        self,
        view_size: Callable[[], tuple[int, int] | None],
        hidden_panels: Callable[[], frozenset[tuple[str, str]]] | None = None,
    ) -> None:
        """The view runs are made for: the panels' size (pictures are coloured at it), and the panels out of view
        (their pictures wait until they scroll in)."""
        self.view_size = view_size
        if hidden_panels is not None:
            self.hidden_panels = hidden_panels

    def take_model_message(self) -> str:
        """What the last load said ("resnet18 loaded in 80 ms"), once: the first run's status line leads with it."""
        message, self.model_message = self.model_message, ""
        return message

    @property
    def loading(self) -> bool:
        return self.scheduler.loading

    def set_model(self, name: str = DEFAULT_MODEL, weights: str | None = None) -> None:
        """Load a catalogue model in the background; ticks and edits carry over where their paths exist."""
        weights = weights if weights is not None else self.weights
        if weights not in ("default", "none") and self.loaded is not None and name != self.loaded.name:
            weights = "default"  # a weights file belongs to one architecture
        self.weights = weights
        self._load_failed = None
        self.loading_what = name
        self.model_loading.emit(name)
        self.status.emit(f"Loading {name}…", 0)
        self.scheduler.load(lambda generation: execute_load(LoadRequest(generation, name, weights)))

    def ask_hub_model(self, name: str) -> None:
        """A model from the Hugging Face Hub (``hf:ORG/NAME``) was chosen: whoever fetches Hub models (with the
        download's progress) loads it, through ``load_model_with``."""
        self.hub_model_asked.emit(name)

    def load_model_with(
        self, description: str, work: Callable[[], LoadedModel], failed: Callable[[BaseException], bool] | None = None
    ) -> None:
        """Load the model ``work`` builds (a model file, a session's model) in the background, as set_model does.

        ``failed`` sees the error first; returning True means it took care of it (asked for trust and retried).
        """
        self.loading_what = description
        self.model_loading.emit(description)
        self.status.emit(f"Loading {description}…", 0)
        generation = self.scheduler.load(lambda generation: _load_with(generation, work))
        self._load_failed = (generation, failed) if failed is not None else None

    def cancel_load(self) -> bool:
        """Give up on the model load in flight (Cancel): the model, hooks and results on screen stay, at once,
        even when the load is stuck in a model file's ``build()``; its thread finishes in the background and
        its result is dropped. Returns whether a load was in flight."""
        if self._closing or not self.scheduler.cancel_load():
            return False
        what, self.loading_what = self.loading_what, ""
        self._load_failed = None
        self.weights = self._weights_in_use
        self.weights_changed.emit(self.weights)  # the boxes go back to what is in use
        still = f"still showing {self.loaded.display_name}" if self.loaded is not None else "no model is loaded"
        self.status.emit(f"Loading {what or 'the model'} was cancelled; {still}.", 8000)
        self.load_cancelled.emit(what)
        if self._run_wanted and self.loaded is not None:
            self._run_wanted = False
            self.request_run()
        return True

    def set_weights(self, weights: str) -> None:
        if weights != self.weights:
            self.weights = weights
            self.weights_changed.emit(weights)
            self.set_model(self.loaded.name if self.loaded else DEFAULT_MODEL, weights)

    def set_preprocess(self, preprocess: Preprocess) -> None:
        """Feed the loaded model with ``preprocess`` from now on (until another model loads), and run again.

        ``loaded`` is replaced, not changed in place, so a run already in flight keeps the input it started with.
        """
        if self.loaded is None or preprocess == self.loaded.preprocess:
            return
        self.loaded = replace(self.loaded, preprocess=preprocess)
        self.preprocess_changed.emit(preprocess)
        self._dirty = True
        self.request_run()

    def _apply_model(self, outcome: LoadOutcome) -> None:
        first = self.loaded is None
        previous = self.ticked_pairs()
        previous_edits = [edit for _, edit, _ in self.registry.edits()] if self.registry is not None else []
        if self.registry is not None:
            self.registry.clear()  # every hook on the old model goes first
        if not first:
            collect_fully_soon()  # the old model and its last run's panels wait in reference cycles
        self.loaded = outcome.loaded
        self._weights_in_use = self.weights
        self.loading_what = ""
        self.registry = HookRegistry(outcome.loaded.module)
        self.nodes = outcome.nodes
        self.target = "top1"
        self.last = None
        self._load_failed = None
        paths = set(self.registry.paths)
        if self._initial_checks is not None or first:
            wanted = (
                self._initial_checks
                if self._initial_checks is not None
                else default_checks(outcome.loaded.name, self.nodes)
            )
            kinds, self._initial_checks, self._initial_kinds = self._initial_kinds, None, {}
            self.missing_checks = [p for p in wanted if p not in paths]
            pairs = [(p, k) for p in wanted if p in paths for k in kinds.get(p, self.check_kinds)]
            message = f"{outcome.loaded.name} loaded in {outcome.load_ms:.0f} ms"
        else:
            pairs = sorted(pair for pair in previous if pair[0] in paths)
            dropped = len(previous) - len(pairs)
            message = f"{outcome.loaded.name} loaded in {outcome.load_ms:.0f} ms; {len(pairs)} hooks carried over"
            if dropped:
                message += f", {dropped} dropped (no such module)"
            if previous and not pairs:
                pairs = [(p, k) for p in default_checks(outcome.loaded.name, self.nodes) for k in self.check_kinds]
                message += "; ticked its default layers instead"
            message += self._carry_edits(previous_edits)
        self.model_message = message
        self.model_changed.emit(outcome)
        if self.missing_checks:
            self.error.emit(f"The model has no module named {', '.join(map(repr, self.missing_checks))}.", True)
        self.status.emit(message, 8000)
        self.set_ticked(pairs, True)
        self._run_wanted = False
        self.request_run()

    def _carry_edits(self, edits: list[Intervention]) -> str:
        """The interventions move to the new model where their module exists, on or off as they were (as ticks
        do); the status message's part about them."""
        carried, dropped = 0, []
        registry = self.registry
        assert registry is not None  # the new model's, made just before
        for edit in edits:
            try:
                registry.add_edit(edit)
                carried += 1
            except HookscopeError as error:  # no such module in the new model
                dropped.append(f"{edit.spec} ({error})")
        if not edits:
            return ""
        text = f"; {carried} intervention{'s' if carried != 1 else ''} carried over"
        if dropped:
            text += f", dropped: {', '.join(dropped)}"
        return text

    def _on_load_failed(self, error: object) -> None:
        if self._closing:
            return
        self.loading_what = ""
        handler, self._load_failed = self._load_failed, None
        if isinstance(error, BaseException) and handler is not None and handler[1](error):
            pass  # the caller took care of it (asked for trust, or for the architecture, and retried)
        else:
            message = error_text(error) if isinstance(error, BaseException) else str(error)
            self.failed.emit(
                RunFailure(message, error if isinstance(error, BaseException) else RuntimeError(message), load=True)
            )
            self.error.emit(message, True)
        self.weights_changed.emit(self.weights)  # the boxes go back to what is in use
        if self._run_wanted and self.loaded is not None and not self.loading:
            self._run_wanted = False
            self.request_run()

    # ================================================================================================ hooks ====
    def ticked_pairs(self) -> set[tuple[str, str]]:
        if self.registry is None:
            return set()
        return {(h.path, h.kind) for h in self.registry.handles()}

    def is_ticked(self, path: str, kind: str) -> bool:
        return self.registry is not None and self.registry.has(path, hook_kind(kind))

    def set_ticked(self, pairs: Iterable[tuple[str, str]], ticked: bool) -> list[HookChange]:
        """Register (or remove) the hooks of many (path, kind) pairs at once; one announcement, one run."""
        if self.registry is None:
            return []
        known = set(self.registry.paths)
        changes: list[HookChange] = []
        for path, name in pairs:
            kind = hook_kind(name)
            if path not in known or self.registry.has(path, kind) == ticked:
                continue
            if ticked:
                self.registry.add(path, kind)  # on the live module right here
            else:
                self.registry.remove(path, kind)
            changes.append((path, kind, ticked))
        if changes:
            self._hooks_changed(changes)
        return changes

    def tick(self, path: str, kind: str, ticked: bool = True) -> bool:
        return bool(self.set_ticked([(path, kind)], ticked))

    def untick_all(self) -> None:
        self.set_ticked(sorted(self.ticked_pairs()), False)

    def remove_hook(self, info: HookInfo) -> None:
        """Remove one live handle (the inspector's ✕): a tick is unticked, an edit removed."""
        if info.edit_id is not None:
            self.remove_edit(info.edit_id)
        else:
            self.tick(info.path, info.kind, False)

    def add_edit(self, edit: Intervention) -> int | None:
        """Register an intervention's hook; the error is shown (and None returned) when the engine refuses it."""
        if self.registry is None:
            self.error.emit("No model is loaded yet.", True)
            return None
        try:
            edit_id = self.registry.add_edit(edit)
        except HookscopeError as error:
            self.error.emit(str(error), True)
            return None
        self.status.emit(f"Added: {edit.describe()}", 5000)
        self._hooks_changed([])
        return edit_id

    def set_edit_enabled(self, edit_id: int, enabled: bool, rerun: bool = True) -> bool:
        if self.registry is None:
            return False
        try:
            self.registry.set_edit_enabled(edit_id, enabled)
        except HookscopeError as error:
            self.error.emit(str(error), True)
            self._hooks_changed([], rerun=False)
            return False
        self._hooks_changed([], rerun=rerun)
        return True

    def remove_edit(self, edit_id: int) -> None:
        if self.registry is not None:
            self.registry.remove_edit(edit_id)
            self._hooks_changed([])

    def remove_all_edits(self, rerun: bool = True) -> None:
        if self.registry is not None and self.registry.edits():
            for edit_id, _, _ in self.registry.edits():
                self.registry.remove_edit(edit_id)
            self._hooks_changed([], rerun=rerun)

    def restore_edits(self, add: Callable[[HookRegistry], None]) -> None:
        """Edits added to the registry by ``add`` (a restored session); shown and run once."""
        if self.registry is not None:
            add(self.registry)
            self._hooks_changed([])

    def add_external_hook(self, info: HookInfo) -> None:
        """List a hook a feature registers on the live model itself, outside the registry (a feature
        visualization's), for as long as it lives: the hook inspector shows it. Nothing is registered here."""
        self.external_hooks.append(info)
        self.external_hooks_changed.emit(list(self.external_hooks))

    def remove_external_hook(self, info: HookInfo) -> None:
        if info in self.external_hooks:
            self.external_hooks.remove(info)
            self.external_hooks_changed.emit(list(self.external_hooks))

    def _hooks_changed(self, changes: list[HookChange], rerun: bool = True) -> None:
        self.hooks_changed.emit(changes)
        if rerun:
            self._dirty = True
            self.request_run()

    # ======================================================================================= device, target ====
    def set_device(self, device: str) -> None:
        """Move runs to ``device``: every hook is removed first, then the ticked ones are registered again."""
        if device == self.device or device not in available_devices():
            return
        self.device = device
        if self.registry is not None:
            pairs = self.ticked_pairs()
            edits = [edit for _, edit, _ in self.registry.edits()]  # the interventions move with the ticks
            self.registry.clear()
            for path, kind in sorted(pairs):
                self.registry.add(path, hook_kind(kind))
            for edit in edits:
                try:
                    self.registry.add_edit(edit)  # on or off as it was
                except HookscopeError as error:
                    self.error.emit(f"{edit.spec} was dropped: {error}", False)
        self.device_changed.emit(device)
        self._hooks_changed([])

    def set_target(self, target: object) -> None:
        """Take gradients of ``target`` and run again: a class index, ``"top1"``, or an objective (issue 25) in its
        text form (``class:C``, ``class:C@x0,y0,x1,y1``, ``box:N``, ``similar:IMAGE``, ``text:PROMPT``) or as the
        engine's ``Objective``, kept as text (what sessions save and ``--target`` reads).

        A class the model does not have (the last run's class count says so) or words that are no objective are an
        error message; the target and the results on screen stay as they were. An objective that does not fit the
        model (a box the run did not find, a text without a text tower) is refused by the run itself: its error is
        shown, the results stay, and the target goes back to the one before."""
        target = target_text(target)
        try:
            if isinstance(target, int) or target == "top1":
                if self.last is not None:
                    scores = self.last.result.scores
                    check_target(target, int(scores.shape[1]) if scores is not None else None)
            else:
                parse_target(target)  # the words only: whether the objective fits the model, the run says
        except HookscopeError as error:
            self.error.emit(str(error), True)
            return
        if target == self.target:
            self.request_run()
            return
        if self._target_before is None:
            self._target_before = (self.target,)  # the last target a run succeeded with
        self.target = target
        self._dirty = True
        self.target_changed.emit(target)
        self.request_run()

    # =============================================================================================== images ====
    def request_image(self, source: ImageSource, debounce: bool = True) -> None:
        """Show ``source``: run it (without the debounce pause when ``debounce`` is False: a video's frames)."""
        self.wanted_image = source
        self.image_requested.emit(source)
        if not self._closing:
            self.scheduler.request_run(debounce)

    def open_paths(self, paths: list[str]) -> None:
        """Show the first file; the rest wait in the image list."""
        if not paths:
            self.error.emit("Nothing to open: drop or choose image files.", True)
            return
        first = self.queue.replace(paths)
        self.image_list_changed.emit()
        if first is not None:
            self.request_image(ImageSource.from_path(first))

    def select_image(self, row: int) -> None:
        if row != self.queue.index:
            path = self.queue.select(row)
            if path is not None:
                self.image_list_changed.emit()
                self.request_image(ImageSource.from_path(path))

    def step_image(self, delta: int) -> None:
        path = self.queue.step(delta)
        if path is None:
            self.status.emit("No image list to step through: drop or open several files.", 4000)
            return
        self.image_list_changed.emit()
        self.request_image(ImageSource.from_path(path))

    def set_image_b(self, source: ImageSource | None) -> None:
        """Compare every run with image B (None: stop comparing)."""
        if source == self.image_b:
            return
        self.image_b = source
        self.image_b_changed.emit(source)
        self.request_run()

    # ====================================================================================== panel settings ====
    def settings_for(self, path: str, kind: str) -> PanelSettings:
        return self.settings.get((path, kind), self.default_settings)

    def set_panel_settings(self, path: str, kind: str, settings: PanelSettings) -> None:
        """One panel's colormap, scaling, order or view (set by the panel itself: nothing to apply back)."""
        self.settings[(path, kind)] = settings

    def set_all(self, field: str, value: str) -> None:
        """One setting for every panel (View menu), and the default for panels made later."""
        self.default_settings = replace(self.default_settings, **{field: value})
        pairs = {pair for pair in self.settings} | self.ticked_pairs()
        self.settings = {pair: replace(self.settings_for(*pair), **{field: value}) for pair in pairs}
        self.panel_settings_changed.emit([(p, k, s) for (p, k), s in self.settings.items()])

    def apply_panel_settings(self, default: PanelSettings, pairs: dict[tuple[str, str], PanelSettings]) -> None:
        """Every panel's colormap, scaling, order and view at once (a restored session)."""
        self.default_settings = default
        self.settings = dict(pairs)
        self.panel_settings_changed.emit([(p, k, self.settings_for(p, k)) for p, k in self.ticked_pairs()])

    # ================================================================================================= runs ====
    def start(self, model: str, image: str | None) -> None:
        """The first model and image: ``image`` (or the bundled sample) with the model's default ticks."""
        first = image if image is not None else str(sample_image())
        self.queue.replace([first] if image is not None else [])
        self.wanted_image = ImageSource.from_path(first)
        if self.requested_device != self.device:
            self.error.emit(f"Device '{self.requested_device}' is not available here; using the CPU.", False)
        self.set_model(model, self.weights)

    def start_held(self, start: HeldStart) -> None:
        """The first model is one the caller holds in Python (``hookscope.Viewer``): it is adopted as any model
        load is (on the model's thread, where it is put in eval mode and its tree is built), with no file and no
        question, and shown with the start's image, ticks and image list."""
        self.queue.replace(list(start.queue))
        self.image_list_changed.emit()
        self.wanted_image = start.image if start.image is not None else ImageSource.from_path(sample_image())
        if start.checks is not None:
            pairs = list(start.checks)
            self._initial_checks = list(dict.fromkeys(path for path, _ in pairs))
            self._initial_kinds = {path: tuple(kind for p, kind in pairs if p == path) for path in self._initial_checks}
        if self.requested_device != self.device:
            self.error.emit(f"Device '{self.requested_device}' is not available here; using the CPU.", False)
        loaded = start.loaded

        def adopt() -> LoadedModel:  # on the model's thread
            if self._closing:
                return loaded  # closed before the load ran: the model has been given back as it was
            loaded.module.eval()  # no dropout, batch norm on its running statistics (which then stay as they are)
            return loaded

        self.load_model_with(loaded.name, adopt)

    def run_again(self) -> None:
        """Run the current image again with the current ticks (F5)."""
        self.request_run()

    def request_run(self) -> None:
        if not self._closing:
            self.scheduler.request_run()

    def set_channel_orders(self, orders: dict[str, np.ndarray]) -> None:
        """A dataset scan's channel order per module path ({} when there is none); the results are redrawn."""
        self.channel_orders = dict(orders)
        self.channel_orders_changed.emit()
        self.run_again()

    def _freeze_run(self, generation: int) -> RunRequest | None:
        if self._closing or self.wanted_image is None:
            return None
        if self.loading or self.loaded is None or self.registry is None:
            self._run_wanted = True
            return None
        return RunRequest.freeze(
            generation,
            self.loaded,
            self.registry,
            self.wanted_image,
            self.device,
            self.target,
            self.settings,
            self.default_settings,
            image_b=self.image_b,
            fit=self.view_size(),
            channel_orders=self.channel_orders,
            hidden=self.hidden_panels(),
        )

    @property
    def preparing(self) -> bool:
        """Pictures of panels scrolled into view are being made."""
        return self.picture_runner.busy

    def prepare_pictures(self, idents: Iterable[tuple[str, str]]) -> bool:
        """Make the pictures of the run on screen's records ``idents`` (kind, key) that were left out of it while
        their panels were out of view; ``pictures_ready`` brings them. Asked while pictures are being made, they
        are made next, together with any others asked meanwhile (a fast scroll asks many times). Returns whether
        there was anything to make."""
        outcome = self.last
        if self._closing or outcome is None:
            return False
        known = {(r.kind, r.key) for r in outcome.deferred}
        wanted = known & set(idents)
        self._pictures_wanted |= wanted
        self._next_pictures()
        return bool(wanted)

    def _next_pictures(self, *_: object) -> None:
        outcome = self.last
        if self._closing or outcome is None or self.picture_runner.busy or not self._pictures_wanted:
            return
        wanted, self._pictures_wanted = self._pictures_wanted, set()
        records = tuple(r for r in outcome.deferred if (r.kind, r.key) in wanted)
        request = PictureRequest(
            outcome,
            records,
            MappingProxyType(dict(self.settings)),
            self.default_settings,
            self.view_size(),
            MappingProxyType(dict(self.channel_orders)),
        )
        self.picture_runner.submit(
            Job(
                outcome.generation,
                lambda: execute_pictures(request),
                lambda: self.last is not outcome,
                label="pictures",
            )
        )

    def _on_pictures(self, job: Job, pictures: PictureOutcome) -> None:
        if not self._closing and pictures.outcome is self.last:
            self.pictures_ready.emit(pictures)

    def _on_pictures_failed(self, job: Job, error: object) -> None:
        if not self._closing:
            error = error if isinstance(error, BaseException) else RuntimeError(str(error))
            self.error.emit(error_text(error), False)

    def _apply_run(self, outcome: RunOutcome) -> None:
        if self._closing:
            return
        self.last = outcome
        self._pictures_wanted.clear()  # of the run before: this one says anew what it left undrawn
        self.image = outcome.image
        if self.wanted_image == outcome.image:
            self.wanted_image = outcome.image  # keep the pixels: re-runs need not read the file again
        if self.image_b is not None and outcome.image_b == self.image_b:
            self.image_b = outcome.image_b
        self._dirty = False
        self._target_before = None  # the target worked
        self.applied_generations.append(outcome.generation)
        self.run_applied.emit(outcome)

    def _on_run_failed(self, error: object) -> None:
        if self._closing:
            return
        error = error if isinstance(error, BaseException) else RuntimeError(str(error))
        message = error_text(error)
        failed = self.wanted_image
        self.error.emit(message, True)
        self.failed.emit(RunFailure(message, error))  # e.g. the Interventions switch off an edit that failed
        if self._target_before is not None and is_target_error(error):
            # A target that does not fit the model (box:7 when 3 boxes were found): back to the one before, which
            # the results on screen were made with; nothing runs again.
            (self.target,), self._target_before = self._target_before, None
            self._dirty = False
            self.target_changed.emit(self.target)
            return
        if isinstance(error, DeviceError) and self.device != "cpu":
            self.set_device("cpu")  # back to the device that always works; the run follows
            return
        if isinstance(error, ImageError) and self.image is not None and failed != self.image:
            self.wanted_image = self.image  # the results on screen stay; later runs use their image
            if self._dirty:
                self.request_run()
        elif (
            isinstance(error, ImageError)
            and self.image is None
            and failed is not None
            and failed.path != str(sample_image())
        ):
            self.request_image(ImageSource.from_path(sample_image()))  # nothing on screen yet: the sample

    def missing_reason(self, path: str, kind: str) -> str:
        """Why a ticked pair has no record in the last run, in the user's words."""
        survey = self.last.result.survey if self.last is not None else None
        if survey is not None and not survey.run_of(path).ran:
            return f"No record: this module {NOT_RUN_REASON}."
        if kind in GRADIENT_KINDS and self.last is not None and self.last.result.no_target:
            return f"No gradient taken in this run: {self.last.result.no_target}"  # the whole run's one reason
        if kind in GRADIENT_KINDS:
            where = "input" if kind == "grad_input" else "output"
            missing = self.last.result.no_gradient if self.last is not None else []
            why = [m.reason for m in missing if (m.path, m.kind) == (path, kind)]
            if why:
                return f"No record: no gradient reached this module's {where}: {why[0]}."
            return f"No record: no gradient reached this module's {where} on the way to the target."
        if kind == "pre":
            return "No record: this module received no tensor input."
        return "No record: the hook saw no tensor in the last run."

    # ============================================================================================== closing ====
    def shutdown(self) -> None:
        """Stop the features' work (their ``on_shutdown`` hooks), cancel every task, cancel and wait a bounded time
        for the workers (``CLOSE_WAIT_MS``, all of them: the pool's), remove every hook; safe to call twice."""
        if self._closing:
            return
        self._closing = True
        for hook in self._shutdown_hooks:
            hook()
        self.tasks.shutdown()
        self.picture_runner.shutdown(0)
        self.scheduler.shutdown()
        if self.registry is not None:
            self.registry.clear()


def hook_kind(kind: str) -> HookKind:
    """A kind as the views name it ("forward", "tensor"…), as the registry types it: one of its ``KINDS`` (the
    registry itself refuses any other)."""
    return cast(HookKind, kind)


def target_text(target: object) -> int | str:
    """A target as the workspace keeps it: an int class index, or words (an ``Objective`` as its text form)."""
    if isinstance(target, bool):
        raise TypeError(f"{target!r} is no gradient target")
    if isinstance(target, int):
        return target
    if isinstance(target, str):
        return target.strip()
    return parse_target(target).spec  # an Objective, kept in --target's words


def is_target_error(error: BaseException) -> bool:
    """Whether a failed run's error is the target's (one that names no module and no edit)."""
    return (
        isinstance(error, RunError)
        and not getattr(error, "module_path", None)
        and not getattr(error, "edit_spec", None)
    )


def _load_with(generation: int, work: Callable[[], LoadedModel]) -> LoadOutcome:
    """Run ``work`` (a model opened some other way than by catalogue name) and build its module tree."""
    start = time.perf_counter()
    loaded = work()
    return LoadOutcome(generation, loaded, module_tree(loaded.module), (time.perf_counter() - start) * 1000)
