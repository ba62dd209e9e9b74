"""Cyclic garbage is collected on the GUI thread only: a collection inside a worker can destroy Qt objects there
(seen here as a segfault of the event loop while a worker built a model)."""

from __future__ import annotations

import gc
import threading

from hookscope.ui.main_window import MainWindow

RUN_TIMEOUT_MS = 120_000


def test_garbage_is_collected_on_the_gui_thread_while_runs_allocate(window: MainWindow, qtbot) -> None:
    starts: list[str] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            starts.append(threading.current_thread().name)

    gc.callbacks.append(note)
    try:
        assert not gc.isenabled()  # automatic collection (in whichever thread allocates) is off
        for _ in range(5_000):  # cyclic garbage: only the collector frees it
            cycle: list = []
            cycle.append(cycle)
        for _ in range(2):
            with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
                window.workspace.run_again()  # the worker allocates thousands of objects
        qtbot.waitUntil(lambda: bool(starts), timeout=5_000)  # the collector's timer fires on the GUI thread
    finally:
        gc.callbacks.remove(note)
    assert starts, "nothing was collected"
    assert set(starts) == {threading.main_thread().name}
