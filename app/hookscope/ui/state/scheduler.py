"""The path of model loads and runs from the GUI thread to a worker and back: generations, debounce, apply-or-drop.
(The features' side work goes through ``Workspace.submit``, ``hookscope.ui.state.tasks``; an exclusive task holds this
scheduler's runner while it uses the model: ``hold``.)

Every change that makes the results on screen out of date bumps a generation number. A run carries the number it
was started with; its outcome is handed back only if no newer change happened meanwhile, so a superseded run
never mixes into the panels. Model loads have a generation of their own (a load is superseded only by another
load). Runs are debounced: ten ticks in a burst end in one run.

A load can be cancelled (``cancel_load``): its generation is dropped, so whatever it returns is ignored, and its
thread is abandoned to finish in the background (it builds a new model and touches nothing the window uses), so
the next load or run starts at once even when the cancelled ``build()`` never returns.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from PySide6.QtCore import QObject, QTimer, Signal

from hookscope.core.engine.capture import RunCancelled
from hookscope.ui.state.requests import LoadOutcome, RunOutcome, RunRequest, execute_run
from hookscope.ui.state.worker import Job, JobRunner, model_pool

RUN_DEBOUNCE_MS = 50


class _Latest:
    """The newest generation, readable from the worker thread without touching a Qt object."""

    def __init__(self) -> None:
        self.value = 0


class RunScheduler(QObject):
    """Submits loads and runs to one ``JobRunner`` and hands back only the outcomes still wanted.

    ``run_due`` asks the owner for a frozen ``RunRequest`` (None: nothing to run yet) when the debounce ends.
    """

    loaded = Signal(object)  # LoadOutcome of the newest load
    load_failed = Signal(object)  # the exception of the newest load
    ran = Signal(object)  # RunOutcome of the newest generation
    run_failed = Signal(object)  # the exception of a run of the newest generation
    busy_changed = Signal(bool)

    def __init__(self, make_request: Callable[[int], RunRequest | None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._make_request = make_request
        self._latest = _Latest()
        self._load_generation = 0
        self._closed = False
        self.runner = JobRunner(self, model_pool())  # the model's one thread (see model_pool)
        self.runner.returned.connect(self._on_returned)
        self.runner.failed.connect(self._on_failed)
        self.runner.busy_changed.connect(lambda *_: self.busy_changed.emit(self.busy))
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(RUN_DEBOUNCE_MS)
        self._timer.timeout.connect(self._submit_run)

    # ---- state ------------------------------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._latest.value

    @property
    def loading(self) -> bool:
        return self._load_generation != 0

    @property
    def busy(self) -> bool:
        return not self._closed and (self.runner.busy or self._timer.isActive() or self.loading)

    # ---- requests ---------------------------------------------------------------------------------------------
    def load(self, work: Callable[[int], LoadOutcome]) -> int:
        """Build a model in the background (``work(generation)``); supersedes any load and run in flight."""
        self._latest.value += 1
        self._load_generation = generation = self._latest.value
        self.runner.submit(
            Job(
                generation,
                partial(work, generation),
                stale=lambda: self._load_generation != generation,
                label="load",
                abandonable=True,
            )
        )
        self.busy_changed.emit(True)
        return generation

    def cancel_load(self) -> bool:
        """Give up on the load in flight: its result will be dropped and the previous model stays. Returns
        whether a load was in flight."""
        generation = self._load_generation
        if not generation or self._closed:
            return False
        self._load_generation = 0
        self.runner.cancel(lambda job: job.label == "load" and job.generation == generation)
        self.busy_changed.emit(self.busy)
        return True

    def request_run(self, debounce: bool = True) -> None:
        """Supersede whatever run is in flight; start the new one after a short pause (``debounce``), or now (a
        video's next frame: no burst of changes to gather, and neither the pause nor the paints queued before the
        next turn of the event loop to wait for)."""
        if self._closed:
            return
        self._latest.value += 1
        if debounce:
            self._timer.start()
            self.busy_changed.emit(True)
        else:
            self._timer.stop()
            self.busy_changed.emit(True)
            self._submit_run()

    def hold(self, held: bool) -> None:
        """Start no load or run while held (an exclusive side task uses the model: ``hookscope.ui.state.tasks``); what is
        asked meanwhile waits, and starts when released."""
        self.runner.hold(held)

    def shutdown(self) -> None:
        """Cancel and wait for the worker; later requests are ignored."""
        if self._closed:
            return
        self._closed = True
        self._latest.value += 1
        self._timer.stop()
        self.runner.shutdown()  # bounded: a worker stuck in user code is left to the process's end
        self.busy_changed.emit(False)

    # ---- internals --------------------------------------------------------------------------------------------
    def _submit_run(self) -> None:
        if self._closed or self.loading:
            return  # a finished load asks for its own run
        generation = self._latest.value
        request = self._make_request(generation)
        if request is None:
            self.busy_changed.emit(self.busy)
            return
        latest = self._latest
        stale = lambda: latest.value != generation  # noqa: E731  (read in the worker: a plain attribute)
        self.runner.submit(Job(generation, partial(execute_run, request, stale), stale=stale))

    def _on_returned(self, job: Job, outcome: object) -> None:
        if self._closed:
            return
        if job.label == "load":
            if job.generation == self._load_generation:
                self._load_generation = 0
                self.loaded.emit(outcome)
        elif isinstance(outcome, RunOutcome) and outcome.generation == self._latest.value:
            self.ran.emit(outcome)
        self.busy_changed.emit(self.busy)

    def _on_failed(self, job: Job, error: object) -> None:
        if self._closed or isinstance(error, RunCancelled):
            self.busy_changed.emit(self.busy)
            return
        if job.label == "load":
            if job.generation == self._load_generation:
                self._load_generation = 0
                self.load_failed.emit(error)
        elif job.generation == self._latest.value:
            self.run_failed.emit(error)
        self.busy_changed.emit(self.busy)
