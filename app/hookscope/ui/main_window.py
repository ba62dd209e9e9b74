"""The Hookscope window: a shell around the ``Workspace``.

The shell holds the docks, builds the menus from action specs, routes drops, saves and restores the layout, and
shows the workspace's messages. Its own views (module tree, panels, input, predictions, channel view) follow the
workspace's signals; every other feature (``FEATURES``) is built from the workspace and this window as its
``Host`` and plugs in docks, actions, context-menu entries and rows without the window knowing what they do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import numpy as np
import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)
from PIL import Image
from PySide6.QtCore import QByteArray, QPoint, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QCloseEvent,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QScrollArea,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.resources import sample_image
from hookscope.core.engine.devices import available_devices, unavailable_devices
from hookscope.core.engine.objectives import parse_target
from hookscope.core.models.catalogue import DEFAULT_MODEL, catalogue
from hookscope.core.pictures.compare import prediction_changes
from hookscope.core.pictures.panels import KIND_LABELS, PanelPicture
from hookscope.ui.actions.builtin import builtin_actions
from hookscope.ui.actions.specs import ActionSpec, MenuBuilder
from hookscope.ui.features import FEATURES
from hookscope.ui.host import ChannelListener, DockSpec, DropHandler, ModuleMenuEntries, TileMenuEntries
from hookscope.ui.qimages import qimage_array
from hookscope.ui.state.image_queue import push_recent
from hookscope.ui.state.requests import ImageSource, LoadOutcome, RunOutcome
from hookscope.ui.state.settings import app_settings, read_list
from hookscope.ui.state.workspace import CHECK_KINDS, HeldStart, RunFailure, Workspace
from hookscope.ui.theme import configure_pyqtgraph
from hookscope.ui.widgets.channel_view import ChannelView
from hookscope.ui.widgets.detection_overlay import boxes_of
from hookscope.ui.widgets.input_panel import InputPanel
from hookscope.ui.widgets.model_chooser import ModelChooser
from hookscope.ui.widgets.module_tree import ModuleTreeModel
from hookscope.ui.widgets.module_tree_view import ModuleTreeView
from hookscope.ui.widgets.panel_area import PanelArea
from hookscope.ui.widgets.predictions import PredictionsPanel
from hookscope.ui.widgets.segmentation_legend import class_colours, mask_data, mask_lut, most_common_class

AREAS = {
    "left": Qt.DockWidgetArea.LeftDockWidgetArea,
    "right": Qt.DockWidgetArea.RightDockWidgetArea,
    "bottom": Qt.DockWidgetArea.BottomDockWidgetArea,
}
TICK_KINDS = ("forward", "pre", "tensor", "grad_input")  # the tree's Act, In, Grad and Grad in columns
# The cards keep at least this share of the window's height, and never less than CARD_MIN_HEIGHT px, whatever opens
# below them: at 1024x700 the Channel view and the Top images once left them 190 px.
CARD_SHARE, CARD_MIN_HEIGHT = 0.4, 320
# The side views (Channel, Top images, Visualize, the lessons: every "bottom" dock) share one tab stack under the
# cards. Layouts saved before that (stacked docks, lessons in the right column) are not restored: saveState's version.
SIDE_AREA = "bottom"
STATE_VERSION = 2
BUSY_BAR_DELAY_MS = 300  # the busy bar shows for work lasting longer than this
FRAME_LINES_EVERY_S = 1.0  # a playing video's run renews the timings line at most this often


def qimage_to_pil(image: QImage) -> Image.Image:
    """Clipboard or dropped pixels as an RGB PIL image."""
    return Image.fromarray(qimage_array(image, alpha=False), mode="RGB")


class MainWindow(QMainWindow):
    """The application window. ``run_finished`` fires after every view has shown a run."""

    run_finished = Signal()
    error_shown = Signal(str)
    closed = Signal()  # the window closed: its work stopped (or was left to end by itself) and its hooks are gone

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        weights: str = "default",
        device: str = "cpu",
        image: str | None = None,
        checks: list[str] | None = None,
        remember: bool = True,
        parent: QWidget | None = None,
        check_kinds: tuple[str, ...] = CHECK_KINDS,
        held: HeldStart | None = None,
    ) -> None:
        """``held``: a model the caller holds in Python (``hookscope.Viewer``), its first image, ticks and image
        list, shown instead of the catalogue's ``model`` and ``image``."""
        super().__init__(parent)
        configure_pyqtgraph()
        self.setWindowTitle("Hookscope")
        self.setAcceptDrops(True)
        self.remembers = remember
        self.show_dialogs = True
        self.last_error = ""
        self.last_timings: dict[str, float] = {}
        self._frame_lines_at = 0.0  # when the timings line last showed a video frame's run
        self._error_box: QMessageBox | None = None
        self._closing = False
        self._docks: dict[str, QDockWidget] = {}
        self._specs: dict[str, DockSpec] = {}
        self._module_menus: list[ModuleMenuEntries] = []
        self._tile_menus: list[TileMenuEntries] = []
        self._drop_handlers: list[DropHandler] = []
        self._channel_listeners: list[ChannelListener] = []
        self._paste_count = 0
        self._side_views_sized = False
        self._docks_fitted = False
        self._fitted_size: QSize | None = None  # the size _fit_into_screen chose, until the first show

        self.workspace = space = Workspace(weights, device, checks, self, check_kinds)
        self._build_views()
        self._build_toolbar_and_menus()
        self._connect_workspace()
        self.features: dict[str, object] = {}
        for feature_id, feature in FEATURES:
            self.features[feature_id] = feature(space, self)
        self.resize(1560, 980)
        self._layout_restored = remember and self._restore_layout()
        self._fit_into_screen()
        if held is not None:
            space.start_held(held)
        else:
            space.start(model, image)

    # ============================================================================================ building ====
    def _build_views(self) -> None:
        space = self.workspace
        self._notices = QVBoxLayout()
        self._notices.setContentsMargins(0, 0, 0, 0)
        self.tree_model = ModuleTreeModel(self)
        self.tree_model.tick_requested.connect(space.set_ticked)  # direct: the hook is on when setData returns
        self.panel_area = PanelArea(self.tree_model.order_of, host=self)
        self.panel_area.close_requested.connect(lambda path, kind: space.tick(path, kind, False))
        self.panel_area.channel_clicked.connect(self.open_channel)
        self.panel_area.channel_menu_requested.connect(self._tile_menu)
        self.panel_area.settings_changed.connect(space.set_panel_settings)
        self.panel_area.message.connect(
            lambda text, error: self.show_error(text) if error else self.statusBar().showMessage(text, 6000)
        )
        space.attach_view(self.panel_area.view_size, self._hidden_panels)
        self.panel_area.pictures_wanted.connect(space.prepare_pictures)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(4, 4, 4, 0)
        layout.setSpacing(4)
        layout.addLayout(self._notices)
        layout.addWidget(self.panel_area, 1)
        self.setCentralWidget(central)
        self._keep_card_room()

        self.tree_view = ModuleTreeView(self.tree_model)
        self.tree_view.menu_requested.connect(self._module_menu)
        self.add_dock(DockSpec("modules", "Modules", "left", scroll=False), self.tree_view)
        self.input_panel = InputPanel()
        self.input_panel.image_selected.connect(space.select_image)
        self.input_panel.step_requested.connect(space.step_image)
        # "Input": a tab title that stays whole beside Grad-CAM's in a 230 px column (the panel says "as the model
        # sees it" itself).
        self.add_dock(DockSpec("input", "Input", "right"), self.input_panel)
        self.predictions = PredictionsPanel()
        self.predictions.target_chosen.connect(space.set_target)
        # Segmentation, detection and embedding models: the targets their views offer (issue 25).
        self.input_panel.region_dragged.connect(self._on_region_dragged)
        self.input_panel.box_chosen.connect(lambda number: space.set_target(f"box:{number}"))
        self.predictions.detection.threshold_changed.connect(self._on_threshold_changed)
        self.predictions.similarity.image_b_chosen.connect(self._similarity_to_image_b)
        self.add_dock(DockSpec("predictions", "Predictions", "right", below="input"), self.predictions)
        self.channel_view = ChannelView()
        self.add_dock(DockSpec("channel", "Channel", "bottom", visible=False, scroll=False), self.channel_view)
        # The side columns keep their full height; the channel view opens under the panels only, so opening it
        # takes height from the panels (which scroll) and never squeezes the input or the predictions.
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)

    def _build_toolbar_and_menus(self) -> None:
        space = self.workspace
        bar = self.addToolBar("Model")
        bar.setObjectName("modelToolbar")
        bar.setMovable(False)
        self.chooser = ModelChooser(catalogue(include_timm=True), available_devices(), unavailable_devices())
        self.chooser.model_chosen.connect(self._on_model_chosen)
        self.chooser.weights_chosen.connect(space.set_weights)
        self.chooser.device_chosen.connect(space.set_device)
        self.chooser.show_weights(space.weights)
        self.chooser.show_device(space.device)
        bar.addWidget(self.chooser)
        bar.addSeparator()
        self.menus = MenuBuilder(self, bar)
        self.menus.add(builtin_actions(self))
        for dock_id in ("modules", "input", "predictions", "channel"):
            self._add_dock_toggle(dock_id)
        self.menus.actions["file.previous_image"].setEnabled(False)  # no image list yet
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setFixedWidth(70)
        self.busy_bar.setVisible(False)
        self.timing_label = QLabel("")
        self.timing_label.setToolTip("Last run: forward and backward pass, then preparing and drawing the panels")
        self.statusBar().addPermanentWidget(self.busy_bar)
        self.statusBar().addPermanentWidget(self.timing_label)

    def _connect_workspace(self) -> None:
        space = self.workspace
        space.model_changed.connect(self._on_model_changed)
        space.hooks_changed.connect(self._on_hooks_changed)
        space.run_applied.connect(self._on_run_applied)
        space.failed.connect(self._on_failed)
        space.pictures_ready.connect(lambda ready: self.panel_area.show_pictures(ready.pictures, ready.views))
        space.image_list_changed.connect(self._on_image_list_changed)
        space.device_changed.connect(self.chooser.show_device)
        space.weights_changed.connect(lambda *_: self._sync_chooser())
        space.panel_settings_changed.connect(self._on_panel_settings)
        # The busy bar comes when work lasts (BUSY_BAR_DELAY_MS) and goes at once: a video's frames, one run after
        # another, would blink it (a relayout and repaint of the status bar each frame, on the GUI thread).
        self._busy_bar_timer = QTimer(self)
        self._busy_bar_timer.setSingleShot(True)
        self._busy_bar_timer.setInterval(BUSY_BAR_DELAY_MS)
        self._busy_bar_timer.timeout.connect(lambda: self.busy_bar.setVisible(not self._closing and space.busy))
        space.busy_changed.connect(self._on_busy_changed)
        space.status.connect(lambda text, ms: self.statusBar().showMessage(text, ms))
        space.error.connect(self.show_error)

    def _on_busy_changed(self, *_: object) -> None:
        if self._closing or not self.workspace.busy:
            self._busy_bar_timer.stop()
            self.busy_bar.setVisible(False)
        elif not self.busy_bar.isVisible() and not self._busy_bar_timer.isActive():
            self._busy_bar_timer.start()

    # =============================================================================================== Host ====
    def add_dock(self, spec: DockSpec, widget: QWidget) -> QDockWidget:
        dock = QDockWidget(spec.title, self)
        dock.setObjectName(spec.id)
        if spec.scroll:
            frame = QScrollArea()
            frame.setWidgetResizable(True)
            frame.setFrameShape(QScrollArea.Shape.NoFrame)
            frame.setWidget(widget)
            widget = frame
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.addDockWidget(AREAS[spec.area], dock)
        side_stack = next((self._docks[i] for i, other in self._specs.items() if other.area == SIDE_AREA), None)
        if spec.tab_with in self._docks:
            self.tabifyDockWidget(self._docks[spec.tab_with], dock)
        elif spec.area == SIDE_AREA and side_stack is not None:
            self.tabifyDockWidget(side_stack, dock)  # one tab stack under the cards: side views never stack up
        elif spec.below in self._docks:
            self.splitDockWidget(self._docks[spec.below], dock, Qt.Orientation.Vertical)
        self._docks[spec.id] = dock
        self._specs[spec.id] = spec
        dock.setVisible(spec.visible)
        if spec.tab_with in self._docks and not spec.raised:
            self._docks[spec.tab_with].raise_()
        if hasattr(self, "menus") and spec.id not in ("modules", "input", "predictions", "channel"):
            self._add_dock_toggle(spec.id)
        return dock

    def remove_dock(self, dock_id: str) -> None:
        dock = self._docks.pop(dock_id, None)
        if dock is None:
            return
        self._specs.pop(dock_id, None)
        self.menus.remove(f"view.dock.{dock_id}")
        self.removeDockWidget(dock)
        dock.deleteLater()

    def _add_dock_toggle(self, dock_id: str) -> None:
        """Every dock can be shown again from View (closing one never loses it)."""
        self.menus.add_existing(
            ActionSpec(
                f"view.dock.{dock_id}",
                self._docks[dock_id].windowTitle(),
                "View",
                group=90,
                order=len(self.menus.actions),
            ),
            self._docks[dock_id].toggleViewAction(),
        )

    def dock(self, dock_id: str) -> QDockWidget:
        return self._docks[dock_id]

    def show_dock(self, dock_id: str) -> None:
        dock = self._docks[dock_id]
        dock.setVisible(True)
        dock.raise_()
        if self._specs[dock_id].area == SIDE_AREA and not dock.isFloating():
            self._size_side_views(dock)

    def add_actions(self, specs: Iterable[ActionSpec]) -> None:
        self.menus.add(specs)

    def add_module_menu(self, entries: ModuleMenuEntries) -> None:
        self._module_menus.append(entries)

    def add_tile_menu(self, entries: TileMenuEntries) -> None:
        self._tile_menus.append(entries)

    def add_input_row(self, widget: QWidget) -> None:
        self.input_panel.add_row(widget)

    def add_notice_row(self, widget: QWidget) -> None:
        self._notices.addWidget(widget)

    def add_drop_handler(self, handler: DropHandler) -> None:
        self._drop_handlers.append(handler)

    def add_channel_listener(self, listener: ChannelListener) -> None:
        self._channel_listeners.append(listener)

    def add_channel_row(self, widget: QWidget) -> None:
        self.channel_view.add_row(widget)

    def show_error(self, message: str, dialog: bool = True) -> None:
        """Every user-visible error goes through here: status bar, ``last_error`` and a non-blocking dialog."""
        self.last_error = message
        self.statusBar().showMessage(message, 15000)
        if dialog and self.show_dialogs and not self._closing:
            if self._error_box is None:
                self._error_box = QMessageBox(QMessageBox.Icon.Warning, "Hookscope", "", parent=self)
            self._error_box.setText(message)
            self._error_box.open()
        self.error_shown.emit(message)

    def focus_filter(self) -> None:
        self.tree_view.focus_filter()

    def show_status(self, message: str, msecs: int = 5000) -> None:
        self.statusBar().showMessage(message, msecs)

    def dialog_parent(self) -> QWidget:
        return self

    # ========================================================================================== the views ====
    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        space = self.workspace
        assert space.registry is not None  # made with the model
        self.tree_model.set_model(space.nodes, space.registry, outcome.loaded.name)
        self.panel_area.clear()
        self._docks["channel"].setVisible(False)
        # Nothing of the old model's run stays on screen (its mask, boxes, region, saliency, classes, target line,
        # timings) until the new model's run comes; the image itself is the user's and stays.
        loaded = outcome.loaded
        self.input_panel.clear_results()
        self.predictions.clear_results(loaded.task, f"Gradient target: waiting for {loaded.display_name}'s first run…")
        self.timing_label.setText("")
        self._sync_chooser()
        self._update_title()

    def _on_failed(self, failure: RunFailure) -> None:
        """A new model's first run failed: the views it left empty say why (the old model's results are gone)."""
        space = self.workspace
        if not failure.load and space.last is None and space.loaded is not None:
            self.predictions.show_message(f"No results of {space.loaded.display_name}: {failure.message}")

    def _on_hooks_changed(self, changes: list[tuple[str, str, bool]]) -> None:
        self.tree_model.show_ticks(changes)
        added = [(path, kind) for path, kind, ticked in changes if ticked]
        self.panel_area.ensure_pairs(added, self.workspace.settings_for)
        for path, kind, ticked in changes:
            if not ticked:
                self.panel_area.remove_pair(path, kind)
                shown = self.channel_view.picture
                if shown is not None and (shown.path, shown.kind) == (path, kind):
                    self._docks["channel"].setVisible(False)
        if added and len(added) == len(changes) and self.workspace.last is None:
            self.tree_view.expand_to(path for path, _ in added)

    def _show_task(self, outcome: RunOutcome) -> None:
        """What a segmentation, detection or embedding model's run shows: the mask and its legend, the boxes and
        their count, the similarity score; and the gradient target's class, region or box framed."""
        space = self.workspace
        result = outcome.result
        loaded = space.loaded
        # The output says segmentation or detection; an embedding is a vector as class scores are: the model says.
        task = result.task if result.task != "classification" or loaded is None else loaded.task
        categories = space.loaded.categories if space.loaded else None
        objective = parse_target(space.target)  # the words were checked when the target was set
        self.predictions.show_task(task)
        segmentation = result.segmentation if task == "segmentation" else None
        classes = np.asarray(segmentation) if segmentation is not None else None
        if classes is not None:
            count = max(len(categories or ()), int(classes.max()) + 1 if classes.size else 1)
            self.input_panel.show_mask(mask_data(classes), mask_lut(count))
            # the run's class: the one named, or the one top1 chose
            self.predictions.legend.show_mask(classes, categories, class_colours(count), result.target_index)
            self.predictions.class_box.setRange(0, count - 1)
        else:
            self.input_panel.show_mask(None)
        self.input_panel.set_regions_enabled(classes is not None)
        self.input_panel.show_region(objective.region if classes is not None else None)
        boxes = boxes_of(result.detections) if task == "detection" else []
        self.input_panel.detections.show_boxes(boxes, objective.index if objective.kind == "box" else None)
        self.predictions.detection.show_count(len(self.input_panel.detections.shown), len(boxes))
        if task == "embedding":
            image_b = space.image_b
            self.predictions.similarity.configure(
                image_b is not None and bool(image_b.path), loaded is not None and loaded.text_embedder is not None
            )
            self.predictions.similarity.show_score(self._similarity_text(outcome))

    def _similarity_text(self, outcome: RunOutcome) -> str:
        """The cosine similarity the gradients are of, when the target is one: its value and what to."""
        result = outcome.result
        target = str(self.workspace.target)
        if target.startswith(("similar:", "text:")) and result.objective_value is not None:
            return f"Cosine similarity: {result.objective_value:.3f}"
        return ""

    def _on_threshold_changed(self, threshold: float) -> None:
        overlay = self.input_panel.detections
        overlay.set_threshold(threshold)
        self.predictions.detection.show_count(len(overlay.shown), len(overlay.boxes))

    def _on_region_dragged(self, region: tuple[int, int, int, int]) -> None:
        """A rectangle dragged on a segmentation model's input: the targeted class over it (the class most of its
        pixels are predicted as, when no class is targeted yet)."""
        space = self.workspace
        last = space.last
        classes = last.result.segmentation if last is not None else None
        objective = parse_target(space.target)
        chosen = objective.index if objective.kind in ("class", "region") else None
        if chosen is None and classes is not None:
            chosen = most_common_class(np.asarray(classes), region)
        if chosen is None:
            self.show_error("Drag the rectangle over the image: it holds no predicted pixel.", dialog=False)
            return
        x0, y0, x1, y1 = region
        space.set_target(f"class:{chosen}@{x0},{y0},{x1},{y1}")

    def _similarity_to_image_b(self) -> None:
        image_b = self.workspace.image_b
        if image_b is None or not image_b.path:
            self.show_error(
                "Open an image B first (File > Open image B…): its embedding is compared with A's.", dialog=False
            )
            return
        self.workspace.set_target(f"similar:{image_b.path}")

    def _on_image_list_changed(self) -> None:
        queue = self.workspace.queue
        self.input_panel.set_list(queue.paths, queue.index)
        # Nothing before the first image: Previous (and Page Up) is off there rather than jumping to the last one.
        self.menus.actions["file.previous_image"].setEnabled(bool(queue.index))

    def _on_panel_settings(self, changes: list) -> None:
        for path, kind, settings in changes:
            for panel in self.panel_area.panels_of(path, kind):
                panel.apply_settings(settings)

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        start = time.perf_counter()
        space = self.workspace
        result = outcome.result
        self.panel_area.show_results(
            outcome.pictures,
            space.ticked_pairs(),
            space.missing_reason,
            space.settings_for,
            views=outcome.comparison.views if outcome.comparison is not None else None,
            deferred=outcome.deferred,
            ahead=self._drawn_ahead(outcome.image),
        )
        self.input_panel.show_input(outcome.input_display, outcome.saliency, outcome.image.name)
        target_text = result.target
        categories = space.loaded.categories if space.loaded else None
        # a classifier's words give the index only (a segmentation model's name the class; a detector's index is a box's)
        if result.task == "classification" and result.target_index is not None and categories:
            target_text += f": {categories[result.target_index]}"
        classes = int(result.scores.shape[1]) if result.scores is not None else None
        self.predictions.show_predictions(result.top5, result.target_index, target_text, classes)
        edits = space.registry.enabled_edits() if space.registry is not None else []
        self.predictions.show_changes(prediction_changes(result) if edits else [])
        comparison = outcome.comparison
        self.predictions.show_side_by_side(
            (outcome.image.name, result.top5, outcome.image_b.name, comparison.result.top5)
            if comparison is not None and outcome.image_b is not None
            else None
        )
        self._show_task(outcome)
        self.tree_model.set_survey(result.survey)
        if self._docks["channel"].isVisible() and not self.channel_view.refresh(
            outcome.pictures, outcome.input_display
        ):
            self._docks["channel"].setVisible(False)
        if outcome.image.path and self.remembers:
            self._push_recent(outcome.image.path)
        self._update_title()
        apply_ms = (time.perf_counter() - start) * 1000
        self.last_timings = t = {**outcome.timings, "apply_ms": apply_ms}
        if outcome.image.frame:  # a playing video: its feature keeps the status line; timings at a reading pace
            if time.monotonic() - self._frame_lines_at < FRAME_LINES_EVERY_S:
                self.run_finished.emit()
                return
            self._frame_lines_at = time.monotonic()
        self.timing_label.setText(
            f"{result.device} · forward {t['forward_ms']:.0f} ms · backward "
            f"{t['backward_ms']:.0f} ms · render {t['prepare_ms'] + apply_ms:.0f} ms"
        )
        self.timing_label.setToolTip(
            f"read + preprocess {t['read_ms']:.0f} ms\nforward {t['forward_ms']:.1f} ms\n"
            f"backward {t['backward_ms']:.1f} ms\nprepare pictures (worker) {t['prepare_ms']:.1f} ms\n"
            f"update panels (GUI) {apply_ms:.1f} ms\n{len(result.records)} records"
        )
        line = f"{outcome.image.name}: {len(result.records)} records"
        model_message = space.take_model_message()
        if outcome.image.frame and not model_message:
            self.run_finished.emit()
            return
        if model_message:
            line = f"{model_message} · {line}"
        self.statusBar().showMessage(line, 8000)
        self.run_finished.emit()

    def _hidden_panels(self) -> frozenset[tuple[str, str]]:
        """The panels a run may leave undrawn until they scroll in: those out of view, but not the one the Channel
        view shows (it follows every run). For a single image, those more than a page away, so that scrolling finds
        the next page drawn; for a playing video's frame, every panel not in view: the next frame comes before a
        person scrolls, and preparing the page below each frame took half the window's picture work."""
        hidden = self.panel_area.hidden_idents(ahead=self._drawn_ahead(self.workspace.wanted_image))
        shown = self.channel_view.picture if self._docks["channel"].isVisible() else None
        return hidden - {(shown.kind, shown.key)} if shown is not None else hidden

    @staticmethod
    def _drawn_ahead(image: ImageSource | None) -> float:
        """How far beyond the view, in viewport heights, a run of ``image`` draws its panels (``_hidden_panels``)."""
        return 0.0 if image is not None and image.frame else 1.0

    def open_channel(self, picture: PanelPicture, channel: int) -> None:
        """The channel view for one tile: the map large, its histogram and statistics, the overlay."""
        last = self.workspace.last
        self.channel_view.show_channel(picture, channel, last.input_display if last is not None else None)
        self.show_dock("channel")
        # Then the features: a view of theirs that follows the channel (a scan's Top images, tabbed with the Channel
        # view) comes to the front when it has something to show, rather than staying behind the map it completes.
        for listener in self._channel_listeners:
            listener(picture, channel)

    def card_room(self) -> int:
        """The least height the card area keeps: 40% of the window, at least 320 px, in a window tall enough."""
        height = self.height()
        return min(max(CARD_MIN_HEIGHT, int(height * CARD_SHARE)), max(0, height - 300))

    def _keep_card_room(self) -> None:
        # A minimum on the card area is what QMainWindow's own layout keeps when docks open, are restored or
        # their separator is dragged: the side views take the rest, never the cards' room.
        if self.panel_area.minimumHeight() != self.card_room():
            self.panel_area.setMinimumHeight(self.card_room())

    def _size_side_views(self, dock: QDockWidget) -> None:
        """The side views' tab stack opens once at a third of the window (240-420 px); later the user's height."""
        if self._side_views_sized:
            return
        self._side_views_sized = True
        self.resizeDocks([dock], [min(max(240, self.height() // 3), 420)], Qt.Orientation.Vertical)

    def _module_menu(self, path: str, position: QPoint) -> None:
        menu = QMenu(self)
        model = self.tree_model
        if path != "\0":
            node = model.nodes[model.order_of(path)]
            paths = model.paths_of_type(node.type_name)
            for kind in TICK_KINDS:
                pairs = [(p, kind) for p in paths]
                menu.addAction(f"Tick {KIND_LABELS[kind]} of every {node.type_name} ({len(paths)})").triggered.connect(
                    lambda *_, pairs=pairs: self.workspace.set_ticked(pairs, True)
                )
            every = [(p, k) for p in paths for k in TICK_KINDS]
            menu.addAction(f"Untick every {node.type_name}").triggered.connect(
                lambda *_, pairs=every: self.workspace.set_ticked(pairs, False)
            )
            for entries in self._module_menus:
                menu.addSeparator()
                entries(menu, path)
            menu.addSeparator()
        menu.addAction("Untick all").triggered.connect(self.workspace.untick_all)
        menu.addAction("Expand all").triggered.connect(self.tree_view.tree.expandAll)
        menu.addAction("Collapse all").triggered.connect(self.tree_view.tree.collapseAll)
        menu.popup(position)

    def _tile_menu(self, picture: PanelPicture, channel: int, position: QPoint) -> None:
        menu = QMenu(self)
        for entries in self._tile_menus:
            entries(menu, picture, channel)
        if not menu.isEmpty():
            menu.popup(position)

    def _on_model_chosen(self, name: str) -> None:
        loaded = self.workspace.loaded
        if name.startswith("hf:"):  # a Hugging Face Hub repo: fetched (with progress) and checked by the load
            if loaded is None or name != loaded.name:
                self.workspace.ask_hub_model(name)
        elif name not in catalogue(include_timm=True):
            self.show_error(f"Unknown model '{name}': choose one from the list.", dialog=False)
            self._sync_chooser()
        elif loaded is None or name != loaded.name:
            self.workspace.set_model(name)

    def _sync_chooser(self) -> None:
        loaded = self.workspace.loaded
        if loaded is not None:
            self.chooser.show_model(loaded.name)
        self.chooser.show_weights(self.workspace.weights, getattr(loaded, "weights_text", "") if loaded else "")

    def _update_title(self) -> None:
        """ "model — image — Hookscope": the application's name once, last. Qt appends the application's display
        name to a title that does not already end with it, which is how the name once appeared twice."""
        space = self.workspace
        parts = []
        if space.loaded is not None:  # "resnet18 (untrained: random weights, seed 0)"; the caller's own object never
            parts.append(space.loaded.title)
        if space.image is not None:
            parts.append(space.image.name)
        self.setWindowTitle(" — ".join([*parts, "Hookscope"]))

    # ============================================================================================ images ====
    def paste_image(self) -> None:
        """Paste image files (copied in a file manager) or pixels (a screenshot, an image copied in a browser)."""
        mime = QApplication.clipboard().mimeData()
        if mime is not None and mime.hasUrls():
            paths = [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]
            if paths:
                self.open_files(paths)
                return
        if mime is not None and mime.hasImage():
            image = QApplication.clipboard().image()
            if not image.isNull():
                self._open_pixels("clipboard image", image)
                return
        self.show_error("The clipboard holds no image and no image file.", dialog=False)

    def _open_pixels(self, what: str, image: QImage) -> None:
        self._paste_count += 1
        self.workspace.request_image(ImageSource(f"{what} {self._paste_count}", None, qimage_to_pil(image)))

    def open_files(self, paths: list[str]) -> None:
        """Files dropped or pasted: model and session files go to the features that open them, images to A."""
        rest = list(paths)
        for handler in self._drop_handlers:
            if not rest:
                return
            rest = handler(rest)
        if rest:
            self.workspace.open_paths(rest)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        mime = event.mimeData()
        if mime.hasUrls():
            paths = [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]
            if paths:
                self.open_files(paths)
            else:
                self.show_error("Only files on this computer can be dropped (not web links).")
            event.acceptProposedAction()
        elif mime.hasImage():
            self._open_pixels("dropped image", QImage(mime.imageData()))
            event.acceptProposedAction()

    # ========================================================================================== settings ====
    def _push_recent(self, path: str) -> None:
        if os.path.abspath(path) == os.path.abspath(sample_image()):
            return  # the bundled sample lives inside the installation: never a recent file that goes stale
        settings = app_settings()
        settings.setValue("recent_files", push_recent(read_list(settings, "recent_files"), path))

    def recent_files(self) -> list[str]:
        return read_list(app_settings(), "recent_files") if self.remembers else []

    def _restore_layout(self) -> bool:
        settings = app_settings()
        geometry, state = settings.value("window/geometry"), settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        restored = isinstance(state, QByteArray) and self.restoreState(state, STATE_VERSION)
        for dock_id, spec in self._specs.items():
            if not spec.visible:  # shown on demand, empty at a start (Channel, Top images, Visualize…): not restored
                self._docks[dock_id].setVisible(False)
        return bool(restored)

    def _fit_into_screen(self) -> None:
        """The window with its frame no larger than the screen's free area, and on it: the default size, or one
        saved on a larger monitor, would otherwise reach past a laptop's screen (Windows, and X11 without a window
        manager, leave it so). Before the frame is known, a title bar's height is kept free for it, as Qt's own
        restoreGeometry does; once shown, the real frame."""
        screen = self.screen()
        if screen is None:
            return
        area = screen.availableGeometry()
        frame = self.frameGeometry()
        extra = QSize(frame.width() - self.width(), frame.height() - self.height())
        if extra.isNull():  # not shown yet
            extra = QSize(0, self.style().pixelMetric(QStyle.PixelMetric.PM_TitleBarHeight))
        room = QSize(max(1, area.width() - extra.width()), max(1, area.height() - extra.height()))
        size = self.size().boundedTo(room)
        if size != self.size():
            self.resize(size)
        self._fitted_size = size
        frame = QRect(self.frameGeometry().topLeft(), size + extra)
        if not area.contains(frame):  # restored where another monitor was: moved onto this one
            self.move(
                min(max(frame.x(), area.left()), area.left() + area.width() - frame.width()),
                min(max(frame.y(), area.top()), area.top() + area.height() - frame.height()),
            )

    def fit_docks(self) -> None:
        """Side columns in proportion to the window, so the panels keep most of a laptop screen: at 1024 px the
        panel area keeps about 530 px (two panels side by side), at 1920 px about 1240."""
        width = self.width()
        left = int(min(max(width * 0.2, 240), 400))
        right = int(min(max(width * 0.2, 230), 380))
        self.resizeDocks([self._docks["modules"], self._docks["input"]], [left, right], Qt.Orientation.Horizontal)
        height = self.height()
        self.resizeDocks(
            [self._docks["input"], self._docks["predictions"]],
            [int(height * 0.6), int(height * 0.4)],
            Qt.Orientation.Vertical,
        )
        below = [
            dock
            for dock_id, dock in self._docks.items()
            if dock_id != "modules"
            and self.dockWidgetArea(dock) == Qt.DockWidgetArea.LeftDockWidgetArea
            and not dock.isFloating()
        ]
        if below:  # the module tree keeps most of the left column; what sits under it (interventions) the rest
            self.resizeDocks(
                [self._docks["modules"], below[0]], [int(height * 0.62), int(height * 0.38)], Qt.Orientation.Vertical
            )

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._fitted_size is not None:
            if self.size() == self._fitted_size:  # again, now that the frame is known (a size set since stays)
                self._fit_into_screen()
            self._fitted_size = None
        if not self._layout_restored and not self._docks_fitted:
            self._docks_fitted = True
            self.fit_docks()

    def resizeEvent(self, event: QResizeEvent) -> None:
        self._keep_card_room()
        super().resizeEvent(event)
        if self._docks_fitted and not self._layout_restored and event.oldSize().width() > 0:
            self.fit_docks()  # until the user has a saved layout of their own

    def save_screenshot(self, path: str) -> bool:
        """The window as the screen shows it: on a real display (X11, Wayland, Windows, macOS) the screen's own
        pixels under the window and its frame, read back from the display server (``grab()`` re-renders each
        widget on its own, and would hide a paint that went wrong on the screen); offscreen, the rendering."""
        if QGuiApplication.platformName() in ("offscreen", "minimal"):
            return self.grab().save(path)
        frame = self.frameGeometry()
        screen = self.screen()
        origin = screen.geometry().topLeft()
        return screen.grabWindow(0, frame.x() - origin.x(), frame.y() - origin.y(), frame.width(), frame.height()).save(
            path
        )

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop every feature's background work (the hooks they registered with ``Workspace.on_shutdown``), cancel
        and wait a bounded time for the workers, remove every hook."""
        if self._closing:
            return
        self._closing = True
        self.workspace.shutdown()
        if self._error_box is not None:
            self._error_box.close()
        if self.remembers:
            settings = app_settings()
            settings.setValue("window/geometry", self.saveGeometry())
            settings.setValue("window/state", self.saveState(STATE_VERSION))
        self.closed.emit()
