"""Side work in the background: ``Workspace.submit(label, work, exclusive=...)`` and the ``Task`` it returns.

Every feature's background job goes this one way (a scan and its model copy, a channel's top images, a feature
visualization, a lesson's run, a weights download, a whole-run export); the model runs and loads keep their own
path (``RunScheduler``: generations, debounce, newest request wins). A task runs in a superqt worker on the global
thread pool, or, exclusive, on the model's own thread (``worker.model_pool``) (``PoolWorker`` for a function, ``PoolGeneratorWorker`` for a generator function: each ``yield`` is a
progress value) and says what happened by its own signals, on the GUI thread: ``started``, ``progressed``,
``finished`` (the work's return value), ``failed`` (its exception), and ``ended`` once, last, whatever happened.

An *exclusive* task uses the live model or its hook registry (a visualization's hook, a lesson's edits, copying the
model), which a run must never use at the same time: it starts only when no run or load is running, asked for or
waiting, and while it runs the scheduler's runner is held (``JobRunner.hold``), so a run asked for meanwhile waits
for it. Exclusive tasks wait in a queue and run one after another, in the order submitted: none is ever dropped
(the runner's single waiting slot, where a newer job replaces the one waiting, is for runs only). Other tasks start
at once, beside whatever runs.

Cancelling a task (``Task.cancel``) drops it if it waits; if it runs, its result is dropped (superqt's ``quit``) and a
generator stops at its next ``yield``, while a function runs on until it returns (features that want a cancelled
job's partial result, a scan or a visualization, pass their work a flag of their own instead). Closing
(``shutdown``) cancels every task, and nothing a task says after that reaches the features; the workspace then
waits a bounded time for the thread pool (``CLOSE_WAIT_MS``).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QMetaMethod, QObject, Qt, Signal, Slot

from hookscope.ui.state.worker import AnyPoolWorker, PoolGeneratorWorker, PoolWorker, model_pool, start_worker


class Task(QObject):
    """One piece of side work, from ``Workspace.submit``. Its signals come on the GUI thread."""

    started = Signal()  # the work has started (an exclusive task may wait first)
    progressed = Signal(object)  # a value a generator work yielded
    finished = Signal(object)  # the work's return value
    failed = Signal(object)  # the exception the work raised
    ended = Signal()  # once, last: after finished or failed, after a cancelled generator stopped, or never started
    _posted_start = Signal()  # ``started``, by way of the event queue (see ``_start``)

    def __init__(self, label: str, work: Callable[[], Any], exclusive: bool) -> None:
        super().__init__()
        self.label = label
        self.exclusive = exclusive
        self.cancelled = False  # cancel() was called (a plain attribute: readable from the work's thread)
        self.state = "waiting"  # "waiting", "running", "ended"
        self._work: Callable[[], Any] | None = work
        self._worker: AnyPoolWorker | None = None
        self._on_end: Callable[[Task], None] = lambda _task: None
        self._quiet = False  # after shutdown: nothing more reaches the features
        self._posted_start.connect(self._on_posted_start, Qt.ConnectionType.QueuedConnection)

    @property
    def waiting(self) -> bool:
        return self.state == "waiting"

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def done(self) -> bool:
        return self.state == "ended"

    def cancel(self) -> None:
        """Give up on the task: a waiting task never starts (``ended`` comes at once); a running one's result is
        dropped (a generator stops at its next ``yield``; a function runs on until it returns); ``ended`` comes."""
        if self.done:
            return
        self.cancelled = True
        if self._worker is not None:
            self._worker.quit()  # superqt's flag: a generator worker checks it between yields
        elif self.waiting:
            self._end()

    def __repr__(self) -> str:
        return f"<Task {self.label!r} {self.state}{' exclusive' if self.exclusive else ''}>"

    # ---- internals (TaskPool) ---------------------------------------------------------------------------------
    def _start(self) -> None:
        work, self._work = self._work, None
        assert work is not None
        worker: AnyPoolWorker
        if inspect.isgeneratorfunction(work):  # a partial of one too
            worker = PoolGeneratorWorker(work)
            worker.yielded.connect(self._on_yielded)
        else:
            worker = PoolWorker(work)
        worker.returned.connect(self._on_returned)
        worker.errored.connect(self._on_errored)
        worker.finished.connect(self._on_finished)
        self._worker = worker
        self.state = "running"
        if self.cancelled:
            worker.quit()
        # ``started`` goes through the event queue, posted before the worker can post anything: a task that starts
        # inside ``submit`` would otherwise say so before the caller has connected to it, and the worker's first
        # signals would still come after it.
        self._posted_start.emit()
        # freed on the GUI thread once its pool thread is done with it; a task that uses the live model runs on the
        # model's own thread, as its runs do (one OpenMP team: see ``worker.model_pool``)
        start_worker(worker, model_pool() if self.exclusive else None)

    def _end(self) -> None:
        if self.done:
            return
        self.state = "ended"
        self._worker = self._work = None
        self._on_end(self)
        if not self._quiet:
            self.ended.emit()
        self._let_go_of_listeners()

    def _let_go_of_listeners(self) -> None:
        """Nothing comes from an ended task: its connections go. A feature listens with a ``partial`` that holds the
        task (to tell which task spoke); the connection holds that partial in C++, where Python's collector cannot
        see the cycle, and every task stayed alive with its listeners (issue 48, the window's memory loop)."""
        meta = self.metaObject()
        for index in range(meta.methodOffset(), meta.methodCount()):
            method = meta.method(index)
            if method.methodType() == QMetaMethod.MethodType.Signal and self.isSignalConnected(method):
                getattr(self, bytes(method.name().data()).decode()).disconnect()

    @Slot()
    def _on_posted_start(self) -> None:
        if not self._quiet:
            self.started.emit()

    @Slot(object)
    def _on_yielded(self, value: object) -> None:
        if not self._quiet:
            self.progressed.emit(value)

    @Slot(object)
    def _on_returned(self, value: object) -> None:
        if not self._quiet:
            self.finished.emit(value)

    @Slot(object)
    def _on_errored(self, error: object) -> None:
        if not self._quiet:
            self.failed.emit(error)

    @Slot()
    def _on_finished(self, *_: object) -> None:  # superqt's finished carries nothing (its stubs vary by Qt)
        self._end()


class TaskPool(QObject):
    """The workspace's side tasks: exclusive ones queued one after another between runs, others at once.

    ``runs_idle`` says whether no run or load is running, asked for or waiting; ``hold`` holds (True) or releases
    (False) the runs' runner while an exclusive task runs. ``runs_idle_now`` is to be called when the runs go idle.
    """

    submitted = Signal(object)  # every Task, as it is submitted
    busy_changed = Signal(bool)  # whether an exclusive task is waiting or running

    def __init__(self, runs_idle: Callable[[], bool], hold: Callable[[bool], None], parent: QObject | None = None):
        super().__init__(parent)
        self._runs_idle = runs_idle
        self._hold = hold
        self._queue: deque[Task] = deque()  # exclusive tasks waiting, oldest first
        self._exclusive: Task | None = None  # the exclusive task running
        self._live: dict[Task, None] = {}  # every task not ended yet, in the order submitted (kept alive until it ends)
        self._closed = False

    @property
    def busy(self) -> bool:
        """An exclusive task is waiting or running (the runs wait for it, or it for them)."""
        return self._exclusive is not None or bool(self._queue)

    @property
    def tasks(self) -> list[Task]:
        """The tasks not ended yet."""
        return list(self._live)

    def submit(self, label: str, work: Callable[[], Any], exclusive: bool = False) -> Task:
        task = Task(label, work, exclusive)
        task._on_end = self._ended
        if self._closed:
            task._quiet = True
            task.cancelled = True
            task.state = "ended"
            return task
        self._live[task] = None
        was_busy = self.busy
        self.submitted.emit(task)
        if exclusive:
            self._queue.append(task)
            self._next()
        else:
            task._start()
        if self.busy != was_busy:
            self.busy_changed.emit(self.busy)
        return task

    def runs_idle_now(self) -> None:
        """The runs went idle: the oldest exclusive task waiting starts."""
        self._next()

    def shutdown(self) -> None:
        """Cancel every task; nothing any of them says later reaches the features."""
        self._closed = True
        self._queue.clear()
        for task in list(self._live):
            task._quiet = True
            task.cancel()
        self._exclusive = None  # the runner stays held: no run starts while the window closes

    # ---- internals --------------------------------------------------------------------------------------------
    def _next(self) -> None:
        while self._exclusive is None and self._queue and not self._closed and self._runs_idle():
            task = self._queue.popleft()
            if task.done:  # cancelled while it waited
                continue
            self._exclusive = task
            self._hold(True)
            task._start()

    def _ended(self, task: Task) -> None:
        self._live.pop(task, None)
        was_busy = self.busy
        if task in self._queue:
            self._queue.remove(task)
        if task is self._exclusive:
            self._exclusive = None
            self._hold(False)  # a run asked for meanwhile starts now; the next exclusive task waits for it
        self._next()
        if not self._closed and self.busy != was_busy:
            self.busy_changed.emit(self.busy)
