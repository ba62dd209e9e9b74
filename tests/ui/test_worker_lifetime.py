"""Background workers are freed on the GUI thread, and leave the process-wide warnings state alone.

A finished superqt worker used to be freed by its pool thread whenever the GUI thread had let go of it first, and
its signals QObject (a GUI-thread object, connected to GUI-thread receivers) was destroyed there, against Qt's rule
that an object dies in its own thread. With the job runner's relay deleted (``deleteLater``) on the GUI thread at
the same moment, both threads were in ``QObject::~QObject`` of the two ends of one connection: the intermittent
segfault of the UI tests (GUI thread in ``Shiboken::Object::destroy`` / ``Sbk_GetPyOverride`` under
``QObject::event``, a pool thread in ``subtype_dealloc`` -> ``QObject::~QObject``). Measured before the fix: 6% of
the runner's workers and 92% of the scan's were freed on a pool thread, and 20,000 runner jobs crashed the process
in 3 runs out of 8; after it, none of either."""

from __future__ import annotations

import threading
import warnings
import weakref

import pytest
from PySide6.QtCore import QObject, Qt, Signal

from hookscope.ui.state.worker import Job, JobRunner, PoolWorker, start_worker, workers_kept

JOBS = 400


def _work() -> list[object]:
    return [object() for _ in range(200)]  # a little allocation, as a real job's


def _watch(worker: PoolWorker, freed_on: list[bool]) -> None:
    """Note which thread destroys ``worker``'s signals object (``destroyed`` is emitted by its destructor, in the
    thread that runs it)."""
    worker.signals.destroyed.connect(
        lambda: freed_on.append(threading.current_thread() is threading.main_thread()),
        Qt.ConnectionType.DirectConnection,
    )


def test_the_runners_workers_are_freed_on_the_gui_thread(qtbot) -> None:
    runner = JobRunner()
    freed_on: list[bool] = []
    start = runner._start

    def start_watched(job: Job) -> None:
        start(job)
        _watch(runner._running.worker, freed_on)

    runner._start = start_watched
    done: list[int] = []
    runner.returned.connect(lambda job, _outcome: done.append(job.generation))
    for n in range(JOBS):
        with qtbot.waitSignal(runner.busy_changed, timeout=10_000):
            runner.submit(Job(n, _work, stale=lambda: False))
        qtbot.waitUntil(lambda: not runner.busy, timeout=10_000)
    assert done == list(range(JOBS))
    qtbot.waitUntil(lambda: len(freed_on) == JOBS and workers_kept() == 0, timeout=20_000)
    assert all(freed_on), f"{freed_on.count(False)} of {JOBS} workers were freed on a pool thread"
    runner.deleteLater()


class _Feature(QObject):
    """A feature's way with a worker of its own (the scan, an export, a download): the slot that takes the result
    drops the worker at once, usually before its pool thread has returned from ``run``."""

    ended = Signal()

    def __init__(self, freed_on: list[bool]) -> None:
        super().__init__()
        self.freed_on = freed_on
        self.worker: PoolWorker | None = None
        self.results = 0

    def start(self) -> None:
        self.worker = PoolWorker(_work)
        self.worker.returned.connect(self._on_returned)
        _watch(self.worker, self.freed_on)
        start_worker(self.worker)

    def _on_returned(self, _result: object) -> None:
        self.worker = None
        self.results += 1
        self.ended.emit()


def test_a_features_worker_dropped_in_its_slot_is_freed_on_the_gui_thread(qtbot) -> None:
    freed_on: list[bool] = []
    feature = _Feature(freed_on)
    for _ in range(JOBS // 4):
        with qtbot.waitSignal(feature.ended, timeout=10_000):
            feature.start()
    qtbot.waitUntil(lambda: len(freed_on) == JOBS // 4 and workers_kept() == 0, timeout=20_000)
    assert feature.results == JOBS // 4
    assert all(freed_on), f"{freed_on.count(False)} of {JOBS // 4} workers were freed on a pool thread"


@pytest.mark.filterwarnings("ignore:from a worker")
def test_overlapping_workers_leave_warnings_showwarning_alone(qtbot) -> None:
    """superqt's run swaps the process-wide ``warnings.showwarning`` for a lambda holding the worker; two workers
    that overlap restored each other's out of order and a dead worker's lambda stayed installed (with its work
    and whatever that held: a model)."""
    before = warnings.showwarning
    runners = [JobRunner(), JobRunner()]  # the window has two: runs and the pictures of panels scrolled in
    barrier = threading.Barrier(2, timeout=5)

    def overlapping() -> int:
        barrier.wait()  # both workers inside run() at once
        warnings.warn("from a worker", UserWarning, stacklevel=1)
        return 1

    for _ in range(20):
        for runner in runners:
            runner.submit(Job(0, overlapping, stale=lambda: False))
        qtbot.waitUntil(lambda: not any(runner.busy for runner in runners), timeout=10_000)
        barrier.reset()
        assert warnings.showwarning is before
    qtbot.waitUntil(lambda: workers_kept() == 0, timeout=20_000)
    for runner in runners:
        runner.deleteLater()


def test_a_cancelled_scan_lets_go_of_its_copy_of_the_model(workspace, host, qtbot, tmp_path) -> None:
    """The scan's worker holds its work, whose closure holds the scan's copy of the model, and the scan's
    ``_Background`` (now its task) held the worker: a cycle. Kept by the worker keeper until its count fell, it never fell, and
    every scan kept a model (seen here as one more model alive per scan in a 100-iteration window loop)."""
    import gc

    import numpy as np
    from PIL import Image

    from hookscope.ui.features.scan import ScanFeature

    folder = tmp_path / "images"
    folder.mkdir()
    for index in range(40):
        pixels = np.random.default_rng(index).integers(0, 256, (80, 90, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{index:02d}.png")
    feature = ScanFeature(workspace, host)
    copies: list[weakref.ref] = []
    workspace.tasks.submitted.connect(
        lambda task: (
            task.finished.connect(lambda outcome: copies.append(weakref.ref(outcome)))
            if task.label == "scan-copy"
            else None
        )
    )
    with qtbot.waitSignal(feature.finished, timeout=60_000) as ended:
        assert feature.scan_folder(str(folder))
        qtbot.waitUntil(lambda: feature._scan is not None, timeout=60_000)
        feature.cancel()
    assert ended.args == ["cancelled"]
    assert len(copies) == 1

    def copy_freed() -> bool:
        gc.collect()
        return copies[0]() is None

    qtbot.waitUntil(copy_freed, timeout=10_000)
    assert workers_kept() == 0
    feature.shutdown()
