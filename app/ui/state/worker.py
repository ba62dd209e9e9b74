"""Running jobs off the GUI thread, one at a time, newest first.

A job runs in a superqt ``FunctionWorker`` (a ``QRunnable`` with started/returned/errored/finished signals) on
the global thread pool. Only one job runs at a time: every run uses the same model and the same hook registry,
and two runs recording through one registry would mix their records. A job submitted while another runs waits
in a single slot; a newer submission replaces it, so a burst of ticks ends in one run, not ten.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

from pyqtgraph.util.garbage_collector import GarbageCollector
from PySide6.QtCore import QObject, QThreadPool, Signal
from superqt.utils import FunctionWorker, create_worker

_collector: GarbageCollector | None = None


def collect_garbage_on_gui_thread() -> None:
    """Python's cyclic garbage collector runs in whichever thread happens to allocate. A collection in a worker
    (building a model allocates a lot) can destroy a closed window's widgets there, while the GUI thread paints:
    seen here as a segfault in the event loop with the worker inside a model's constructor. pyqtgraph's recipe:
    automatic collection off, the same thresholds checked on a GUI-thread timer. Installed once per process.

    Everything alive at that point (torch, Qt and the rest of the imports: some 400,000 objects) is frozen out of
    later collections first: a full collection over them takes 0.4 s here, a stall the GUI thread cannot afford;
    without them it takes about a millisecond."""
    global _collector
    if _collector is None:
        gc.freeze()
        _collector = GarbageCollector(interval=0.5)


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
        collect_garbage_on_gui_thread()
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
