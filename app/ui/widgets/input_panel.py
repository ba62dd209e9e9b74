"""The input as the model sees it (after resizing, cropping and normalising), and the list of images to step
through."""

from __future__ import annotations

import os

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import (
    QCheckBox,
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

from app.core.resources import colormap_lut


class SquareView(pg.GraphicsLayoutWidget):
    """The input image's view asks for a square as wide as the dock (pyqtgraph asks for 640x480): in a short dock
    that scrolls, the image then sits at the top instead of in the middle of a tall empty view."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(240, 240)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return width


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
        self._box = self.view.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self._box.setMouseEnabled(False, False)
        self.image_item = pg.ImageItem()
        self._box.addItem(self.image_item)
        self.saliency_item = pg.ImageItem()
        self.saliency_item.setLookupTable(colormap_lut("inferno"))
        self.saliency_item.setOpacity(0.75)
        self.saliency_item.setVisible(False)
        self._box.addItem(self.saliency_item)
        self.saliency_box = QCheckBox("Show |∂ target / ∂ input|")
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
        layout.addWidget(self._list_box)

    def show_input(self, rgb: np.ndarray, saliency: np.ndarray | None, name: str) -> None:
        shape_changed = self.image_item.image is None or self.image_item.image.shape != rgb.shape
        self.image_item.setImage(rgb, autoLevels=False, levels=(0, 255))
        if saliency is not None:
            high = float(saliency.max()) if saliency.size else 0.0
            self.saliency_item.setImage(saliency, autoLevels=False, levels=(0.0, high if high > 0 else 1.0))
            self.saliency_item.setRect(0, 0, rgb.shape[1], rgb.shape[0])
        self.saliency_box.setEnabled(saliency is not None)
        self.name.setText(name)
        self.name.setToolTip(name)
        if shape_changed:
            self._box.autoRange(padding=0.01)

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
