"""PySide6 6.12.0 aborts the process on Python 3.11 after a few thousand emissions of a bool signal
(bool_dealloc); the app emits such signals on every tick and toggle, so this guards the pinned version."""

from __future__ import annotations

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
