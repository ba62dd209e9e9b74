"""A detection model's boxes over the input image: a rectangle and "label score" per box above the threshold.

The boxes are pyqtgraph scene items in the input view's coordinates (input-tensor pixels, as the model returns its
boxes), so they follow the view's zoom and aspect. Clicking a box asks for ``box:N``, N being the box's place in
the model's output (not its place among those shown), as the command line's ``--target box:N`` counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QObject, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPen
from PySide6.QtWidgets import QGraphicsRectItem

from hookscope.core.engine.objectives import Detection
from hookscope.ui.widgets.segmentation_legend import class_colours

DEFAULT_THRESHOLD = 0.5
HIGHLIGHT = QColor("#ffffff")


@dataclass(frozen=True)
class Box:
    """One detection as drawn: its number in the model's output, its corners in input pixels, its class, score."""

    number: int
    x0: float
    y0: float
    x1: float
    y1: float
    label_index: int
    label: str
    score: float

    @property
    def caption(self) -> str:
        return f"{self.label} {self.score:.2f}"


def boxes_of(detections: Iterable[Detection]) -> list[Box]:
    """The engine's detections (``RunResult.detections``: box, label index, label text, score) as ``Box``es."""
    boxes = []
    for detection in detections:
        x0, y0, x1, y1 = (float(v) for v in detection.box)
        boxes.append(
            Box(
                int(detection.index),
                x0,
                y0,
                x1,
                y1,
                int(detection.label),
                str(detection.label_text),
                float(detection.score),
            )
        )
    return boxes


class BoxItem(QGraphicsRectItem):
    """One box; pyqtgraph's scene calls ``mouseClickEvent`` on the items under a click."""

    def __init__(self, box: Box, overlay: DetectionOverlay, highlighted: bool) -> None:
        super().__init__(QRectF(box.x0, box.y0, max(box.x1 - box.x0, 0.0), max(box.y1 - box.y0, 0.0)))
        self.box = box
        self._overlay = overlay
        colour = QColor(*(int(c) for c in class_colours(box.label_index + 1)[box.label_index]))
        pen = QPen(HIGHLIGHT if highlighted else colour)
        pen.setCosmetic(True)  # the same width on screen at any zoom
        pen.setWidthF(3.0 if highlighted else 1.6)
        self.setPen(pen)
        fill = QColor(HIGHLIGHT if highlighted else colour)
        fill.setAlpha(40 if highlighted else 0)
        self.setBrush(QBrush(fill))
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(
            f"box {box.number}: {box.label} (class {box.label_index}), score {box.score:.3f}\n"
            "Click: take gradients of this box's score (box:N)"
        )
        # Smaller boxes on top, so a box inside another can still be clicked; the chosen one above all.
        area = max((box.x1 - box.x0) * (box.y1 - box.y0), 1.0)
        self.setZValue(20 + (1000 if highlighted else 0) + 1.0 / area)
        self.text = pg.TextItem(
            box.caption,
            color="#ffffff" if not highlighted else "#000000",
            fill=pg.mkBrush(HIGHLIGHT if highlighted else colour),
            anchor=(0, 0),
        )
        # inside the box's top-left corner: a box at the image's top edge would put its label out of view
        self.text.setParentItem(self)
        self.text.setPos(box.x0, box.y0)

    def mouseClickEvent(self, event: Any) -> None:  # noqa: N802 (pyqtgraph's name)
        if event.button() == Qt.MouseButton.LeftButton:
            event.accept()
            self._overlay.box_chosen.emit(self.box.number)


class DetectionOverlay(QObject):
    """The boxes of the last run with a score at or above the threshold, drawn in ``view_box``."""

    box_chosen = Signal(int)  # N of box:N

    def __init__(self, view_box: pg.ViewBox, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._view_box = view_box
        self.boxes: list[Box] = []
        self.threshold = DEFAULT_THRESHOLD
        self.target: int | None = None
        self.items: list[BoxItem] = []

    def show_boxes(self, boxes: list[Box], target: int | None) -> None:
        self.boxes = list(boxes)
        self.target = target
        self._draw()

    def set_threshold(self, threshold: float) -> None:
        self.threshold = float(threshold)
        self._draw()

    def clear(self) -> None:
        self.show_boxes([], None)

    @property
    def shown(self) -> list[Box]:
        """The boxes drawn: score at or above the threshold, and the targeted one whatever its score (the target
        should never be invisible)."""
        return [b for b in self.boxes if b.score >= self.threshold or b.number == self.target]

    def _draw(self) -> None:
        for item in self.items:
            self._view_box.removeItem(item)
        self.items = []
        for box in self.shown:
            item = BoxItem(box, self, box.number == self.target)
            self._view_box.addItem(item, ignoreBounds=True)  # the view keeps fitting the image, not the boxes
            self.items.append(item)
