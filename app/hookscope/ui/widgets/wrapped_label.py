"""A word-wrapped label that keeps the height its text needs at its width.

A plain wrapped ``QLabel`` reports one line's height to a layout that does not do height-for-width (a dock, a
window's docks area), so a narrow dock squeezed it to one cut line or painted the rest over its neighbours."""

from __future__ import annotations

from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget


class WrappedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        needed = max(0, self.heightForWidth(self.width())) if self.text() else 0
        if needed != self.minimumHeight():
            self.setMinimumHeight(needed)
