"""A segmentation model's predicted mask: a colour per class, and the legend of the classes present.

The mask is drawn over the input image as a pyqtgraph ``ImageItem`` whose data is the predicted class map itself
(one small integer per pixel) with a lookup table of class colours, so what is on screen is exactly the run's
classes and a test (or a person with the item) can read them back. The legend lists the classes present, largest
share first; clicking one makes ``class:C`` the gradient target.
"""

from __future__ import annotations

import colorsys
import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget
from superqt import QElidingLabel

from hookscope.core.engine.objectives import class_label

LEGEND_ROWS = 8  # the largest classes listed (the dock is short); the rest are counted in one line
MASK_OPACITY = 0.5  # the photo stays readable under the mask


def class_colours(count: int) -> np.ndarray:
    """(count, 3) uint8, a distinct colour per class: hues spread by the golden ratio, so neighbouring class indices
    (often related classes) never get neighbouring hues, and the same class always gets the same colour."""
    colours = np.empty((max(count, 1), 3), dtype=np.uint8)
    for index in range(max(count, 1)):
        hue = (index * 0.618033988749895) % 1.0
        # Two alternating saturations and values: more than a dozen classes still differ in more than hue.
        saturation, value = (0.70, 0.95) if index % 2 == 0 else (0.95, 0.75)
        red, green, blue = colorsys.hsv_to_rgb(hue, saturation, value)
        colours[index] = (round(red * 255), round(green * 255), round(blue * 255))
    return colours[:count] if count else colours[:0]


def mask_lut(count: int) -> np.ndarray:
    """The mask item's lookup table: (count, 4) RGBA, opaque (the item's opacity blends it with the photo)."""
    colours = class_colours(count)
    return np.concatenate([colours, np.full((count, 1), 255, dtype=np.uint8)], axis=1)


def mask_data(segmentation: np.ndarray) -> np.ndarray:
    """The class map (H, W) as the mask item holds it: the window sets pyqtgraph's row-major image order, so the
    map keeps its shape; its type narrows (uint8 up to 256 classes, else uint16), which pyqtgraph colours through
    the lookup table without a float copy."""
    classes = int(segmentation.max()) + 1 if segmentation.size else 1
    dtype = np.uint8 if classes <= 256 else np.uint16
    return np.ascontiguousarray(segmentation, dtype=dtype)


@dataclass(frozen=True)
class ClassShare:
    index: int
    label: str
    share: float  # of the pixels, 0..1


def class_shares(segmentation: np.ndarray, categories: Sequence[str] | None = None) -> list[ClassShare]:
    """The classes present in ``segmentation`` with their share of the pixels, largest first (ties: lower index)."""
    flat = np.asarray(segmentation).ravel()
    if flat.size == 0:
        return []
    counts = np.bincount(flat.astype(np.int64))
    present = np.flatnonzero(counts)
    order = sorted(present.tolist(), key=lambda c: (-int(counts[c]), c))
    return [ClassShare(c, class_label(c, categories), float(counts[c]) / flat.size) for c in order]


def most_common_class(segmentation: np.ndarray, region: tuple[int, int, int, int]) -> int | None:
    """The class with the most pixels inside ``region`` (x0, y0, x1, y1; x1, y1 exclusive), None when it is empty."""
    x0, y0, x1, y1 = region
    inside = np.asarray(segmentation)[max(y0, 0) : max(y1, 0), max(x0, 0) : max(x1, 0)]
    shares = class_shares(inside)
    return shares[0].index if shares else None


class LegendRow(QFrame):
    """One class: its colour, its name and its share; a click makes it the target."""

    clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("predictionRow")  # the prediction rows' look: hover and the target's frame
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.index: int | None = None
        self.swatch = QLabel()
        self.swatch.setFixedSize(14, 14)
        self.label = QElidingLabel("")
        self.label.setMinimumWidth(60)
        self.share = QLabel("")
        self.share.setMinimumWidth(48)
        self.share.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.addWidget(self.swatch)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.share)

    def show_class(self, share: ClassShare | None, colour: tuple[int, int, int], is_target: bool) -> None:
        self.index = share.index if share is not None else None
        self.setVisible(share is not None)
        if share is None:
            return
        self.swatch.setStyleSheet(f"background: rgb{tuple(int(c) for c in colour)}; border: 1px solid #20242b;")
        self.label.setText(share.label)
        self.label.setToolTip(
            f"class {share.index}: {html.escape(share.label)}\n"
            "Click: take gradients of this class over its pixels (class:C)"
        )
        self.share.setText(f"{share.share:.1%}")
        if self.property("target") != is_target:
            self.setProperty("target", is_target)
            self.style().unpolish(self)
            self.style().polish(self)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        if event.button() == Qt.MouseButton.LeftButton and self.index is not None:
            self.clicked.emit(self.index)
        super().mousePressEvent(event)


class SegmentationLegend(QWidget):
    """The classes of the predicted mask, largest share first; clicking one makes ``class:C`` the target."""

    class_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel("Predicted classes, share of the pixels:")
        self.title.setObjectName("muted")
        self.title.setWordWrap(True)  # the right column is narrow: a long line would widen the dock
        self.rows = [LegendRow() for _ in range(LEGEND_ROWS)]
        self.more = QLabel("")
        self.more.setObjectName("muted")
        self.more.setWordWrap(True)
        self.hint = QLabel("Click a class to take gradients of its pixels; drag a rectangle on the input for a region.")
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(self.title)
        for row in self.rows:
            row.clicked.connect(self.class_chosen)
            row.setVisible(False)
            layout.addWidget(row)
        layout.addWidget(self.more)
        layout.addWidget(self.hint)
        self.shares: list[ClassShare] = []

    def show_mask(
        self, segmentation: np.ndarray, categories: Sequence[str] | None, colours: np.ndarray, target_class: int | None
    ) -> None:
        """The classes of ``segmentation`` with ``colours`` (the mask's, by class index); ``target_class`` framed."""
        self.shares = class_shares(segmentation, categories)
        for n, row in enumerate(self.rows):
            share = self.shares[n] if n < len(self.shares) else None
            colour = tuple(colours[share.index]) if share is not None and share.index < len(colours) else (0, 0, 0)
            row.show_class(share, colour, share is not None and share.index == target_class)
        rest = self.shares[len(self.rows) :]
        self.more.setVisible(bool(rest))
        if rest:
            self.more.setText(f"and {len(rest)} more classes ({sum(s.share for s in rest):.1%} of the pixels)")

    def clear(self) -> None:
        """No classes listed (another model was loaded; its run lists its own)."""
        self.shares = []
        for row in self.rows:
            row.show_class(None, (0, 0, 0), False)
        self.more.setVisible(False)

    @property
    def texts(self) -> list[str]:
        return [f"{row.label.text()} {row.share.text()}" for row in self.rows if not row.isHidden()]
