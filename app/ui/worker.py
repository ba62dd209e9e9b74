"""Running jobs off the GUI thread, one at a time, newest first.

A job runs in a superqt ``FunctionWorker`` (a ``QRunnable`` with started/returned/errored/finished signals) on
the global thread pool. Only one job runs at a time: every run uses the same model and the same hook registry,
and two runs recording through one registry would mix their records. A job submitted while another runs waits
in a single slot; a newer submission replaces it, so a burst of ticks ends in one run, not ten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, QThreadPool, Signal
from superqt.utils import FunctionWorker, create_worker


@dataclass(frozen=True)
class Job:
    """One unit of background work, and how to tell that nobody wants its result any more."""

    generation: int
    work: Callable[[], object]
    stale: Callable[[], bool]
    label: str = "run"


class JobRunner(QObject):
    """Starts jobs on the global ``QThreadPool``; results and errors come back on the GUI thread by signal."""

    returned = Signal(object, object)  # job, outcome
    failed = Signal(object, object)  # job, exception
    busy_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._running: tuple[Job, FunctionWorker] | None = None
        self._waiting: Job | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        return self._running is not None or self._waiting is not None

    @property
    def running_job(self) -> Job | None:
        return self._running[0] if self._running else None

    def submit(self, job: Job) -> None:
        """Run ``job`` now if idle, else after the running one (replacing any job still waiting)."""
        if self._closed:
            return
        was_busy = self.busy
        if self._running is None:
            self._start(job)
        else:
            self._waiting = job
        if not was_busy:
            self.busy_changed.emit(True)

    def shutdown(self, msecs: int = -1) -> bool:
        """Drop the waiting job and wait for the running one (its ``stale()`` lets it stop early)."""
        self._closed = True
        self._waiting = None
        if self._running is not None:
            self._running[1].quit()
        done = QThreadPool.globalInstance().waitForDone(msecs)
        self._running = None
        return done

    # ---- internals ----------------------------------------------------------------------------------------
    def _start(self, job: Job) -> None:
        worker = create_worker(job.work, _start_thread=False, _ignore_errors=True)
        worker.returned.connect(self._on_returned)
        worker.errored.connect(self._on_errored)
        worker.finished.connect(self._on_finished)
        self._running = (job, worker)
        # Straight onto the pool (not worker.start(), which may defer the start by a timer): a window that
        # closes right after submitting must find the thread in the pool to wait for it.
        QThreadPool.globalInstance().start(worker)

    def _on_returned(self, outcome: object) -> None:
        if self._running is not None and not self._closed:
            self.returned.emit(self._running[0], outcome)

    def _on_errored(self, error: object) -> None:
        if self._running is not None and not self._closed:
            self.failed.emit(self._running[0], error)

    def _on_finished(self) -> None:
        if self._closed:
            return
        self._running = None
        while self._waiting is not None:
            job, self._waiting = self._waiting, None
            if not job.stale():
                self._start(job)
                return
        self.busy_changed.emit(False)
