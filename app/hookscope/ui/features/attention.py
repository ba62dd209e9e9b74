"""The Attention feature: what a transformer's attention module looks at, head by head, over the input image.

It reads the Attn tick's records (``hookscope.core.engine.attention``): ``show_module`` ticks Attn on the module
if it is not (as a click in the tree would) and shows the dock. The pictures are
``hookscope.core.pictures.attention.attention_picture``'s: one tile per head of the query token's attention over the
patch grid (the class token by default; prefix tokens such as registers are set aside as keys), the heads' mean,
DINO's thresholded view, rollout and its gradient-weighted form. A click on a patch of the input makes that patch the
query; *Class token* goes back. The map lies over the input as Grad-CAM's does, with an opacity slider.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import colormap_lut
from hookscope.core.pictures.attention import (
    VIEWS,
    AttentionPicture,
    attention_layers,
    attention_picture,
    on_input,
    patch_query,
    query_name,
)
from hookscope.core.pictures.cam import overlay
from hookscope.core.pictures.views import mosaic_layout, mosaic_size
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import Workspace

FEATURE_ID = "attention"
DOCK_ID = "attention"
COLORMAP = "inferno"
PROMPT = "Tick Attn on an attention module (or right-click it: Attention of …)."
QUERY_PEN = QColor(80, 220, 255)


class AttentionFeature:
    """One attention module's weights over the input image and per head; refreshed after every run."""

    id = FEATURE_ID

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.path: str | None = None
        self.query: int | None = 0  # the query token: 0 the class token, None the mean over every token
        self.picture: AttentionPicture | None = None
        self._input: np.ndarray | None = None

        self.widget = QWidget()
        self.title = QLabel(PROMPT)
        self.title.setObjectName("panelTitle")
        self.title.setWordWrap(True)
        self.module_box = QComboBox()
        self.module_box.setToolTip("The attention modules whose Attn is ticked")
        self.module_box.setMinimumContentsLength(14)
        self.module_box.textActivated.connect(self.show_module)
        self.view_box = QComboBox()
        for view, words in VIEWS.items():
            self.view_box.addItem(words, view)
        self.view_box.setToolTip("Heads: one tile per head; DINO: each head's smallest set of patches holding the "
                                 "share below; rollout: every ticked layer, multiplied (Abnar & Zuidema 2020)")  # fmt: skip
        self.view_box.currentIndexChanged.connect(self._recompute)
        self.keep = QSpinBox()
        self.keep.setRange(10, 100)
        self.keep.setValue(60)
        self.keep.setSuffix(" %")
        self.keep.setToolTip("DINO's view: the share of each head's attention the kept patches hold")
        self.keep.valueChanged.connect(self._recompute)
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(60)
        self.opacity.setToolTip("Opacity of the map over the input image")
        self.opacity.valueChanged.connect(self._redraw)
        self.query_label = QLabel("")
        self.query_label.setObjectName("muted")
        self.query_label.setWordWrap(True)
        self.class_button = QPushButton("Class token")
        self.class_button.setToolTip("Make the class token the query again (click a patch of the image for another)")
        self.class_button.clicked.connect(lambda: self.set_query(0))
        self._build_view()
        self._lay_out()
        self.dock = host.add_dock(DockSpec(DOCK_ID, "Attention", area="bottom", visible=False), self.widget)
        host.add_module_menu(self.module_entries)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.model_changed.connect(self._on_model_changed)

    def _build_view(self) -> None:
        """The input with the query patch's outline, and the tiles: one pyqtgraph view, clicked to choose a query."""
        self.view = pg.GraphicsLayoutWidget()
        self.view.setMinimumHeight(160)
        self.view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.input_box = self.view.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.input_box.setMouseEnabled(False, False)
        self.input_item = pg.ImageItem()
        self.input_box.addItem(self.input_item)
        # The query patch's outline: a pyqtgraph item (a bare QGraphicsRectItem, owned by Python and by the scene
        # alike, crashed the interpreter's exit).
        self.marker = pg.PlotCurveItem(pen=pg.mkPen(QUERY_PEN, width=2))
        self.marker.setVisible(False)
        self.input_box.addItem(self.marker)
        self.tiles_box = self.view.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.tiles_box.setMouseEnabled(False, False)
        self.tiles_item = pg.ImageItem()
        self.tiles_box.addItem(self.tiles_item)
        self.view.scene().sigMouseClicked.connect(self._on_click)

    def _lay_out(self) -> None:
        rows = QVBoxLayout()
        rows.setContentsMargins(0, 0, 0, 0)
        rows.addWidget(self.title)
        for words, field in (("Module", self.module_box), ("View", self.view_box), ("Keep", self.keep),
                             ("Opacity", self.opacity)):  # fmt: skip
            row = QHBoxLayout()
            row.addWidget(QLabel(words))
            row.addWidget(field, 1)
            rows.addLayout(row)
        query_row = QHBoxLayout()
        query_row.addWidget(self.query_label, 1)
        query_row.addWidget(self.class_button)
        rows.addLayout(query_row)
        rows.addStretch(1)
        layout = QHBoxLayout(self.widget)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(rows, 1)
        layout.addWidget(self.view, 2)

    # ---- menus and showing a module -----------------------------------------------------------------------------
    def module_entries(self, menu: QMenu, path: str) -> None:
        registry = self.workspace.registry
        support = registry.attention_modules().get(path) if registry is not None else None
        if support is not None and support.capturable:
            menu.addSeparator()
            action = menu.addAction(f"Attention of {path}")
            action.setToolTip("What this module's heads look at, over the input image")
            action.triggered.connect(lambda *_: self.show_module(path))

    def show_module(self, path: str) -> bool:
        """Show the attention of ``path``, ticking its Attn box if it is not."""
        registry = self.workspace.registry
        if registry is None:
            self.host.show_error("No model is loaded yet.")
            return False
        try:
            ticked = self.workspace.set_ticked([(path, "attention")], True)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return False
        self.path = path
        self.host.show_dock(DOCK_ID)
        self._sync_modules()
        if ticked or self.workspace.last is None:
            self.title.setText(f"Attention of {path}: waiting for the run…")
        else:
            self._recompute()
        return True

    def set_query(self, query: int | None) -> None:
        """Make token ``query`` the query (0: the class token)."""
        self.query = query
        self._recompute()

    def click_input(self, x: float, y: float) -> bool:
        """A click at pixel (x, y) of the input image: its patch becomes the query (False outside the image)."""
        if self.picture is None or self._input is None:
            return False
        height, width = self._input.shape[:2]
        query = patch_query(self.picture.layout, x, y, width, height)
        if query is None:
            return False
        self.set_query(query)
        return True

    def _on_click(self, event: object) -> None:
        position = self.input_box.mapSceneToView(event.scenePos())  # type: ignore[attr-defined]
        if self.input_box.sceneBoundingRect().contains(event.scenePos()):  # type: ignore[attr-defined]
            self.click_input(position.x(), position.y())

    # ---- the workspace's signals --------------------------------------------------------------------------------
    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self.path, self.query, self.picture = None, 0, None
        self.input_item.clear()
        self.tiles_item.clear()
        self.marker.setVisible(False)
        self.title.setText(PROMPT)
        self._sync_modules()

    def _on_run_applied(self, _outcome: RunOutcome) -> None:
        self._sync_modules()
        if self.path is not None:
            self._recompute()

    # ---- the pictures -------------------------------------------------------------------------------------------
    def _recompute(self, *_: object) -> None:
        outcome = self.workspace.last
        if self.path is None or outcome is None:
            return
        view = str(self.view_box.currentData())
        try:
            picture = attention_picture(outcome.result, self.path, view, self.query, self.keep.value() / 100)
        except HookscopeError as error:
            self.picture = None
            self.tiles_item.clear()
            self.title.setText(f"Attention of {self.path}: {error}")
            return
        self.picture, self._input, self.query = picture, outcome.input_display, picture.query
        self.title.setText(picture.caption)
        self.query_label.setText(f"Query: {query_name(picture.layout, picture.query)} (click a patch for another)")
        self._redraw()
        self.input_box.autoRange(padding=0.01)
        self.tiles_box.autoRange(padding=0.01)

    def tiles_image(self) -> np.ndarray:
        """The tiles as one uint8 mosaic (a 1-pixel gap between tiles), each tile's values 0-1 to 0-255."""
        assert self.picture is not None
        tiles = self.picture.tiles
        layout = mosaic_layout(tiles.shape[0], tiles.shape[1], tiles.shape[2])
        height, width = mosaic_size(layout)
        image = np.zeros((height, width), dtype=np.uint8)
        for index, tile in enumerate(tiles):
            row, column = divmod(index, layout.cols)
            top, left = row * (layout.tile_h + layout.pad), column * (layout.tile_w + layout.pad)
            image[top : top + layout.tile_h, left : left + layout.tile_w] = np.round(np.clip(tile, 0, 1) * 255)
        return image

    def _redraw(self, *_: object) -> None:
        picture, image = self.picture, self._input
        if picture is None or image is None:
            return
        lut = colormap_lut(COLORMAP)
        height, width = image.shape[:2]
        blended = overlay(image, on_input(picture.overlay, height, width), self.opacity.value() / 100.0, lut)
        self.input_item.setImage(blended, autoLevels=False, levels=(0, 255))
        self.tiles_item.setImage(lut[self.tiles_image()], autoLevels=False, levels=(0, 255))
        layout = picture.layout
        if picture.query is not None and picture.query >= layout.prefix:
            row, column = divmod(picture.query - layout.prefix, layout.width)
            cell_h, cell_w = height / layout.height, width / layout.width
            left, top = column * cell_w, row * cell_h
            xs = np.array([left, left + cell_w, left + cell_w, left, left])
            ys = np.array([top, top, top + cell_h, top + cell_h, top])
            self.marker.setData(xs, ys)
            self.marker.setVisible(True)
        else:
            self.marker.setVisible(False)

    def _sync_modules(self) -> None:
        """The module box lists the attention modules the last run recorded, and the current one."""
        outcome = self.workspace.last
        paths = [layer.key for layer in attention_layers(outcome.result)] if outcome is not None else []
        if self.path is not None and self.path not in paths:
            paths.append(self.path)
        self.module_box.blockSignals(True)
        self.module_box.clear()
        self.module_box.addItems(list(dict.fromkeys(paths)))
        if self.path is not None:
            self.module_box.setCurrentText(self.path)
        self.module_box.blockSignals(False)
