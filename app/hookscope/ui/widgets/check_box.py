"""A check box drawn in the theme's colours, as the module tree draws its ticks: Fusion draws the box in the window
colour darkened, invisible on the dark theme, so a ticked "Show the predicted mask" showed a bare tick."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QCheckBox, QStyle, QStyleOptionButton

from hookscope.ui.theme import ACCENT, MUTED


class ThemedCheckBox(QCheckBox):
    """Its box: an outline in the muted text colour (about 6:1 against the panels), filled with the accent and a
    white tick when ticked, greyed when disabled."""

    def indicator_rect(self) -> QRect:
        option = QStyleOptionButton()
        self.initStyleOption(option)
        return self.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, self)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)  # the label, focus and hover as the style draws them; the box is redrawn here
        box = self.indicator_rect().adjusted(0, 0, -1, -1)
        painter = QPainter(self)
        outline, fill = QColor(MUTED), QColor(ACCENT)
        if not self.isEnabled():
            outline.setAlpha(110)
            fill.setAlpha(110)
        painter.fillRect(box.adjusted(0, 0, 1, 1), self.palette().base())
        if self.isChecked():
            painter.fillRect(box.adjusted(0, 0, 1, 1), fill)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            painter.setPen(QPen(QColor("white"), 2))
            x, y, side = box.x(), box.y(), box.width()
            painter.drawPolyline(
                [
                    QPoint(x + round(side * 0.23), y + round(side * 0.54)),
                    QPoint(x + round(side * 0.4), y + round(side * 0.77)),
                    QPoint(x + round(side * 0.77), y + round(side * 0.23)),
                ]
            )
        else:
            painter.setPen(QPen(outline, 1))
            painter.drawRect(box)
        painter.end()
