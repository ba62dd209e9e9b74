"""Running jobs off the GUI thread, one at a time, newest first.

A job runs in a superqt ``FunctionWorker`` (a ``QRunnable`` with started/returned/errored/finished signals) on a
thread pool: the model's loads and runs, and the side tasks that use the live model, on ``model_pool`` (one thread,
kept: see there); the rest (pictures, downloads, a scan's own copy of the model) on the global pool. Only one job
runs at a time: every run uses the same model and the same hook registry, and two runs recording through one
registry would mix their records. A job submitted while another runs waits in a single slot; a newer submission
replaces it, so a burst of ticks ends in one run, not ten.

A Python thread stuck in someone else's code (a trusted ``model.py`` whose ``build()`` never returns) cannot be
killed. A job that touches nothing shared (a model load builds a new model and returns it) can be *abandoned*
instead: the runner forgets it, drops whatever it returns, and starts the next job at once, while the thread
finishes in the background. Closing waits a bounded time (``CLOSE_WAIT_MS``); whatever is still running then is
left to the process's end (``hookscope.ui.app`` ends a process whose workers are stuck without waiting for them).
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyqtgraph.util.garbage_collector import GarbageCollector
from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal, Slot
from shiboken6 import Shiboken
from superqt.utils import FunctionWorker, GeneratorWorker

from hookscope.system.allocator import trim

CLOSE_WAIT_MS = 1200  # how long a closing window waits for its workers: the window is gone within 2 s regardless


class _GuiCollector(GarbageCollector):
    """pyqtgraph's collector (generation by generation, by the thresholds Python itself uses) plus full
    collections: at the next check after a model switch (``collect_fully_soon``), and once the pool is idle after
    work ended, at most every ``FULL_EVERY_S``. Removed panels (a pyqtgraph plot is a web of reference cycles), a
    cancelled scan's or visualization's state and an old model sit in cycles that the thresholds reach only with a
    full collection many runs later: in an offscreen loop of 100 iterations the window's memory grew by 150-240 MB
    waiting for it, and stays flat with these (issue 21, item 8; ``tests/ui/test_memory.py``). After each, glibc's
    malloc gives its freed pages back (``allocator.trim``): a pool thread's arena keeps them otherwise. A full
    collection takes a few tens of milliseconds on the GUI thread, so never while work runs (a live video's frames
    are never idle: its memory is held flat by the frames' own reuse)."""

    FULL_EVERY_S = 10.0

    def __init__(self, interval: float) -> None:
        super().__init__(interval=interval)
        self.full_wanted = False
        self.work_ended = False
        self.last_full = time.monotonic()
        self.full_collections = 0

    def check(self) -> None:
        now = time.monotonic()
        idle = active_threads() == 0
        due = self.work_ended and idle and now - self.last_full >= self.FULL_EVERY_S
        if not (self.full_wanted or due):
            super().check()
            return
        self.full_wanted = self.work_ended = False
        gc.collect()
        trim()
        self.last_full = time.monotonic()
        self.full_collections += 1


_collector: _GuiCollector | None = None


def collect_fully_soon() -> None:
    """Ask for a full collection (and a trim of malloc's free pages) on the GUI thread's next collector check: a
    model was let go of."""
    if _collector is not None:
        _collector.full_wanted = True


def note_work_ended() -> None:
    """Background work ended: a full collection is due once the pool is idle (see ``_GuiCollector``)."""
    if _collector is not None:
        _collector.work_ended = True


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
        _collector = _GuiCollector(interval=0.5)


class _PoolRun:
    """The ``run`` and ``empty`` of the workers started here (``PoolWorker``, ``PoolGeneratorWorker``): superqt's
    own ``run`` without its warnings redirection.

    superqt's ``run`` wraps the work in ``warnings.catch_warnings()`` and sets the process-wide
    ``warnings.showwarning`` to a lambda that holds the worker. That state is global, not per thread: two workers
    that overlap (a run and a scan, the pictures of a scroll, an abandoned load) restore each other's values out of
    order, and a finished worker's lambda stays installed for good, keeping the worker, its work and everything that
    work holds (a copy of a model) alive. Warnings of a worker here go to stderr like any other."""

    ended = False  # run() has returned or is about to: set last, by the pool thread
    ended_seen = False  # the keeper's sweep has seen ``ended`` once

    def run(self: Any) -> None:  # on a pool thread
        _emit(self.started)
        self._running = True
        try:
            result = self.work()
            if isinstance(result, Exception):  # a generator's RuntimeError, handed back by GeneratorWorker.work
                raise result
            if not self.abort_requested:
                _emit(self.returned, result)
        except Exception as exc:  # noqa: BLE001  (it goes to the errored signal, as superqt's run does)
            _emit(self.errored, exc)
        self._running = False
        _emit(self.finished)
        self.ended = True

    def empty(self: Any) -> None:
        """On the GUI thread, once the pool is done with this worker: drop the work and what it was given, and
        delete the signals object (after the signals already on their way: ``deleteLater``)."""
        # by name: a FunctionWorker holds its function and arguments, a GeneratorWorker its generator
        vars(self).update(_func=_done, _args=(), _kwargs={}, _gen=None)
        self.signals.deleteLater()


class PoolWorker(_PoolRun, FunctionWorker):
    """superqt's ``FunctionWorker`` with ``_PoolRun``'s ``run``, started by ``start_worker`` only."""


class PoolGeneratorWorker(_PoolRun, GeneratorWorker):
    """superqt's ``GeneratorWorker`` (each ``yield`` of the work comes out of ``yielded``; ``quit()`` stops it at the
    next one) with ``_PoolRun``'s ``run``, started by ``start_worker`` only."""


def _emit(signal: Any, *args: object) -> None:
    """Emit a worker's signal from its pool thread; nothing when the window has closed meanwhile. A closed window
    deletes the signals object while work it could not wait for (a Hub download) still runs: the emit would raise
    "Signal source has been deleted", and Qt would print it at exit. Nobody is listening then."""
    try:
        signal.emit(*args)
    except RuntimeError:
        pass


def _done() -> None:
    """What an emptied worker would run (never: it has run already)."""


AnyPoolWorker = PoolWorker | PoolGeneratorWorker


class _WorkerKeeper(QObject):
    """Holds every started worker until its pool thread is done with it, then frees it on the GUI thread.

    A worker is a Python object over two Qt objects: the ``QRunnable`` and its signals ``QObject`` (a GUI-thread
    object, connected to GUI-thread receivers). Left to themselves, both died on the pool thread: the pool deleted
    the runnable there (auto-deletion), with PySide's binding bookkeeping for it, and a worker the GUI thread had
    already let go of was freed there with its signals object. Qt and PySide objects must die in their own thread:
    a pool thread tearing down the signals' connections while the GUI thread deleted the receiving relay
    (``deleteLater``) crashed the process (a segfault in ``QObject::~QObject`` on both threads at once;
    tests/ui/test_worker_lifetime.py).

    So the pool does not delete a worker here (``setAutoDelete(False)``), and the keeper, on the GUI thread, waits
    until ``run`` has ended and the pool thread holds no reference any more (the count is down to the keeper's own
    and the one PySide gave the pool, which ``Shiboken.delete`` takes back; for a worker still held elsewhere on
    the GUI thread, one sweep later), then deletes the runnable, empties the worker and lets go of it."""

    SWEEP_MS = 100
    # sys.getrefcount of a worker nobody else holds, in sweep(): the keeper's set, the loop's name, getrefcount's
    # argument, and the reference PySide keeps for the pool (QThreadPool.start transfers ownership).
    UNHELD = 4

    def __init__(self) -> None:
        super().__init__()
        self.workers: set[AnyPoolWorker] = set()
        self.timer = QTimer(self)
        self.timer.setInterval(self.SWEEP_MS)
        self.timer.timeout.connect(self.sweep)

    def keep(self, worker: AnyPoolWorker) -> None:
        self.workers.add(worker)
        if not self.timer.isActive():
            self.timer.start()

    def sweep(self) -> None:
        done = []
        for worker in self.workers:
            if not worker.ended:
                continue
            # Unheld: free it now. Still held on this thread (a relay not yet deleted, or a cycle: a feature's
            # object holding the worker whose work holds that object) a sweep after ``ended`` was first seen: by
            # then its pool thread has long dropped its frame, and emptying the worker breaks such a cycle (a
            # scan's work holds a copy of the model: kept, that was tens of MB a scan).
            if sys.getrefcount(worker) <= self.UNHELD or worker.ended_seen:
                done.append(worker)
            worker.ended_seen = True
        if done:
            note_work_ended()
        for worker in done:
            self.workers.discard(worker)
            worker.empty()
            Shiboken.delete(worker)  # the runnable, here; PySide gives back the pool's reference
        del done  # the last references go here, on the GUI thread
        if not self.workers:
            self.timer.stop()


_keeper: _WorkerKeeper | None = None
_model_pool: QThreadPool | None = None


def model_pool() -> QThreadPool:
    """The pool the live model runs on: its loads and runs, and the side tasks that use it (``exclusive``). One
    thread, kept for the life of the process, so that every run of the model is on the same thread.

    PyTorch's CPU operations run on an OpenMP thread team, and GNU OpenMP gives each thread that starts parallel
    work a team of its own. Runs that land on whichever thread of the global pool is free (it keeps several, and
    lets idle ones go after 30 s) left two or three teams in the process; with more team threads than cores, every
    team's threads sleep between operations instead of waiting ready for the next one (libgomp's throttled spin),
    and the idle team's threads took cores from the working one. One thread, one team: a video's frames in the window
    went from 0.72-0.77 to 0.80-0.82 of the model's own rate (``python -m hookscope.ui.bench_live``, ResNet-18, two cores,
    three pairs side by side)."""
    global _model_pool
    if _model_pool is None:
        _model_pool = QThreadPool()
        _model_pool.setObjectName("model")
        _model_pool.setMaxThreadCount(1)
        _model_pool.setExpiryTimeout(-1)  # never let go: a new thread would start a new team
    return _model_pool


def pools() -> tuple[QThreadPool, ...]:
    """Every pool a worker may run on: the global one and the model's."""
    return (QThreadPool.globalInstance(), model_pool())


def active_threads() -> int:
    """Worker threads running a job, in every pool."""
    return sum(pool.activeThreadCount() for pool in pools())


def wait_for_workers(msecs: int) -> bool:
    """Wait up to ``msecs`` in all for the workers of every pool to finish; whether they all did."""
    deadline = time.monotonic() + max(0, msecs) / 1000
    done = True
    for pool in pools():
        done = pool.waitForDone(max(0, int((deadline - time.monotonic()) * 1000))) and done
    return done


def start_worker(worker: AnyPoolWorker, pool: QThreadPool | None = None) -> None:
    """Start ``worker`` on ``pool`` (default: the global thread pool), from the GUI thread; it is freed on the GUI
    thread once its pool thread is done with it (see ``_WorkerKeeper``). Connect its signals before calling this."""
    global _keeper
    if _keeper is None:
        _keeper = _WorkerKeeper()
    worker.setAutoDelete(False)  # deleted by the keeper, on the GUI thread
    _keeper.keep(worker)
    # Straight onto the pool (not worker.start(), which may defer the start by a timer): a window that closes
    # right after submitting must find the thread in the pool to wait for it.
    (pool or QThreadPool.globalInstance()).start(worker)


def workers_kept() -> int:
    """Started workers not yet freed (running, or finished and waiting for the GUI thread's sweep)."""
    return len(_keeper.workers) if _keeper is not None else 0


@dataclass(frozen=True)
class Job:
    """One unit of background work, and how to tell that nobody wants its result any more."""

    generation: int
    work: Callable[[], object]
    stale: Callable[[], bool]
    label: str = "run"
    # Safe to leave running in the background once stale (it shares no state with later jobs: a model load).
    abandonable: bool = False


class _Relay(QObject):
    """One worker's signals, delivered on the GUI thread together with the job they belong to, so that a late
    signal of an abandoned worker is never taken for the current job's."""

    def __init__(self, runner: JobRunner, job: Job, worker: FunctionWorker) -> None:
        super().__init__(runner)
        self.runner, self.job, self.worker = runner, job, worker
        worker.returned.connect(self.on_returned)
        worker.errored.connect(self.on_errored)
        worker.finished.connect(self.on_finished)

    @Slot(object)
    def on_returned(self, outcome: object) -> None:
        self.runner._on_returned(self, outcome)

    @Slot(object)
    def on_errored(self, error: object) -> None:
        self.runner._on_errored(self, error)

    @Slot()
    def on_finished(self, *_: object) -> None:  # superqt's finished carries nothing (its stubs vary by Qt)
        self.runner._on_finished(self)


class JobRunner(QObject):
    """Starts jobs on ``pool`` (default: the global ``QThreadPool``); results and errors come back on the GUI
    thread by signal."""

    returned = Signal(object, object)  # job, outcome
    failed = Signal(object, object)  # job, exception
    busy_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None, pool: QThreadPool | None = None) -> None:
        super().__init__(parent)
        collect_garbage_on_gui_thread()
        self.pool = pool or QThreadPool.globalInstance()
        self._running: _Relay | None = None
        self._waiting: Job | None = None
        self._abandoned: set[_Relay] = set()  # forgotten, still running: kept alive until they finish
        self._grown = 0  # threads added to the pool so that an abandoned job never blocks the next one
        self._held = False  # a side task uses the model (``hold``): submitted jobs wait
        self._closed = False

    @property
    def busy(self) -> bool:
        return self._running is not None or self._waiting is not None

    @property
    def running_job(self) -> Job | None:
        return self._running.job if self._running else None

    @property
    def abandoned(self) -> int:
        """Jobs given up on whose threads have not finished yet."""
        return len(self._abandoned)

    def submit(self, job: Job) -> None:
        """Run ``job`` now if idle, else after the running one (replacing any job still waiting). A running job
        that is stale and abandonable (a superseded model load, maybe stuck) is abandoned for it."""
        if self._closed:
            return
        was_busy = self.busy
        running = self._running
        if running is not None and running.job.abandonable and running.job.stale():
            self._abandon(running)
        if self._running is None and not self._held:
            self._start(job)
        else:
            self._waiting = job
        if not was_busy:
            self.busy_changed.emit(True)

    def hold(self, held: bool) -> None:
        """While held, nothing starts: a job submitted waits in the slot (a newer one replaces it, as always).
        The workspace holds the runner while an exclusive task (``Workspace.submit``) uses the live model, which
        a run must not use at the same time; released, the job waiting starts."""
        self._held = held
        if not held and self._running is None and self._waiting is not None and not self._closed:
            self._start_next()

    def cancel(self, which: Callable[[Job], bool]) -> bool:
        """Give up on the jobs ``which`` picks: a waiting one is dropped; a running one is abandoned if it is
        abandonable (its thread finishes in the background, its result is dropped), else asked to quit. The
        next waiting job starts at once. Returns whether anything was cancelled."""
        cancelled = False
        if self._waiting is not None and which(self._waiting):
            self._waiting, cancelled = None, True
        running = self._running
        if running is not None and which(running.job):
            cancelled = True
            if running.job.abandonable:
                self._abandon(running)
                self._start_next()
            else:
                running.worker.quit()
        elif cancelled and not self.busy:
            self.busy_changed.emit(False)
        return cancelled

    def shutdown(self, msecs: int = CLOSE_WAIT_MS) -> bool:
        """Drop the waiting job and wait up to ``msecs`` for the running ones (``stale()`` lets a run stop early).
        Returns whether every worker finished; one stuck in user code is left running (see the module's note)."""
        self._closed = True
        self._waiting = None
        if self._running is not None:
            self._running.worker.quit()
        done = wait_for_workers(msecs)
        self._running = None
        return done

    # ---- internals ----------------------------------------------------------------------------------------
    def _start(self, job: Job) -> None:
        worker = PoolWorker(job.work)
        self._running = _Relay(self, job, worker)
        start_worker(worker, self.pool)

    def _abandon(self, relay: _Relay) -> None:
        relay.worker.quit()  # superqt then drops its return value
        self._abandoned.add(relay)
        if self._running is relay:
            self._running = None
        pool = self.pool
        if pool.activeThreadCount() >= pool.maxThreadCount():
            pool.setMaxThreadCount(pool.maxThreadCount() + 1)  # the stuck thread keeps its slot; the next job its own
            self._grown += 1

    def _start_next(self) -> None:
        while self._waiting is not None and not self._held:
            job, self._waiting = self._waiting, None
            if not job.stale():
                self._start(job)
                return
        if not self.busy:
            self.busy_changed.emit(False)

    def _on_returned(self, relay: _Relay, outcome: object) -> None:
        if relay is self._running and not self._closed:
            self.returned.emit(relay.job, outcome)

    def _on_errored(self, relay: _Relay, error: object) -> None:
        if relay is self._running and not self._closed:
            self.failed.emit(relay.job, error)

    def _on_finished(self, relay: _Relay) -> None:
        if relay in self._abandoned:
            self._abandoned.discard(relay)
            if self._grown:
                self.pool.setMaxThreadCount(max(1, self.pool.maxThreadCount() - 1))
                self._grown -= 1
            relay.deleteLater()
            return
        if self._closed or relay is not self._running:
            return
        self._running = None
        relay.deleteLater()
        self._start_next()
