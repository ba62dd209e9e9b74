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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import cast

import numpy as np
from PySide6.QtCore import QObject, Signal

from hookscope.core.common.errors import DeviceError, HookscopeError, ImageError, RunError
from hookscope.core.common.resources import sample_image
from hookscope.core.common.vocabulary import HookKind
from hookscope.core.engine.capture import check_target
from hookscope.core.engine.devices import available_devices
from hookscope.core.engine.hooks import GRADIENT_KINDS, HookInfo, HookRegistry
from hookscope.core.engine.interventions import Intervention
from hookscope.core.engine.target_words import Objective
from hookscope.core.engine.tree import NOT_RUN_REASON, ModuleInfo, default_ticks, module_tree
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
from hookscope.ui.words import window_words

TICK_KINDS = ("forward", "tensor")  # what a default or --tick tick hooks: the Act and Grad columns
HookChange = tuple[str, str, bool]  # (path, kind, ticked)


@dataclass(frozen=True)
class HeldStart:
    """What a window on a model the caller holds (``hookscope.Viewer``) starts with: the model (its source
    "object"), the image shown first (None: the bundled sample), the (path, kind) pairs ticked first (None: the
    model's default layers, in ``tick_kinds``) and the image list."""

    loaded: LoadedModel
    image: ImageSource | None = None
    ticks: tuple[tuple[str, str], ...] | None = None
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
        return window_words(error)  # what to do about it in the window's words
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
        ticks: list[str] | None = None,
        parent: QObject | None = None,
        tick_kinds: tuple[str, ...] = TICK_KINDS,
    ) -> None:
        super().__init__(parent)
        self._check_kinds = tuple(tick_kinds)  # what a default or --tick tick hooks
        self._weights = weights
        self._device = device if device in available_devices() else "cpu"
        self._requested_device = device
        self._target = Objective("top1")
        self._loaded: LoadedModel | None = None
        self._registry: HookRegistry | None = None
        self._external_hooks: list[HookInfo] = []  # e.g. a feature visualization's hook, while it lives
        self._nodes: list[ModuleInfo] = []
        self._queue = ImageQueue()
        self._image: ImageSource | None = None  # the image of the results on screen
        self._wanted_image: ImageSource | None = None  # the newest image asked for
        self._image_b: ImageSource | None = None
        self._last: RunOutcome | None = None
        self._default_settings = PanelSettings()
        self._settings: dict[tuple[str, str], PanelSettings] = {}
        self._missing_ticks: list[str] = []
        self._applied_generations: list[int] = []
        self._model_message = ""  # what the last load said; views take it (``take_model_message``) for a run's line
        # The view's (``attach_view``): the panels' size, and the panels (kind, record key) out of view when a run is
        # asked for, whose pictures wait until they scroll in (``prepare_pictures``).
        self._view_size: Callable[[], tuple[int, int] | None] = lambda: None
        self._hidden_panels: Callable[[], frozenset[tuple[str, str]]] = frozenset
        self._channel_orders: dict[str, np.ndarray] = {}  # module path -> a dataset scan's channel order
        # What features add to a saved session, by key: (save(session path) -> JSON value or None, restore(value,
        # session folder) -> problem lines). Features never import each other; the sessions feature calls these.
        self._session_parts: dict[str, tuple[Callable[[str], object], Callable[[object, str], list[str]]]] = {}
        self._initial_ticks = ticks
        self._initial_kinds: dict[str, tuple[str, ...]] = {}  # columns other than ``tick_kinds`` for a first tick
        self._dirty = False  # ticks, target or device changed since the results on screen
        self._target_before: tuple[Objective] | None = None  # the target before one no run has succeeded with yet
        self._run_wanted = False  # a run was asked for while a model loaded
        self._load_failed: tuple[int, Callable[[BaseException], bool]] | None = None
        self._loading_what = ""  # what the load in flight opens, in a few words
        self._weights_in_use = weights  # the weights of the model on screen, restored when a load is cancelled
        self._closing = False
        self._shutdown_hooks: list[Callable[[], object]] = []
        self._scheduler = RunScheduler(self._freeze_run, self)
        self._scheduler.loaded.connect(self._apply_model)
        self._scheduler.load_failed.connect(self._on_load_failed)
        self._scheduler.ran.connect(self._apply_run)
        self._scheduler.run_failed.connect(self._on_run_failed)
        # Features' background work (``submit``): exclusive tasks take turns with the runs on the scheduler's runner.
        self._tasks = TaskPool(lambda: not self._scheduler.busy, self._scheduler.hold, self)
        self._scheduler.busy_changed.connect(self._on_runs_busy)
        self._tasks.busy_changed.connect(lambda *_: self.busy_changed.emit(self.busy))
        # Pictures of panels scrolled into view run beside the runs (they only read a finished run's records).
        self._picture_runner = JobRunner(self)
        self._picture_runner.returned.connect(self._on_pictures)
        self._picture_runner.failed.connect(self._on_pictures_failed)
        self._picture_runner.busy_changed.connect(self._next_pictures)  # what was asked meanwhile, once it is free
        self._pictures_wanted: set[tuple[str, str]] = set()

    # ======================================================================================== what it holds ====
    # Read-only: every change is one of the methods below, and each says what changed by signal. Containers come out
    # as tuples or read-only mappings, so a caller cannot change them behind the signals' back.
    @property
    def tick_kinds(self) -> tuple[str, ...]:
        """What a default or ``--tick`` tick hooks."""
        return self._check_kinds

    @property
    def weights(self) -> str:
        """The weights asked for: "default", "none" or a file (``set_weights``)."""
        return self._weights

    @property
    def device(self) -> str:
        return self._device

    @property
    def requested_device(self) -> str:
        """The device the window was started with, available here or not."""
        return self._requested_device

    @property
    def target(self) -> Objective:
        """The gradient target, typed (``set_target``); its words only where it is shown or saved."""
        return self._target

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    @property
    def registry(self) -> HookRegistry | None:
        """The live model's hooks: read here, changed only through the tick and edit methods."""
        return self._registry

    @property
    def external_hooks(self) -> tuple[HookInfo, ...]:
        return tuple(self._external_hooks)

    @property
    def nodes(self) -> tuple[ModuleInfo, ...]:
        return tuple(self._nodes)

    @property
    def image_list(self) -> tuple[str, ...]:
        """The image list's paths (``open_paths``); ``image_index`` is the one shown."""
        return tuple(self._queue.paths)

    @property
    def image_index(self) -> int | None:
        return self._queue.index

    @property
    def image(self) -> ImageSource | None:
        """The image of the results on screen."""
        return self._image

    @property
    def wanted_image(self) -> ImageSource | None:
        """The newest image asked for."""
        return self._wanted_image

    @property
    def image_b(self) -> ImageSource | None:
        return self._image_b

    @property
    def last(self) -> RunOutcome | None:
        """The run on screen."""
        return self._last

    @property
    def default_settings(self) -> PanelSettings:
        return self._default_settings

    @property
    def settings(self) -> Mapping[tuple[str, str], PanelSettings]:
        return MappingProxyType(self._settings)

    @property
    def missing_ticks(self) -> tuple[str, ...]:
        """Modules asked to be ticked at the start that the model does not have."""
        return tuple(self._missing_ticks)

    @property
    def applied_generations(self) -> tuple[int, ...]:
        """The generation of every run shown, in order."""
        return tuple(self._applied_generations)

    @property
    def channel_orders(self) -> Mapping[str, np.ndarray]:
        return MappingProxyType(self._channel_orders)

    @property
    def session_parts(self) -> Mapping[str, tuple[Callable[[str], object], Callable[[object, str], list[str]]]]:
        """What features add to a saved session (``add_session_part``)."""
        return MappingProxyType(self._session_parts)

    @property
    def loading_what(self) -> str:
        """What the load in flight opens, in a few words ("" when none)."""
        return self._loading_what

    @property
    def model_message(self) -> str:
        """What the last load said, until a run's status line takes it (``take_model_message``)."""
        return self._model_message

    @property
    def view_size(self) -> Callable[[], tuple[int, int] | None]:
        """The attached view's panel size (``attach_view``)."""
        return self._view_size

    @property
    def hidden_panels(self) -> Callable[[], frozenset[tuple[str, str]]]:
        """The attached view's panels out of view (``attach_view``)."""
        return self._hidden_panels

    @property
    def scheduler(self) -> RunScheduler:
        return self._scheduler

    @property
    def tasks(self) -> TaskPool:
        return self._tasks

    def add_session_part(
        self, key: str, save: Callable[[str], object], restore: Callable[[object, str], list[str]]
    ) -> None:
        """A feature's part of a saved session, under ``key``: ``save(session path)`` gives a JSON value (or None)
        and ``restore(value, session folder)`` puts it back and returns problem lines. The sessions feature calls
        them; features never import one another."""
        self._session_parts[key] = (save, restore)

    # ================================================================================================ model ====
    @property
    def generation(self) -> int:
        return self._scheduler.generation

    @property
    def busy(self) -> bool:
        """A load or run is running, asked for or waiting, or an exclusive task is (what the busy bar shows)."""
        return not self._closing and (self._scheduler.busy or self._tasks.busy)

    def _on_runs_busy(self, busy: bool) -> None:
        # The scheduler's word, not its ``busy`` recomputed: asking for a frame's run says True just before it
        # submits the run, while nothing runs yet.
        if not busy and not self._scheduler.busy:
            self._tasks.runs_idle_now()  # an exclusive task waiting for the runs starts first
        self.busy_changed.emit(not self._closing and (busy or self._tasks.busy))

    # ======================================================================================== background ====
    def submit(self, label: str, work: Callable[[], object], exclusive: bool = False) -> Task:
        """Run ``work`` in the background; the ``Task`` returned says how it goes (``hookscope.ui.state.tasks``).

        ``exclusive``: the work uses the live model or its hook registry, so it runs between runs, never beside
        one, and exclusive tasks run one after another in the order submitted (none is dropped). Otherwise it
        starts at once. A generator function's yields come out of ``Task.progressed``. Closing cancels every task
        and waits a bounded time for them."""
        return self._tasks.submit(label, work, exclusive)

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
        self._view_size = view_size
        if hidden_panels is not None:
            self._hidden_panels = hidden_panels

    def take_model_message(self) -> str:
        """What the last load said ("resnet18 loaded in 80 ms"), once: the first run's status line leads with it."""
        message, self._model_message = self._model_message, ""
        return message

    @property
    def loading(self) -> bool:
        return self._scheduler.loading

    def set_model(self, name: str = DEFAULT_MODEL, weights: str | None = None) -> None:
        """Load a catalogue model in the background; ticks and edits carry over where their paths exist."""
        weights = weights if weights is not None else self._weights
        if weights not in ("default", "none") and self._loaded is not None and name != self._loaded.name:
            weights = "default"  # a weights file belongs to one architecture
        self._weights = weights
        self._load_failed = None
        self._loading_what = name
        self.model_loading.emit(name)
        self.status.emit(f"Loading {name}…", 0)
        self._scheduler.load(lambda generation: execute_load(LoadRequest(generation, name, weights)))

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
        self._loading_what = description
        self.model_loading.emit(description)
        self.status.emit(f"Loading {description}…", 0)
        generation = self._scheduler.load(lambda generation: _load_with(generation, work))
        self._load_failed = (generation, failed) if failed is not None else None

    def cancel_load(self) -> bool:
        """Give up on the model load in flight (Cancel): the model, hooks and results on screen stay, at once,
        even when the load is stuck in a model file's ``build()``; its thread finishes in the background and
        its result is dropped. Returns whether a load was in flight."""
        if self._closing or not self._scheduler.cancel_load():
            return False
        what, self._loading_what = self._loading_what, ""
        self._load_failed = None
        self._weights = self._weights_in_use
        self.weights_changed.emit(self._weights)  # the boxes go back to what is in use
        still = f"still showing {self._loaded.display_name}" if self._loaded is not None else "no model is loaded"
        self.status.emit(f"Loading {what or 'the model'} was cancelled; {still}.", 8000)
        self.load_cancelled.emit(what)
        if self._run_wanted and self._loaded is not None:
            self._run_wanted = False
            self.request_run()
        return True

    def set_weights(self, weights: str, reload: bool = True) -> None:
        """Use ``weights`` ("default", "none" or a file); ``reload``: load the model on screen again with them (not:
        the next load uses them, e.g. a Hub model being fetched)."""
        if weights != self._weights:
            self._weights = weights
            self.weights_changed.emit(weights)
            if reload:
                self.set_model(self._loaded.name if self._loaded else DEFAULT_MODEL, weights)

    def set_preprocess(self, preprocess: Preprocess) -> None:
        """Feed the loaded model with ``preprocess`` from now on (until another model loads), and run again.

        ``loaded`` is replaced, not changed in place, so a run already in flight keeps the input it started with.
        """
        if self._loaded is None or preprocess == self._loaded.preprocess:
            return
        self._loaded = replace(self._loaded, preprocess=preprocess)
        self.preprocess_changed.emit(preprocess)
        self._dirty = True
        self.request_run()

    def _apply_model(self, outcome: LoadOutcome) -> None:
        first = self._loaded is None
        previous = self.ticked_pairs()
        previous_edits = [edit for _, edit, _ in self._registry.edits()] if self._registry is not None else []
        if self._registry is not None:
            self._registry.clear()  # every hook on the old model goes first
        if not first:
            collect_fully_soon()  # the old model and its last run's panels wait in reference cycles
        self._loaded = outcome.loaded
        self._weights_in_use = self._weights
        self._loading_what = ""
        self._registry = HookRegistry(outcome.loaded.module)
        self._nodes = outcome.nodes
        self._target = Objective("top1")
        self._last = None
        self._load_failed = None
        paths = set(self._registry.paths)
        if self._initial_ticks is not None or first:
            wanted = (
                self._initial_ticks
                if self._initial_ticks is not None
                else default_ticks(outcome.loaded.name, self._nodes)
            )
            kinds, self._initial_ticks, self._initial_kinds = self._initial_kinds, None, {}
            self._missing_ticks = [p for p in wanted if p not in paths]
            pairs = [(p, k) for p in wanted if p in paths for k in kinds.get(p, self._check_kinds)]
            message = f"{outcome.loaded.name} loaded in {outcome.load_ms:.0f} ms"
        else:
            pairs = sorted(pair for pair in previous if pair[0] in paths)
            dropped = len(previous) - len(pairs)
            message = f"{outcome.loaded.name} loaded in {outcome.load_ms:.0f} ms; {len(pairs)} hooks carried over"
            if dropped:
                message += f", {dropped} dropped (no such module)"
            if previous and not pairs:
                pairs = [(p, k) for p in default_ticks(outcome.loaded.name, self._nodes) for k in self._check_kinds]
                message += "; ticked its default layers instead"
            message += self._carry_edits(previous_edits)
        self._model_message = message
        self.model_changed.emit(outcome)
        if self._missing_ticks:
            self.error.emit(f"The model has no module named {', '.join(map(repr, self._missing_ticks))}.", True)
        self.status.emit(message, 8000)
        self.set_ticked(pairs, True)
        self._run_wanted = False
        self.request_run()

    def _carry_edits(self, edits: list[Intervention]) -> str:
        """The interventions move to the new model where their module exists, on or off as they were (as ticks
        do); the status message's part about them."""
        carried, dropped = 0, []
        registry = self._registry
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
        self._loading_what = ""
        handler, self._load_failed = self._load_failed, None
        if isinstance(error, BaseException) and handler is not None and handler[1](error):
            pass  # the caller took care of it (asked for trust, or for the architecture, and retried)
        else:
            message = error_text(error) if isinstance(error, BaseException) else str(error)
            self.failed.emit(
                RunFailure(message, error if isinstance(error, BaseException) else RuntimeError(message), load=True)
            )
            self.error.emit(message, True)
        self.weights_changed.emit(self._weights)  # the boxes go back to what is in use
        if self._run_wanted and self._loaded is not None and not self.loading:
            self._run_wanted = False
            self.request_run()

    # ================================================================================================ hooks ====
    def ticked_pairs(self) -> set[tuple[str, str]]:
        if self._registry is None:
            return set()
        return {(h.path, h.kind) for h in self._registry.handles()}

    def is_ticked(self, path: str, kind: str) -> bool:
        return self._registry is not None and self._registry.has(path, hook_kind(kind))

    def set_ticked(self, pairs: Iterable[tuple[str, str]], ticked: bool) -> list[HookChange]:
        """Register (or remove) the hooks of many (path, kind) pairs at once; one announcement, one run."""
        if self._registry is None:
            return []
        known = set(self._registry.paths)
        changes: list[HookChange] = []
        for path, name in pairs:
            kind = hook_kind(name)
            if path not in known or self._registry.has(path, kind) == ticked:
                continue
            if ticked:
                self._registry.add(path, kind)  # on the live module right here
            else:
                self._registry.remove(path, kind)
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
        if self._registry is None:
            self.error.emit("No model is loaded yet.", True)
            return None
        try:
            edit_id = self._registry.add_edit(edit)
        except HookscopeError as error:
            self.error.emit(str(error), True)
            return None
        self.status.emit(f"Added: {edit.describe()}", 5000)
        self._hooks_changed([])
        return edit_id

    def set_edit_enabled(self, edit_id: int, enabled: bool, rerun: bool = True) -> bool:
        if self._registry is None:
            return False
        try:
            self._registry.set_edit_enabled(edit_id, enabled)
        except HookscopeError as error:
            self.error.emit(str(error), True)
            self._hooks_changed([], rerun=False)
            return False
        self._hooks_changed([], rerun=rerun)
        return True

    def remove_edit(self, edit_id: int) -> None:
        if self._registry is not None:
            self._registry.remove_edit(edit_id)
            self._hooks_changed([])

    def remove_all_edits(self, rerun: bool = True) -> None:
        if self._registry is not None and self._registry.edits():
            for edit_id, _, _ in self._registry.edits():
                self._registry.remove_edit(edit_id)
            self._hooks_changed([], rerun=rerun)

    def restore_edits(self, add: Callable[[HookRegistry], None]) -> None:
        """Edits added to the registry by ``add`` (a restored session); shown and run once."""
        if self._registry is not None:
            add(self._registry)
            self._hooks_changed([])

    def add_external_hook(self, info: HookInfo) -> None:
        """List a hook a feature registers on the live model itself, outside the registry (a feature
        visualization's), for as long as it lives: the hook inspector shows it. Nothing is registered here."""
        self._external_hooks.append(info)
        self.external_hooks_changed.emit(list(self._external_hooks))

    def remove_external_hook(self, info: HookInfo) -> None:
        if info in self._external_hooks:
            self._external_hooks.remove(info)
            self.external_hooks_changed.emit(list(self._external_hooks))

    def _hooks_changed(self, changes: list[HookChange], rerun: bool = True) -> None:
        self.hooks_changed.emit(changes)
        if rerun:
            self._dirty = True
            self.request_run()

    # ======================================================================================= device, target ====
    def set_device(self, device: str) -> None:
        """Move runs to ``device``: every hook is removed first, then the ticked ones are registered again."""
        if device == self._device or device not in available_devices():
            return
        self._device = device
        if self._registry is not None:
            pairs = self.ticked_pairs()
            edits = [edit for _, edit, _ in self._registry.edits()]  # the interventions move with the ticks
            self._registry.clear()
            for path, kind in sorted(pairs):
                self._registry.add(path, hook_kind(kind))
            for edit in edits:
                try:
                    self._registry.add_edit(edit)  # on or off as it was
                except HookscopeError as error:
                    self.error.emit(f"{edit.spec} was dropped: {error}", False)
        self.device_changed.emit(device)
        self._hooks_changed([])

    def set_target(self, target: Objective | int) -> None:
        """Take gradients of ``target`` and run again: an ``Objective`` (text is parsed where it comes in: the
        command line, a saved session), or a class index (a class row, the class box).

        A class the model does not have (the last run's class count says so) is an error message; the target and
        the results on screen stay as they were. An objective that does not fit the model (a box the run did not
        find, a text without a text tower) is refused by the run itself: its error is shown, the results stay, and
        the target goes back to the one before."""
        if isinstance(target, bool) or not isinstance(target, (Objective, int)):
            raise TypeError(f"{target!r} is no gradient target: an Objective or a class index")
        objective = target if isinstance(target, Objective) else Objective("class", index=target)
        # A class of a classifier's is checked against its class count now; a segmentation model's by the run.
        if objective.kind == "class" and self._last is not None and self._last.result.task == "classification":
            scores = self._last.result.scores
            try:
                check_target(objective, int(scores.shape[1]) if scores is not None else None)
            except HookscopeError as error:
                self.error.emit(str(error), True)
                return
        if objective == self._target:
            self.request_run()
            return
        if self._target_before is None:
            self._target_before = (self._target,)  # the last target a run succeeded with
        self._target = objective
        self._dirty = True
        self.target_changed.emit(objective)
        self.request_run()

    # =============================================================================================== images ====
    def request_image(self, source: ImageSource, debounce: bool = True) -> None:
        """Show ``source``: run it (without the debounce pause when ``debounce`` is False: a video's frames)."""
        self._wanted_image = source
        self.image_requested.emit(source)
        if not self._closing:
            self._scheduler.request_run(debounce)

    def open_paths(self, paths: list[str]) -> None:
        """Show the first file; the rest wait in the image list."""
        if not paths:
            self.error.emit("Nothing to open: drop or choose image files.", True)
            return
        first = self._queue.replace(paths)
        self.image_list_changed.emit()
        if first is not None:
            self.request_image(ImageSource.from_path(first))

    def select_image(self, row: int) -> None:
        if row != self._queue.index:
            path = self._queue.select(row)
            if path is not None:
                self.image_list_changed.emit()
                self.request_image(ImageSource.from_path(path))

    def step_image(self, delta: int) -> None:
        path = self._queue.step(delta)
        if path is None:
            self.status.emit("No image list to step through: drop or open several files.", 4000)
            return
        self.image_list_changed.emit()
        self.request_image(ImageSource.from_path(path))

    def set_image_b(self, source: ImageSource | None) -> None:
        """Compare every run with image B (None: stop comparing)."""
        if source == self._image_b:
            return
        self._image_b = source
        self.image_b_changed.emit(source)
        self.request_run()

    # ====================================================================================== panel settings ====
    def settings_for(self, path: str, kind: str) -> PanelSettings:
        return self._settings.get((path, kind), self._default_settings)

    def set_panel_settings(self, path: str, kind: str, settings: PanelSettings) -> None:
        """One panel's colormap, scaling, order or view (set by the panel itself: nothing to apply back)."""
        self._settings[(path, kind)] = settings

    def set_all(self, field: str, value: str) -> None:
        """One setting for every panel (View menu), and the default for panels made later."""
        self._default_settings = replace(self._default_settings, **{field: value})
        pairs = {pair for pair in self._settings} | self.ticked_pairs()
        self._settings = {pair: replace(self.settings_for(*pair), **{field: value}) for pair in pairs}
        self.panel_settings_changed.emit([(p, k, s) for (p, k), s in self._settings.items()])

    def apply_panel_settings(self, default: PanelSettings, pairs: dict[tuple[str, str], PanelSettings]) -> None:
        """Every panel's colormap, scaling, order and view at once (a restored session)."""
        self._default_settings = default
        self._settings = dict(pairs)
        self.panel_settings_changed.emit([(p, k, self.settings_for(p, k)) for p, k in self.ticked_pairs()])

    # ================================================================================================= runs ====
    def start(self, model: str, image: str | None) -> None:
        """The first model and image: ``image`` (or the bundled sample) with the model's default ticks."""
        first = image if image is not None else str(sample_image())
        self._queue.replace([first] if image is not None else [])
        self._wanted_image = ImageSource.from_path(first)
        if self._requested_device != self._device:
            self.error.emit(f"Device '{self._requested_device}' is not available here; using the CPU.", False)
        self.set_model(model, self._weights)

    def start_held(self, start: HeldStart) -> None:
        """The first model is one the caller holds in Python (``hookscope.Viewer``): it is adopted as any model
        load is (on the model's thread, where it is put in eval mode and its tree is built), with no file and no
        question, and shown with the start's image, ticks and image list."""
        self._queue.replace(list(start.queue))
        self.image_list_changed.emit()
        self._wanted_image = start.image if start.image is not None else ImageSource.from_path(sample_image())
        if start.ticks is not None:
            pairs = list(start.ticks)
            self._initial_ticks = list(dict.fromkeys(path for path, _ in pairs))
            self._initial_kinds = {path: tuple(kind for p, kind in pairs if p == path) for path in self._initial_ticks}
        if self._requested_device != self._device:
            self.error.emit(f"Device '{self._requested_device}' is not available here; using the CPU.", False)
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
            self._scheduler.request_run()

    def set_channel_orders(self, orders: dict[str, np.ndarray]) -> None:
        """A dataset scan's channel order per module path ({} when there is none); the results are redrawn."""
        self._channel_orders = dict(orders)
        self.channel_orders_changed.emit()
        self.run_again()

    def _freeze_run(self, generation: int) -> RunRequest | None:
        if self._closing or self._wanted_image is None:
            return None
        if self.loading or self._loaded is None or self._registry is None:
            self._run_wanted = True
            return None
        return RunRequest.freeze(
            generation,
            self._loaded,
            self._registry,
            self._wanted_image,
            self._device,
            self._target,
            self._settings,
            self._default_settings,
            image_b=self._image_b,
            fit=self._view_size(),
            channel_orders=self._channel_orders,
            hidden=self._hidden_panels(),
        )

    @property
    def preparing(self) -> bool:
        """Pictures of panels scrolled into view are being made."""
        return self._picture_runner.busy

    def prepare_pictures(self, idents: Iterable[tuple[str, str]]) -> bool:
        """Make the pictures of the run on screen's records ``idents`` (kind, key) that were left out of it while
        their panels were out of view; ``pictures_ready`` brings them. Asked while pictures are being made, they
        are made next, together with any others asked meanwhile (a fast scroll asks many times). Returns whether
        there was anything to make."""
        outcome = self._last
        if self._closing or outcome is None:
            return False
        known = {(r.kind, r.key) for r in outcome.deferred}
        wanted = known & set(idents)
        self._pictures_wanted |= wanted
        self._next_pictures()
        return bool(wanted)

    def _next_pictures(self, *_: object) -> None:
        outcome = self._last
        if self._closing or outcome is None or self._picture_runner.busy or not self._pictures_wanted:
            return
        wanted, self._pictures_wanted = self._pictures_wanted, set()
        records = tuple(r for r in outcome.deferred if (r.kind, r.key) in wanted)
        request = PictureRequest(
            outcome,
            records,
            MappingProxyType(dict(self._settings)),
            self._default_settings,
            self._view_size(),
            MappingProxyType(dict(self._channel_orders)),
        )
        self._picture_runner.submit(
            Job(
                outcome.generation,
                lambda: execute_pictures(request),
                lambda: self._last is not outcome,
                label="pictures",
            )
        )

    def _on_pictures(self, job: Job, pictures: PictureOutcome) -> None:
        if not self._closing and pictures.outcome is self._last:
            self.pictures_ready.emit(pictures)

    def _on_pictures_failed(self, job: Job, error: object) -> None:
        if not self._closing:
            error = error if isinstance(error, BaseException) else RuntimeError(str(error))
            self.error.emit(error_text(error), False)

    def _apply_run(self, outcome: RunOutcome) -> None:
        if self._closing:
            return
        self._last = outcome
        self._pictures_wanted.clear()  # of the run before: this one says anew what it left undrawn
        self._image = outcome.image
        if self._wanted_image == outcome.image:
            self._wanted_image = outcome.image  # keep the pixels: re-runs need not read the file again
        if self._image_b is not None and outcome.image_b == self._image_b:
            self._image_b = outcome.image_b
        self._dirty = False
        self._target_before = None  # the target worked
        self._applied_generations.append(outcome.generation)
        self.run_applied.emit(outcome)

    def _on_run_failed(self, error: object) -> None:
        if self._closing:
            return
        error = error if isinstance(error, BaseException) else RuntimeError(str(error))
        message = error_text(error)
        failed = self._wanted_image
        self.error.emit(message, True)
        self.failed.emit(RunFailure(message, error))  # e.g. the Interventions switch off an edit that failed
        if self._target_before is not None and is_target_error(error):
            # A target that does not fit the model (box:7 when 3 boxes were found): back to the one before, which
            # the results on screen were made with; nothing runs again.
            (self._target,), self._target_before = self._target_before, None
            self._dirty = False
            self.target_changed.emit(self._target)
            return
        if isinstance(error, DeviceError) and self._device != "cpu":
            self.set_device("cpu")  # back to the device that always works; the run follows
            return
        if isinstance(error, ImageError) and self._image is not None and failed != self._image:
            self._wanted_image = self._image  # the results on screen stay; later runs use their image
            if self._dirty:
                self.request_run()
        elif (
            isinstance(error, ImageError)
            and self._image is None
            and failed is not None
            and failed.path != str(sample_image())
        ):
            self.request_image(ImageSource.from_path(sample_image()))  # nothing on screen yet: the sample

    def missing_reason(self, path: str, kind: str) -> str:
        """Why a ticked pair has no record in the last run, in the user's words."""
        survey = self._last.result.survey if self._last is not None else None
        if survey is not None and not survey.run_of(path).ran:
            return f"No record: this module {NOT_RUN_REASON}."
        if kind in GRADIENT_KINDS and self._last is not None and self._last.result.no_target:
            return f"No gradient taken in this run: {self._last.result.no_target}"  # the whole run's one reason
        if kind in GRADIENT_KINDS:
            where = "input" if kind == "grad_input" else "output"
            missing = self._last.result.no_gradient if self._last is not None else []
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
        self._tasks.shutdown()
        self._picture_runner.shutdown(0)
        self._scheduler.shutdown()
        if self._registry is not None:
            self._registry.clear()


def hook_kind(kind: str) -> HookKind:
    """A kind as the views name it ("forward", "tensor"…), as the registry types it: one of its ``KINDS`` (the
    registry itself refuses any other)."""
    return cast(HookKind, kind)


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
