"""The input as the model sees it (after resizing, cropping and normalising), and the list of images to step
through."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import (
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from hookscope.core.common.resources import colormap_lut
from hookscope.ui.widgets.check_box import ThemedCheckBox
from hookscope.ui.widgets.detection_overlay import DetectionOverlay
from hookscope.ui.widgets.segmentation_legend import MASK_OPACITY

Region = tuple[int, int, int, int]  # x0, y0, x1, y1 in input pixels (x1, y1 exclusive)


class SquareView(pg.GraphicsLayoutWidget):
    """The input image's view asks for a square (pyqtgraph asks for 640x480) but takes what the dock has left under
    it: a view as tall as it is wide pushed the rows under it (the video's frame slider, the Input… button) below
    the fold of a short dock (1366x768), so the image shrinks instead and every row stays in sight."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(240, 240)


def region_of(a: tuple[float, float], b: tuple[float, float], width: int, height: int) -> Region | None:
    """The input pixels a drag from ``a`` to ``b`` (view coordinates: input pixels) covers, clipped to the image:
    every pixel the rectangle touches. None when it covers no pixel (a click, or a drag outside the image)."""
    x0 = max(0, math.floor(min(a[0], b[0])))
    y0 = max(0, math.floor(min(a[1], b[1])))
    x1 = min(width, math.ceil(max(a[0], b[0])))
    y1 = min(height, math.ceil(max(a[1], b[1])))
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


class InputViewBox(pg.ViewBox):
    """The input image's view. While a segmentation model is loaded, a left-button drag draws a rectangle and says
    which input pixels it covers (``region_dragged``); the view itself never pans or zooms with the mouse."""

    region_dragged = Signal(object)  # Region

    def __init__(self) -> None:
        super().__init__(lockAspect=True, invertY=True, enableMenu=False)
        self.setMouseEnabled(False, False)
        self.regions_enabled = False
        self.image_size: tuple[int, int] = (0, 0)  # width, height of the image shown
        self.rubber_band = QGraphicsRectItem()
        pen = QPen(QColor("#ffffff"))
        pen.setCosmetic(True)
        pen.setWidthF(2.0)
        pen.setStyle(Qt.PenStyle.DashLine)
        self.rubber_band.setPen(pen)
        self.rubber_band.setZValue(2000)
        self.rubber_band.setVisible(False)
        self.addItem(self.rubber_band, ignoreBounds=True)

    def mouseDragEvent(self, event: Any, axis: int | None = None) -> None:  # noqa: N802 (pyqtgraph's name)
        if not self.regions_enabled or event.button() != Qt.MouseButton.LeftButton:
            event.ignore()
            return
        event.accept()
        start = self.mapSceneToView(event.buttonDownScenePos())
        now = self.mapSceneToView(event.scenePos())
        self.rubber_band.setRect(QRectF(start, now).normalized())
        self.rubber_band.setVisible(True)
        if event.isFinish():
            region = region_of((start.x(), start.y()), (now.x(), now.y()), *self.image_size)
            self.show_region(region)
            if region is not None:
                self.region_dragged.emit(region)

    def show_region(self, region: Region | None) -> None:
        """Frame ``region`` (the target's), or nothing."""
        self.rubber_band.setVisible(region is not None)
        if region is not None:
            x0, y0, x1, y1 = region
            self.rubber_band.setRect(QRectF(x0, y0, x1 - x0, y1 - y0))


class InputPanel(QWidget):
    image_selected = Signal(int)  # row in the image list
    step_requested = Signal(int)  # -1 previous, +1 next

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = QElidingLabel("No image yet")
        self.name.setObjectName("panelTitle")
        # The name on one elided line (full text in the tooltip). What the model is fed is the input settings'
        # row, added under this panel by that feature.
        self.view = SquareView()
        self.view.setMinimumSize(120, 120)
        self.view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._box = InputViewBox()
        self.view.addItem(self._box)
        self.region_dragged = self._box.region_dragged
        self.image_item = pg.ImageItem()
        self._box.addItem(self.image_item)
        # A segmentation model's predicted classes: the class map itself, coloured by a lookup table of classes.
        self.mask_item = pg.ImageItem()
        self.mask_item.setOpacity(MASK_OPACITY)
        self.mask_item.setVisible(False)
        self._box.addItem(self.mask_item)
        self.detections = DetectionOverlay(self._box, self)
        self.box_chosen = self.detections.box_chosen
        self.saliency_item = pg.ImageItem()
        self.saliency_item.setLookupTable(colormap_lut("inferno"))
        self.saliency_item.setOpacity(0.75)
        self.saliency_item.setVisible(False)
        self._box.addItem(self.saliency_item)
        self.saliency_box = ThemedCheckBox("Show |∂ target / ∂ input|")
        self.saliency_box.setToolTip("How strongly each pixel changes the target score (gradient at the input)")
        self.saliency_box.toggled.connect(self.saliency_item.setVisible)

        self.list = QListWidget()
        self.list.setMaximumHeight(110)
        self.list.setToolTip("Images dropped or opened together; step with Page Up / Page Down")
        self.list.itemActivated.connect(lambda item: self.image_selected.emit(self.list.row(item)))
        self.list.itemClicked.connect(lambda item: self.image_selected.emit(self.list.row(item)))
        self.previous_button = previous = QPushButton("◀ Previous")
        previous.clicked.connect(lambda: self.step_requested.emit(-1))
        following = QPushButton("Next ▶")
        following.clicked.connect(lambda: self.step_requested.emit(1))
        self.count = QLabel("")
        self.count.setObjectName("muted")
        steps = QHBoxLayout()
        steps.addWidget(previous)
        steps.addWidget(following)
        steps.addStretch(1)
        steps.addWidget(self.count)
        self._list_box = QWidget()
        list_layout = QVBoxLayout(self._list_box)
        list_layout.setContentsMargins(0, 0, 0, 0)
        list_layout.addWidget(self.list)
        list_layout.addLayout(steps)
        self._list_box.setVisible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.name)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.saliency_box)
        self.mask_box = ThemedCheckBox("Show the predicted mask")
        self.mask_box.setToolTip("The segmentation model's predicted class of each pixel, a colour per class")
        self.mask_box.setChecked(True)
        self.mask_box.setVisible(False)
        self.mask_box.toggled.connect(self._show_mask_item)
        layout.addWidget(self.mask_box)
        layout.addWidget(self._list_box)
        self._rows = layout

    # The dock's scroll area sizes a panel whose rows wrap (height-for-width) to its preferred height, not its least:
    # the image at its preferred 240 px pushed the rows under it below the fold. Preferred here is the image at its
    # least, so the rows stay in sight and the image takes whatever height is left (its size policy expands).
    def _image_gives(self) -> int:
        return max(0, self.view.sizeHint().height() - self.view.minimumHeight())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().sizeHint()
        return QSize(hint.width(), hint.height() - self._image_gives())

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt's name)
        return super().heightForWidth(width) - self._image_gives()

    def add_row(self, widget: QWidget) -> None:
        """A feature's row: below everything the panel has itself, or right under the image for a row that says
        ``under_image`` (the video's frame slider: at 1024x700 the rows below the image do not all fit, and the
        slider was the one scrolled out of sight)."""
        if getattr(widget, "under_image", False):
            self._rows.insertWidget(self._rows.indexOf(self.view) + 1, widget)
        else:
            self._rows.addWidget(widget)

    def show_input(self, rgb: np.ndarray, saliency: np.ndarray | None, name: str) -> None:
        shape_changed = self.image_item.image is None or self.image_item.image.shape != rgb.shape
        # uint8 RGB without levels: pyqtgraph wraps the pixels as they are; levels (0, 255) gave the same pixels through a
        # rescale of every value, each frame of a video (0.17 ms against 0.014)
        self.image_item.setImage(rgb, autoLevels=False, levels=None)
        if saliency is not None:
            high = float(saliency.max()) if saliency.size else 0.0
            self.saliency_item.setImage(saliency, autoLevels=False, levels=(0.0, high if high > 0 else 1.0))
            self.saliency_item.setRect(0, 0, rgb.shape[1], rgb.shape[0])
            self.saliency_item.setVisible(self.saliency_box.isChecked())
        self.saliency_box.setEnabled(saliency is not None)
        self.name.setText(name)
        self.name.setToolTip(name)
        self._box.image_size = (int(rgb.shape[1]), int(rgb.shape[0]))
        if shape_changed:  # fitted to the image alone: the mask of the previous size is not re-placed yet
            self._box.autoRange(padding=0.01, items=[self.image_item])

    def clear_results(self) -> None:
        """Nothing of a model's run over the image: no mask, boxes, region or saliency (another model was loaded;
        its own run draws them again)."""
        self.show_mask(None)
        self.mask_item.clear()
        self.detections.clear()
        self.set_regions_enabled(False)
        self.show_region(None)
        self.saliency_item.clear()
        self.saliency_item.setVisible(False)
        self.saliency_box.setEnabled(False)

    def show_mask(self, classes: np.ndarray | None, lut: np.ndarray | None = None) -> None:
        """A segmentation model's predicted class map (H, W) over the image, coloured by ``lut`` ((K, 4) RGBA by
        class index); None: no mask (another kind of model)."""
        self.mask_box.setVisible(classes is not None)
        if classes is None or lut is None:
            self.mask_item.setVisible(False)
            return
        self.mask_item.setLookupTable(lut)
        # levels (0, K) with K colours: class c is the table's row c, no rescaling in between
        self.mask_item.setImage(classes, autoLevels=False, levels=(0, len(lut)))
        self.mask_item.setRect(0, 0, classes.shape[1], classes.shape[0])
        self._show_mask_item(self.mask_box.isChecked())

    def _show_mask_item(self, shown: bool) -> None:
        self.mask_item.setVisible(shown and self.mask_box.isVisible() and self.mask_item.image is not None)

    def set_regions_enabled(self, enabled: bool) -> None:
        """Whether a drag on the image picks a region (segmentation models)."""
        self._box.regions_enabled = enabled
        self.view.setToolTip(
            "Drag a rectangle: take gradients of the targeted class over that region" if enabled else ""
        )

    def show_region(self, region: Region | None) -> None:
        self._box.show_region(region)

    def set_list(self, paths: list[str], current: int | None) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for path in paths:
            item = QListWidgetItem(os.path.basename(path) or path)
            item.setToolTip(path)
            self.list.addItem(item)
        if current is not None:
            self.list.setCurrentRow(current)
        self.list.blockSignals(False)
        self.count.setText(f"{(current or 0) + 1} of {len(paths)}" if paths else "")
        self._list_box.setVisible(len(paths) > 1)
        self.previous_button.setEnabled(bool(current))  # the first image has none before it
