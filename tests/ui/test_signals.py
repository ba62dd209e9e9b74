"""PySide6 6.12.0 aborts the process on Python 3.11 after a few thousand emissions of a bool signal
(bool_dealloc); the app emits such signals on every tick and toggle, so this guards the pinned version."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal


class Emitter(QObject):
    toggled = Signal(bool)


def test_ten_thousand_bool_emissions_arrive(qtbot) -> None:
    emitter = Emitter()
    received: list[bool] = []
    emitter.toggled.connect(received.append)
    for n in range(10_000):
        emitter.toggled.emit(n % 2 == 0)
    assert len(received) == 10_000
    assert received[:4] == [True, False, True, False]
    assert sum(received) == 5_000


def test_an_emitted_bool_keeps_its_references(qtbot) -> None:
    """What aborts 6.12.0 is a reference to True lost at each emission, whatever the value emitted: the abort comes
    when True's count reaches zero, in a bare script after some 560 emissions, in a process that has imported torch
    more than ten thousand away (the test above passes on 6.12.0), so the references themselves are counted (on
    6.12.0: 2,000 of True lost by these 2,000 emissions)."""
    emitter = Emitter()
    received: list[bool] = []
    emitter.toggled.connect(received.append)
    before = sys.getrefcount(True), sys.getrefcount(False)
    for n in range(2_000):
        emitter.toggled.emit(n % 2 == 0)
    assert len(received) == 2_000
    received.clear()
    lost = before[0] - sys.getrefcount(True), before[1] - sys.getrefcount(False)
    assert max(lost) < 50, f"references lost by 2,000 emissions of a bool signal (True, False): {lost}"
