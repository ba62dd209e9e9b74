"""A panel's colour legend: its colormap as a small gradient bar, with the values the two ends stand for.

Dozens of panels are built at once (about 6 ms each), so the legend is one small widget that paints itself (no
pyqtgraph ``ColorBarItem``, no child labels): the gradient is a 256x1 image per lookup table, made once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.pictures import PanelPicture
from app.ui.state.rendering import DIFF_LUT, color_table, lut_of
from app.ui.theme import BORDER, MUTED, TEXT

BAR_WIDTH = 56  # px of the gradient bar
GAP = 4


@dataclass(frozen=True)
class Legend:
    """What a legend says: the lookup table, the values at its two ends, and how the tiles use it."""

    lut: str  # a colormap name, or ``mosaic_item.DIFF_LUT``
    low: str
    high: str
    note: str  # short: painted after the bar, elided when the panel is narrow
    detail: str = ""  # the whole story, for the tooltip

    @property
    def text(self) -> str:
        return f"{self.low} … {self.high} · {self.note}" + (f" · {self.detail}" if self.detail else "")


def number(value: float) -> str:
    """A legend number: short, with a real minus sign."""
    text = f"{value:.3g}"
    return text.replace("-", "−")


def legend_of(picture: PanelPicture) -> Legend | None:
    """The legend of a mosaic picture (None for bar plots, single values, flat and empty pictures).

    Per-channel scaling maps each tile's own min and max to the ends of the colormap, so the ends say "min" and
    "max" and the note gives the range of all values; shared scaling maps one range, so the ends are numbers. The
    A − B view is signed and symmetric around 0 (``ab_pictures.signed_mosaic``)."""
    if picture.channels.kind != "maps" or picture.flat or not all(picture.arrangement.size):
        return None
    # The per-channel ranges, not the values: ``channels.data`` is the full-resolution array, made on the CPU on
    # first use (from the run's device), which a legend at every run must not cost.
    shared = picture.settings.scaling == "shared"
    lut = lut_of(picture)
    if getattr(picture, "view", "A") == "diff":  # values of the A − B view: an array on the CPU already
        data = picture.channels.data
        magnitude = float(max(-float(data.min(initial=0.0)), float(data.max(initial=0.0))))
        if shared:
            return Legend(lut, number(-magnitude), "+" + number(magnitude), "A − B, shared",
                          "one signed range for all tiles, 0 in the middle")
        return Legend(lut, "−max", "+max", f"A − B per channel, |A − B| ≤ {number(magnitude)}",
                      "each tile from −its max |A − B| to +its max, 0 in the middle")
    ranges = picture.arrangement.ranges
    if ranges is not None and ranges[0].size:
        low, high = float(ranges[0].min()), float(ranges[1].max())
    else:
        data = picture.channels.data
        low, high = float(data.min()), float(data.max())
    what = "|grad| " if picture.is_gradient else ""
    values = f"{what}{number(low)} … {number(high)}"
    if shared:
        return Legend(lut, number(low), number(high), f"{what}shared".strip(), "one range for all tiles")
    return Legend(lut, "min", "max", f"{values}, per channel", "per channel: min→max of each tile")


@cache
def gradient_image(lut: str) -> QImage:
    """The lookup table as a one-pixel-high image (the A − B table without its index 0: the padding colour)."""
    colours = color_table(lut)[1:] if lut == DIFF_LUT else color_table(lut)
    image = QImage(len(colours), 1, QImage.Format.Format_RGB32)
    for x, argb in enumerate(colours):
        image.setPixel(x, 0, argb)
    return image


class ColorLegend(QWidget):
    """``low [gradient] high  note``, the note elided to the width there is (the whole text in the tooltip)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("colorLegend")
        self.legend: Legend | None = None
        height = self.fontMetrics().height() + 4
        self.setFixedHeight(height)
        # Never wider than the panel gives it: the note elides instead.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(BAR_WIDTH * 3, self.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(BAR_WIDTH, self.height())

    def text(self) -> str:
        return self.legend.text if self.legend is not None else ""

    def set_legend(self, legend: Legend | None) -> None:
        if legend == self.legend:
            return
        self.legend = legend
        self.setToolTip(f"Colours: {legend.text}" if legend is not None else "")
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        legend = self.legend
        if legend is None:
            return
        painter = QPainter(self)
        metrics = self.fontMetrics()
        height = self.height()
        x = 0
        painter.setPen(QColor(TEXT))
        for part in ("low", "bar", "high"):
            if part == "bar":
                bar = QRect(x, 3, BAR_WIDTH, height - 6)
                painter.drawImage(bar, gradient_image(legend.lut))
                painter.setPen(QColor(BORDER))
                painter.drawRect(bar.adjusted(0, 0, -1, -1))
                painter.setPen(QColor(TEXT))
                x += BAR_WIDTH + GAP
                continue
            text = legend.low if part == "low" else legend.high
            width = metrics.horizontalAdvance(text)
            painter.drawText(QRect(x, 0, width, height), int(Qt.AlignmentFlag.AlignVCenter), text)
            x += width + GAP
        room = self.width() - x - GAP
        if legend.note and room > metrics.horizontalAdvance("…") * 2:
            painter.setPen(QColor(MUTED))
            note = metrics.elidedText(legend.note, Qt.TextElideMode.ElideRight, room)
            painter.drawText(QRect(x + GAP, 0, room, height), int(Qt.AlignmentFlag.AlignVCenter), note)
        painter.end()
