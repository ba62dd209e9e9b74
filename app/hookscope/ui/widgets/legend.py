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

from hookscope.core.pictures.ab import view_of
from hookscope.core.pictures.panels import PanelPicture
from hookscope.ui.state.rendering import DIFF_LUT, color_table, lut_of
from hookscope.ui.theme import BORDER, MUTED, TEXT

BAR_WIDTH = 56  # px of the gradient bar
BAR_MIN_WIDTH = 24  # a narrow panel's bar shrinks to this before the values lose room
GAP = 4


@dataclass(frozen=True)
class Legend:
    """What a legend says: the lookup table, the values at its two ends, and how the tiles use it."""

    lut: str  # a colormap name, or ``mosaic_item.DIFF_LUT``
    low: str
    high: str
    note: str  # short: painted after the values, elided when the panel is narrow
    detail: str = ""  # the whole story, for the tooltip
    values: str = ""  # the range the ends stand for when they say "min" and "max": painted whole, before the note

    @property
    def text(self) -> str:
        said = ", ".join(part for part in (self.values, self.note) if part)
        return f"{self.low} … {self.high} · {said}" + (f" · {self.detail}" if self.detail else "")


def number(value: float) -> str:
    """A legend number: short, with a real minus sign."""
    text = f"{value:.3g}"
    if "e" in text:  # 5.05e-09 -> 5.05e-9: a narrow legend has no room for the exponent's padding
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
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
    if view_of(picture) == "diff":  # values of the A − B view: an array on the CPU already
        data = picture.channels.data
        magnitude = float(max(-float(data.min(initial=0.0)), float(data.max(initial=0.0))))
        if shared:
            return Legend(
                lut,
                number(-magnitude),
                "+" + number(magnitude),
                "A − B, shared",
                "one signed range for all tiles, 0 in the middle",
            )
        return Legend(
            lut,
            "−max",
            "+max",
            "A − B per channel",
            "each tile from −its max |A − B| to +its max, 0 in the middle",
            f"|A − B| ≤ {number(magnitude)}",
        )
    ranges = picture.arrangement.ranges
    if ranges is not None and ranges[0].size:
        low, high = float(ranges[0].min()), float(ranges[1].max())
    else:
        data = picture.channels.data
        low, high = float(data.min()), float(data.max())
    what = "|grad| " if picture.is_gradient else ""
    values = f"{number(low)} … {number(high)}"
    if shared:
        return Legend(lut, number(low), number(high), f"{what}shared".strip(), "one range for all tiles")
    # "|grad|" in the note, not the values: a narrow panel keeps the numbers whole and elides the words.
    return Legend(lut, "min", "max", f"{what}per channel", "per channel: min→max of each tile", values)


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

    def parts(self) -> list[tuple[str, str, QRect]]:
        """What is painted where, left to right: ("low" | "bar" | "high" | "values" | "note", text, rectangle).

        The ends and the values are never elided (with "min" and "max" at the ends, the values are the minimum and
        maximum themselves: a narrow panel once cut them off with the note); the note takes what is left."""
        legend = self.legend
        if legend is None:
            return []
        metrics = self.fontMetrics()
        height = self.height()

        def widths(ends: bool) -> list[tuple[str, str, int]]:
            return [
                (part, text, BAR_WIDTH if part == "bar" else metrics.horizontalAdvance(text))
                for part, text in (("low", legend.low), ("bar", ""), ("high", legend.high), ("values", legend.values))
                if part == "bar" or (text and (ends or part == "values"))
            ]

        # In a narrow panel the note goes first, then the bar narrows, then the words "min" and "max" at its ends
        # (the values after them say the same numbers); the values stay whole as long as they fit at all.
        shown = widths(ends=True)
        need = sum(width for *_, width in shown) + GAP * (len(shown) - 1)
        if need > self.width() and legend.values and legend.low == "min":
            shown = widths(ends=False)
            need = sum(width for *_, width in shown) + GAP * (len(shown) - 1)
        bar = max(BAR_MIN_WIDTH, BAR_WIDTH - max(0, need - self.width()))
        placed: list[tuple[str, str, QRect]] = []
        x = 0
        for part, text, width in shown:
            if part == "bar":
                placed.append((part, "", QRect(x, 3, bar, height - 6)))
                x += bar + GAP
            else:
                placed.append((part, text, QRect(x, 0, width, height)))
                x += width + GAP
        room = self.width() - x - GAP
        if legend.note and room > metrics.horizontalAdvance("…") * 2:
            note = metrics.elidedText(legend.note, Qt.TextElideMode.ElideRight, room)
            placed.append(("note", note, QRect(x + GAP, 0, room, height)))
        return placed

    def minimum_width(self) -> int:
        """The width that shows the ends, the bar and the values whole."""
        shown = [rect for part, _, rect in self.parts() if part != "note"]
        return max((rect.right() + 1 for rect in shown), default=0)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        if self.legend is None:
            return
        painter = QPainter(self)
        for part, text, rect in self.parts():
            if part == "bar":
                painter.drawImage(rect, gradient_image(self.legend.lut))
                painter.setPen(QColor(BORDER))
                painter.drawRect(rect.adjusted(0, 0, -1, -1))
            else:
                painter.setPen(QColor(MUTED if part == "note" else TEXT))
                painter.drawText(rect, int(Qt.AlignmentFlag.AlignVCenter), text)
        painter.end()
