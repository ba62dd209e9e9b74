"""The Hookscope window: module tree with live hooks, record panels, input, predictions, channel view.

State lives in plain objects (the ``HookRegistry`` for ticks, ``ImageQueue`` for images); the window wires them
to views. Every change that makes the shown results out of date (a tick, an image, a target, a device) bumps a
generation number; a run carries the number it was started with, and its results are applied only if no newer
change happened meanwhile, so a superseded run never mixes into the panels.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np
import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)
from PIL import Image
from PySide6.QtCore import QByteArray, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QImage,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QTreeView,
    QVBoxLayout,
    QWidget,
)
from superqt import QSearchableComboBox

from app.core.capture import RunCancelled
from app.core.devices import available_devices
from app.core.errors import DeviceError, HookscopeError, ImageError
from app.core.hooks import HookRegistry
from app.core.images import IMAGE_SUFFIXES
from app.core.models import DEFAULT_MODEL, LoadedModel, catalogue
from app.core.pictures import KIND_LABELS, SCALINGS, PanelPicture, PanelSettings
from app.core.resources import COLORMAPS, sample_image
from app.core.tree import NOT_RUN_REASON, ModuleInfo
from app.ui.dialogs.about import show_about
from app.ui.features.file_features import install_file_features, open_dropped_files
from app.ui.features.hook_tools import install_hook_tools
from app.ui.features.open_model import execute_load_with
from app.ui.state.image_queue import ImageQueue, push_recent
from app.ui.state.requests import (
    ImageSource,
    LoadOutcome,
    LoadRequest,
    RunOutcome,
    RunRequest,
    default_checks,
    execute_load,
    execute_run,
)
from app.ui.state.settings import app_settings, read_list
from app.ui.state.worker import Job, JobRunner
from app.ui.theme import configure_pyqtgraph
from app.ui.widgets.channel_view import ChannelView
from app.ui.widgets.input_panel import InputPanel
from app.ui.widgets.module_tree import (
    ACTIVATIONS,
    GRADIENTS,
    INPUTS,
    KIND_COLUMNS,
    NAME,
    PARAMS,
    SHAPE,
    TYPE,
    ModuleFilterProxy,
    ModuleTreeModel,
)
from app.ui.widgets.panel_area import PanelArea
from app.ui.widgets.predictions import PredictionsPanel

RUN_DEBOUNCE_MS = 50
CHECK_KINDS = ("forward", "backward")  # what a default or --check tick hooks: activations and gradients
WEIGHT_CHOICES = {"default": "Pretrained (torch hub cache)", "none": "Untrained (random, seed 0)"}
HOOKS_HELP = """<b>The hooks behind the ticks</b><br><br>
<b>Act</b>: <code>register_forward_hook</code> sees a module's output: the feature maps.<br>
<b>In</b>: <code>register_forward_pre_hook</code> sees what goes into a module.<br>
<b>Grad</b>: <code>register_full_backward_hook</code> sees the gradient of the target score with respect to the
module's output, shown as |grad| per channel. Where an in-place operation would make it raise (ResNet's
<code>bn1</code> before an in-place ReLU), a <code>Tensor.register_hook</code> on the output is used instead; the
tree's tooltip says which.<br><br>
Every tick is a real hook on the live model, and every untick removes it."""


class _Latest:
    """The newest generation, readable from the worker thread without touching a Qt object."""

    def __init__(self) -> None:
        self.value = 0


def qimage_to_pil(image: QImage) -> Image.Image:
    """Clipboard or dropped pixels as an RGB PIL image (rows copied without Qt's line padding)."""
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    width, height, stride = rgb.width(), rgb.height(), rgb.bytesPerLine()
    buffer = np.frombuffer(rgb.constBits(), dtype=np.uint8, count=stride * height)
    pixels = buffer.reshape(height, stride)[:, : width * 3].reshape(height, width, 3).copy()
    return Image.fromarray(pixels, mode="RGB")


def error_text(error: BaseException) -> str:
    """One line for the status bar and the dialog; a traceback on stderr only for bugs."""
    if isinstance(error, HookscopeError):
        return str(error)
    if isinstance(error, MemoryError):
        return "Out of memory: try a smaller model or a smaller image."
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    first = str(error).strip().splitlines()
    return f"Unexpected error: {type(error).__name__}: {first[0] if first else ''}".rstrip(": ")


class MainWindow(QMainWindow):
    """The application window. ``run_finished`` fires after every panel of a run has been updated."""

    run_finished = Signal()
    model_ready = Signal()
    error_shown = Signal(str)
    hooks_changed = Signal()  # any change of the hook registry: a tick or untick, an edit, a device move
    run_applied = Signal(object)  # the RunOutcome just put on screen (emitted before run_finished)
    run_failed = Signal(str, object)  # a run of the newest generation failed: the message, the exception

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        weights: str = "default",
        device: str = "cpu",
        image: str | None = None,
        checks: list[str] | None = None,
        remember: bool = True,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        configure_pyqtgraph()
        self.setWindowTitle("Hookscope")
        self.setAcceptDrops(True)
        self._remember = remember
        self._weights = weights
        self._device = device if device in available_devices() else "cpu"
        self._target: int | str = "top1"
        self._loaded: LoadedModel | None = None
        self._registry: HookRegistry | None = None
        self._nodes: list[ModuleInfo] = []
        self._initial_checks = checks
        self.missing_checks: list[str] = []
        self._queue = ImageQueue()
        self._image: ImageSource | None = None  # the image of the results on screen
        self._wanted_image: ImageSource | None = None  # the newest image asked for
        self._paste_count = 0
        self._latest = _Latest()
        self._model_generation = 0
        self._model_message = ""  # what the last model load said, until the first run's line shows it too
        self._loading = False
        self._run_wanted = False
        self._dirty = False  # ticks, target or device changed since the results on screen
        self._closing = False
        self._last: RunOutcome | None = None
        self._default_settings = PanelSettings()
        self._panel_settings: dict[tuple[str, str], PanelSettings] = {}
        self._error_box: QMessageBox | None = None
        self._load_failed: tuple[int, Callable[[BaseException], bool]] | None = None  # see load_model_with
        self.last_error = ""
        self.applied_generations: list[int] = []
        self.last_timings: dict[str, float] = {}
        self.show_dialogs = True

        self._runner = JobRunner(self)
        self._runner.returned.connect(self._on_job_returned)
        self._runner.failed.connect(self._on_job_failed)
        self._runner.busy_changed.connect(self._update_busy)
        self._run_timer = QTimer(self)
        self._run_timer.setSingleShot(True)
        self._run_timer.setInterval(RUN_DEBOUNCE_MS)
        self._run_timer.timeout.connect(self._submit_run)

        self._build_central()
        self._build_docks()
        self._build_toolbar()
        self._build_menus()
        self._build_status_bar()
        install_file_features(self)  # model files, downloads, input settings, sessions, exports (window_files.py)
        install_hook_tools(self)  # interventions, hook inspector, Grad-CAM, image B (window_tools.py)
        self.resize(1560, 980)
        if remember:
            self._restore_layout()

        if device != self._device:
            self.show_error(f"Device '{device}' is not available here; using the CPU.", dialog=False)
        first = image if image is not None else str(sample_image())
        self._queue.replace([first] if image is not None else [])
        self._wanted_image = ImageSource.from_path(first)
        self.set_model(model, weights)

    # =========================================================================================== building ====
    def _build_central(self) -> None:
        self.notice = QLabel("")
        self.notice.setObjectName("notice")
        self.notice.setWordWrap(True)
        self.notice.setVisible(False)
        self.tree_model = ModuleTreeModel(self)
        self.tree_model.hooks_changed.connect(self._on_hooks_changed)
        self.panel_area = PanelArea(self.tree_model.order_of, host=self)
        self.panel_area.close_requested.connect(lambda path, kind: self.tick(path, kind, False))
        self.panel_area.channel_clicked.connect(self.open_channel)
        self.panel_area.settings_changed.connect(self._on_panel_settings)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(4, 4, 4, 0)
        layout.setSpacing(4)
        layout.addWidget(self.notice)
        layout.addWidget(self.panel_area, 1)
        self.setCentralWidget(central)

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        self.proxy = ModuleFilterProxy(self)
        self.proxy.setSourceModel(self.tree_model)
        self.filter_box = QLineEdit()
        self.filter_box.setPlaceholderText("Filter modules by name or type (Ctrl+F)")
        self.filter_box.setClearButtonEnabled(True)
        self.filter_box.textChanged.connect(self._on_filter)
        self.tree_view = QTreeView()
        self.tree_view.setModel(self.proxy)
        self.tree_view.setUniformRowHeights(True)
        self.tree_view.setAlternatingRowColors(True)
        self.tree_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree_view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree_view.customContextMenuRequested.connect(self._tree_menu)
        header = self.tree_view.header()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for column, width in ((NAME, 150), (ACTIVATIONS, 34), (INPUTS, 30), (GRADIENTS, 38), (TYPE, 104),
                              (PARAMS, 50), (SHAPE, 110)):
            header.resizeSection(column, width)
        tree_box = QWidget()
        tree_layout = QVBoxLayout(tree_box)
        tree_layout.setContentsMargins(4, 4, 4, 4)
        tree_layout.addWidget(self.filter_box)
        tree_layout.addWidget(self.tree_view, 1)
        self.tree_dock = self._dock("Modules", "modules", tree_box, Qt.DockWidgetArea.LeftDockWidgetArea)

        self.input_panel = InputPanel()
        self.input_panel.image_selected.connect(self._on_image_selected)
        self.input_panel.step_requested.connect(self.step_image)
        self.input_dock = self._dock("Input (as the model sees it)", "input", self.input_panel,
                                     Qt.DockWidgetArea.RightDockWidgetArea)
        self.predictions = PredictionsPanel()
        self.predictions.target_chosen.connect(self.set_target)
        self.predictions_dock = self._dock("Predictions", "predictions", self.predictions,
                                           Qt.DockWidgetArea.RightDockWidgetArea)
        self.channel_view = ChannelView()
        self.channel_dock = self._dock("Channel", "channel", self.channel_view, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.channel_dock.setVisible(False)
        self._channel_dock_sized = False
        # The tree keeps the full height on the left; the channel view spans the panels and the right column.
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.resizeDocks([self.tree_dock, self.input_dock], [530, 320], Qt.Orientation.Horizontal)
        self.resizeDocks([self.input_dock, self.predictions_dock], [560, 300], Qt.Orientation.Vertical)

    def _build_toolbar(self) -> None:
        bar = self.addToolBar("Model")
        bar.setObjectName("modelToolbar")
        bar.setMovable(False)
        self.model_box = QSearchableComboBox()
        self.model_box.addItems(catalogue(include_timm=True))
        self.model_box.setMinimumWidth(200)
        self.model_box.setToolTip("torchvision model: type to search")
        self.model_box.textActivated.connect(self._on_model_chosen)
        self.weights_box = QComboBox()
        for key, label in WEIGHT_CHOICES.items():
            self.weights_box.addItem(label, key)
        if self._weights not in WEIGHT_CHOICES:
            self.weights_box.addItem(f"File: {os.path.basename(self._weights)}", self._weights)
        self.weights_box.setCurrentIndex(self.weights_box.findData(self._weights))
        self.weights_box.activated.connect(self._on_weights_chosen)
        self.device_box = QComboBox()
        self.device_box.addItems(available_devices())
        self.device_box.setCurrentText(self._device)
        self.device_box.setToolTip("Devices present on this machine")
        self.device_box.textActivated.connect(self.set_device)
        for label, widget in (("Model ", self.model_box), ("  Weights ", self.weights_box),
                              ("  Device ", self.device_box)):
            bar.addWidget(QLabel(label))
            bar.addWidget(widget)
        bar.addSeparator()
        self._open_action = QAction("Open image…", self)
        self._open_action.setShortcut(QKeySequence.StandardKey.Open)
        self._open_action.triggered.connect(self.open_dialog)
        bar.addAction(self._open_action)
        self._previous_action = QAction("◀", self)
        self._previous_action.setToolTip("Previous image (Page Up)")
        self._previous_action.setShortcut(QKeySequence(Qt.Key.Key_PageUp))
        self._previous_action.triggered.connect(lambda: self.step_image(-1))
        self._next_action = QAction("▶", self)
        self._next_action.setToolTip("Next image (Page Down)")
        self._next_action.setShortcut(QKeySequence(Qt.Key.Key_PageDown))
        self._next_action.triggered.connect(lambda: self.step_image(1))
        bar.addAction(self._previous_action)
        bar.addAction(self._next_action)

    def _build_menus(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        file_menu.addAction(self._open_action)
        paste = file_menu.addAction("Paste image")
        paste.setShortcut(QKeySequence.StandardKey.Paste)
        paste.triggered.connect(self.paste_image)
        self.recent_menu = file_menu.addMenu("Open recent")
        self._rebuild_recent_menu()
        file_menu.addSeparator()
        file_menu.addAction(self._previous_action)
        file_menu.addAction(self._next_action)
        file_menu.addSeparator()
        shot = file_menu.addAction("Save window screenshot…")
        shot.triggered.connect(self._save_screenshot_dialog)
        file_menu.addSeparator()
        quit_action = file_menu.addAction("Quit")
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)

        hooks_menu = menu.addMenu("&Hooks")
        untick = hooks_menu.addAction("Untick all")
        untick.triggered.connect(self.untick_all)
        find = hooks_menu.addAction("Filter modules")
        find.setShortcut(QKeySequence.StandardKey.Find)
        find.triggered.connect(lambda: (self.filter_box.setFocus(), self.filter_box.selectAll()))
        rerun = hooks_menu.addAction("Run again")
        rerun.setShortcut(QKeySequence(Qt.Key.Key_F5))
        rerun.triggered.connect(self.run_again)

        view_menu = menu.addMenu("&View")
        colormaps = view_menu.addMenu("Colormap (all panels)")
        for name in COLORMAPS:
            colormaps.addAction(name).triggered.connect(lambda *_, v=name: self._set_all("colormap", v))
        scalings = view_menu.addMenu("Scaling (all panels)")
        for key, label in SCALINGS.items():
            scalings.addAction(label).triggered.connect(lambda *_, v=key: self._set_all("scaling", v))
        sorts = view_menu.addMenu("Channel order (all panels)")
        for key, label in (("none", "channel order"), ("mean", "by mean"), ("max", "by max")):
            sorts.addAction(label).triggered.connect(lambda *_, v=key: self._set_all("sort", v))
        view_menu.addSeparator()
        for dock in (self.tree_dock, self.input_dock, self.predictions_dock, self.channel_dock):
            view_menu.addAction(dock.toggleViewAction())

        help_menu = menu.addMenu("&Help")
        help_menu.addAction("The hooks behind the ticks").triggered.connect(
            lambda: self._inform("Hooks", HOOKS_HELP))
        help_menu.addAction("About Hookscope").triggered.connect(lambda: show_about(self))

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setFixedWidth(70)
        self.busy_bar.setVisible(False)
        self.timing_label = QLabel("")
        self.timing_label.setToolTip("Last run: forward and backward pass, then preparing and drawing the panels")
        status.addPermanentWidget(self.busy_bar)
        status.addPermanentWidget(self.timing_label)

    # ========================================================================================= public API ====
    @property
    def registry(self) -> HookRegistry | None:
        return self._registry

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    @property
    def current_generation(self) -> int:
        return self._latest.value

    @property
    def last_outcome(self) -> RunOutcome | None:
        return self._last

    @property
    def image_queue(self) -> ImageQueue:
        return self._queue

    @property
    def runner(self) -> JobRunner:
        return self._runner

    def tick(self, path: str, kind: str, ticked: bool = True) -> bool:
        """Tick or untick through the tree's model, exactly as a click on the check box does."""
        column = KIND_COLUMNS.get(kind)
        source = self.tree_model.index_of(path, column if column is not None else NAME)
        if not source.isValid() or column is None:
            return False
        index = self.proxy.mapFromSource(source)
        state = Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked
        if index.isValid():
            return self.proxy.setData(index, state, Qt.ItemDataRole.CheckStateRole)
        return self.tree_model.setData(source, state, Qt.ItemDataRole.CheckStateRole)  # filtered out of view

    def untick_all(self) -> None:
        if self._registry is not None:
            pairs = [(h.path, h.kind) for h in self._registry.handles()]
            self.tree_model.set_ticked(pairs, False)

    def ticked_pairs(self) -> set[tuple[str, str]]:
        if self._registry is None:
            return set()
        return {(h.path, h.kind) for h in self._registry.handles()}

    def set_model(self, name: str, weights: str | None = None) -> None:
        """Load ``name`` in the background; the ticked modules carry over where their paths exist."""
        weights = weights if weights is not None else self._weights
        if weights not in WEIGHT_CHOICES and self._loaded is not None and name != self._loaded.name:
            weights = "default"  # a weights file belongs to one architecture
        self._weights = weights
        self._latest.value += 1
        self._model_generation = generation = self._latest.value
        self._loading = True
        self.statusBar().showMessage(f"Loading {name}…")
        request = LoadRequest(generation, name, weights)
        self._runner.submit(Job(generation, partial(execute_load, request),
                                stale=lambda: self._model_generation != generation, label="load"))
        self._update_busy()

    # ---- for app/ui/features/open_model.py and sessions.py: models opened another way, panel settings, state ----
    def load_model_with(self, description: str, work: Callable[[], LoadedModel],
                        failed: Callable[[BaseException], bool] | None = None) -> None:
        """Load the model ``work`` builds (a model file, a session's model) in the background, as set_model does.

        ``failed`` sees the error first; returning True means it took care of it (asked for trust and retried).
        """
        self._latest.value += 1
        self._model_generation = generation = self._latest.value
        self._loading = True
        self._load_failed = (generation, failed) if failed is not None else None
        self.statusBar().showMessage(f"Loading {description}…")
        self._runner.submit(Job(generation, partial(execute_load_with, generation, work),
                                stale=lambda: self._model_generation != generation, label="load"))
        self._update_busy()

    def panel_settings(self) -> tuple[PanelSettings, dict[tuple[str, str], PanelSettings]]:
        """The default panel settings, and those of every (path, kind) pair set apart from it."""
        return self._default_settings, dict(self._panel_settings)

    def apply_panel_settings(self, default: PanelSettings, pairs: dict[tuple[str, str], PanelSettings]) -> None:
        """Set every panel's colormap, scaling and order (a restored session)."""
        self._default_settings = default
        self._panel_settings = dict(pairs)
        for panel in self.panel_area.panels.values():
            panel.apply_settings(self._settings_for(panel.path, panel.kind))

    @property
    def device(self) -> str:
        return self._device

    @property
    def target(self) -> int | str:
        return self._target

    @property
    def remembers(self) -> bool:
        """Whether this window keeps recent files and models in the user's settings."""
        return self._remember

    def set_device(self, device: str) -> None:
        """Move runs to ``device``: every hook is removed first, then the ticked ones are registered again."""
        if device == self._device or device not in available_devices():
            return
        self._device = device
        if self._registry is not None:
            pairs = self.ticked_pairs()
            edits = [edit for _, edit, _ in self._registry.edits()]  # the interventions move with the ticks
            self._registry.clear()
            for path, kind in sorted(pairs):
                self._registry.add(path, kind)
            for edit in edits:
                try:
                    self._registry.add_edit(edit)  # on or off as it was
                except HookscopeError as error:
                    self.show_error(f"{edit.spec} was dropped: {error}", dialog=False)
        self.device_box.setCurrentText(device)
        self.registry_changed()

    def run_again(self) -> None:
        """Run the current image again with the current ticks (F5)."""
        self._request_run()

    def registry_changed(self, rerun: bool = True) -> None:
        """The one place every change of the hook registry goes through (ticks, edits, a device move): the
        inspector and the Interventions list follow (``hooks_changed``), and a run follows."""
        self.hooks_changed.emit()
        if rerun:
            self._dirty = True
            self._request_run()

    def edits_changed(self) -> None:
        """Edits were added to the registry directly (a restored session): show them and run."""
        self.registry_changed()

    @property
    def image_b(self) -> ImageSource | None:
        """Image B, compared with the image on screen; None when not comparing."""
        return self.compare.image_b

    def set_image_b(self, path: str | None) -> None:
        """Compare every run with the image at ``path`` (None: stop comparing)."""
        self.compare.set_image_b(path)

    def set_target(self, target: int | str) -> None:
        """Take gradients of class ``target`` (an index) or of the top-1 class (``"top1"``), and run again."""
        self._target = target
        self._dirty = True
        self._request_run()

    def open_paths(self, paths: list[str]) -> None:
        """Show the first file; the rest wait in the image list."""
        if not paths:
            self.show_error("Nothing to open: drop or choose image files.")
            return
        first = self._queue.replace(paths)
        self.input_panel.set_list(self._queue.paths, self._queue.index)
        if first is not None:
            self._request_image(ImageSource.from_path(first))

    def open_image(self, path: str) -> None:
        self.open_paths([path])

    def step_image(self, delta: int) -> None:
        path = self._queue.step(delta)
        if path is None:
            self.statusBar().showMessage("No image list to step through: drop or open several files.", 4000)
            return
        self.input_panel.set_list(self._queue.paths, self._queue.index)
        self._request_image(ImageSource.from_path(path))

    def paste_image(self) -> None:
        """Paste image files (copied in a file manager) or pixels (a screenshot, an image copied in a browser)."""
        mime = QApplication.clipboard().mimeData()
        if mime is not None and mime.hasUrls():
            paths = [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]
            if paths:
                self.open_paths(paths)
                return
        if mime is not None and mime.hasImage():
            image = QApplication.clipboard().image()
            if not image.isNull():
                self._paste_count += 1
                self._request_image(ImageSource(f"clipboard image {self._paste_count}", None, qimage_to_pil(image)))
                return
        self.show_error("The clipboard holds no image and no image file.", dialog=False)

    def open_dialog(self) -> None:
        patterns = " ".join(f"*{suffix}" for suffix in sorted(IMAGE_SUFFIXES))
        start = os.path.dirname(self._image.path) if self._image and self._image.path else os.path.expanduser("~")
        paths, _ = QFileDialog.getOpenFileNames(self, "Open images", start, f"Images ({patterns});;All files (*)")
        if paths:
            self.open_paths(paths)

    def open_channel(self, picture: PanelPicture, channel: int) -> None:
        """The channel view for one tile: the map large, its histogram and statistics, the overlay."""
        rgb = self._last.input_display if self._last is not None else None
        self.channel_view.show_channel(picture, channel, rgb)
        self.channel_dock.setVisible(True)
        self.channel_dock.raise_()
        if not self._channel_dock_sized and not self.channel_dock.isFloating():
            self._channel_dock_sized = True
            self.resizeDocks([self.channel_dock], [max(300, self.height() // 3)], Qt.Orientation.Vertical)

    def save_screenshot(self, path: str) -> bool:
        return self.grab().save(path)

    # ========================================================================================== dropping ====
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
            if not paths:
                self.show_error("Only files on this computer can be dropped (not web links).")
            elif not open_dropped_files(self, paths):  # model and session files open as such
                self.open_paths(paths)
            event.acceptProposedAction()
        elif mime.hasImage():
            self._paste_count += 1
            image = QImage(mime.imageData())
            self._request_image(ImageSource(f"dropped image {self._paste_count}", None, qimage_to_pil(image)))
            event.acceptProposedAction()

    # ============================================================================================== runs ====
    def _request_image(self, source: ImageSource) -> None:
        self._wanted_image = source
        self._request_run()

    def _request_run(self) -> None:
        """Supersede whatever is in flight now; start the new run after a short pause (ten ticks: one run)."""
        if self._closing:
            return
        self._latest.value += 1
        self._run_timer.start()
        self._update_busy()

    def _submit_run(self) -> None:
        if self._closing or self._wanted_image is None:
            return
        if self._loading or self._loaded is None or self._registry is None:
            self._run_wanted = True
            return
        generation = self._latest.value
        latest = self._latest
        request = RunRequest.freeze(generation, self._loaded, self._registry, self._wanted_image, self._device,
                                    self._target, self._panel_settings, self._default_settings,
                                    image_b=self.compare.image_b, fit=self.panel_area.view_size())
        self._runner.submit(Job(generation, partial(execute_run, request, lambda: latest.value != generation),
                                stale=lambda: latest.value != generation))
        self._update_busy()

    def _on_job_returned(self, job: Job, outcome: object) -> None:
        if self._closing:
            return
        if isinstance(outcome, LoadOutcome):
            if outcome.generation == self._model_generation:
                self._apply_model(outcome)
        elif isinstance(outcome, RunOutcome) and outcome.generation == self._latest.value:
            self._apply_run(outcome)
        self._update_busy()

    def _on_job_failed(self, job: Job, error: object) -> None:
        if self._closing or isinstance(error, RunCancelled):
            self._update_busy()
            return
        message = error_text(error) if isinstance(error, BaseException) else str(error)
        if job.label == "load":
            if job.generation != self._model_generation:
                return
            self._loading = False
            self._sync_model_boxes()
            handler, self._load_failed = self._load_failed, None
            handled = handler is not None and handler[0] == job.generation and isinstance(error, BaseException) \
                and handler[1](error)  # e.g. a model file asking for trust or its architecture
            if not handled:
                self.show_error(message)
            if self._run_wanted and self._loaded is not None and not self._loading:
                self._run_wanted = False
                self._request_run()
        elif job.generation == self._latest.value:
            failed = self._wanted_image
            self.show_error(message)
            self.run_failed.emit(message, error)  # e.g. the Interventions panel switches off an edit that failed
            if isinstance(error, DeviceError) and self._device != "cpu":
                self.set_device("cpu")  # back to the device that always works; the run follows
                return
            if isinstance(error, ImageError) and self._image is not None and failed != self._image:
                self._wanted_image = self._image  # the results on screen stay; later runs use their image
                if self._dirty:
                    self._request_run()
            elif isinstance(error, ImageError) and self._image is None and failed is not None \
                    and failed.path != str(sample_image()):
                self._request_image(ImageSource.from_path(sample_image()))  # nothing on screen yet: the sample
        self._update_busy()

    def _apply_model(self, outcome: LoadOutcome) -> None:
        first = self._loaded is None
        previous = self.ticked_pairs()
        previous_edits = [edit for _, edit, _ in self._registry.edits()] if self._registry is not None else []
        if self._registry is not None:
            self._registry.clear()  # every hook on the old model goes first
        self._loaded = outcome.loaded
        self._registry = HookRegistry(outcome.loaded.module)
        self._nodes = outcome.nodes
        self._loading = False
        self._target = "top1"
        self._last = None
        self.panel_area.clear()
        self.channel_dock.setVisible(False)
        self.tree_model.set_model(self._nodes, self._registry, outcome.loaded.name)
        paths = set(self._registry.paths)
        if self._initial_checks is not None or first:
            wanted = self._initial_checks if self._initial_checks is not None else default_checks(
                outcome.loaded.name, self._nodes)
            self._initial_checks = None
            self.missing_checks = [p for p in wanted if p not in paths]
            if self.missing_checks:
                self.show_error(f"The model has no module named {', '.join(map(repr, self.missing_checks))}.")
            pairs = [(p, k) for p in wanted if p in paths for k in CHECK_KINDS]
            message = f"{outcome.loaded.name} loaded in {outcome.load_ms:.0f} ms"
        else:
            pairs = sorted(pair for pair in previous if pair[0] in paths)
            dropped = len(previous) - len(pairs)
            message = f"{outcome.loaded.name} loaded in {outcome.load_ms:.0f} ms; {len(pairs)} hooks carried over"
            if dropped:
                message += f", {dropped} dropped (no such module)"
            if previous and not pairs:
                pairs = [(p, k) for p in default_checks(outcome.loaded.name, self._nodes) for k in CHECK_KINDS]
                message += "; ticked its default layers instead"
            message += self._carry_edits(previous_edits)
        for path, kind in pairs:
            self.tick(path, kind, True)  # the same path as a click
        self._expand_ticked()
        self.notice.setText(outcome.loaded.notice)
        self.notice.setVisible(bool(outcome.loaded.notice))
        self._sync_model_boxes()
        self.statusBar().showMessage(message, 8000)
        self._model_message = message  # kept in front of the first run's line, which would otherwise replace it
        self._update_title()
        self.model_ready.emit()
        self._run_wanted = False
        self._request_run()

    def _apply_run(self, outcome: RunOutcome) -> None:
        start = time.perf_counter()
        self._last = outcome
        self._image = outcome.image
        if self._wanted_image == outcome.image:
            self._wanted_image = outcome.image  # keep the pixels: re-runs need not read the file again
        self._dirty = False
        result = outcome.result
        self.panel_area.show_results(outcome.pictures, self.ticked_pairs(), self._missing_reason, self._settings_for)
        preprocess = self._loaded.preprocess if self._loaded else None
        description = ""
        if preprocess is not None:
            resize = f"resize {preprocess.resize}, " if preprocess.resize else ""
            description = (f"{resize}center crop {preprocess.crop}, {preprocess.interpolation}, "
                           f"normalised (mean {', '.join(f'{m:.3f}' for m in preprocess.mean)})")
        self.input_panel.show_input(outcome.input_display, outcome.saliency, outcome.image.name, description)
        target_text = result.target
        categories = self._loaded.categories if self._loaded else None
        if result.target_index is not None and categories:
            target_text += f": {categories[result.target_index]}"
        classes = int(result.scores.shape[1]) if result.scores is not None else None
        self.predictions.show_predictions(result.top5, result.target_index, target_text, classes)
        self.tree_model.set_survey(result.survey)
        if self.channel_dock.isVisible() and not self.channel_view.refresh(outcome.pictures, outcome.input_display):
            self.channel_dock.setVisible(False)
        if outcome.image.path and self._remember:
            self._push_recent(outcome.image.path)
        self._update_title()
        apply_ms = (time.perf_counter() - start) * 1000
        self.last_timings = {**outcome.timings, "apply_ms": apply_ms}
        t = self.last_timings
        self.timing_label.setText(
            f"{result.device} · forward {t['forward_ms']:.0f} ms · backward {t['backward_ms']:.0f} ms · "
            f"render {t['prepare_ms'] + apply_ms:.0f} ms"
        )
        self.timing_label.setToolTip(
            f"read + preprocess {t['read_ms']:.0f} ms\nforward {t['forward_ms']:.1f} ms\n"
            f"backward {t['backward_ms']:.1f} ms\nprepare pictures (worker) {t['prepare_ms']:.1f} ms\n"
            f"update panels (GUI) {apply_ms:.1f} ms\n{len(result.records)} records"
        )
        line = f"{outcome.image.name}: {len(result.records)} records"
        if self._model_message:
            line, self._model_message = f"{self._model_message} · {line}", ""
        self.statusBar().showMessage(line, 8000)
        self.run_applied.emit(outcome)  # image B's views, prediction changes, Grad-CAM, the inspector
        self.applied_generations.append(outcome.generation)
        self.run_finished.emit()

    def _carry_edits(self, edits: list) -> str:
        """The interventions move to the new model where their module exists, on or off as they were (as ticks
        do); the status message's part about them."""
        carried, dropped = 0, []
        for edit in edits:
            try:
                self._registry.add_edit(edit)
                carried += 1
            except HookscopeError as error:  # no such module in the new model
                dropped.append(f"{edit.spec} ({error})")
        if not edits:
            return ""
        text = f"; {carried} intervention{'s' if carried != 1 else ''} carried over"
        if dropped:
            text += f", dropped: {', '.join(dropped)}"
        return text

    def _missing_reason(self, path: str, kind: str) -> str:
        survey = self._last.result.survey if self._last is not None else None
        if survey is not None and not survey.run_of(path).ran:
            return f"No record: this module {NOT_RUN_REASON}."
        if kind in ("backward", "tensor"):
            return "No record: no gradient reached this module's output on the way to the target."
        if kind == "pre":
            return "No record: this module received no tensor input."
        return "No record: the hook saw no tensor in the last run."

    # ============================================================================================ events ====
    def _on_hooks_changed(self, changes: list[tuple[str, str, bool]]) -> None:
        added = [(path, kind) for path, kind, ticked in changes if ticked]
        self.panel_area.ensure_pairs(added, self._settings_for)
        for path, kind, ticked in changes:
            if not ticked:
                self.panel_area.remove_pair(path, kind)
                shown = self.channel_view.picture
                if shown is not None and (shown.path, shown.kind) == (path, kind):
                    self.channel_dock.setVisible(False)
        self.registry_changed()

    def _on_panel_settings(self, path: str, kind: str, settings: PanelSettings) -> None:
        self._panel_settings[(path, kind)] = settings

    def _settings_for(self, path: str, kind: str) -> PanelSettings:
        return self._panel_settings.get((path, kind), self._default_settings)

    def _set_all(self, field: str, value: str) -> None:
        self._default_settings = replace(self._default_settings, **{field: value})
        self._panel_settings = {pair: replace(s, **{field: value}) for pair, s in self._panel_settings.items()}
        self.panel_area.apply_to_all(lambda s: replace(s, **{field: value}))
        for panel in self.panel_area.panels.values():
            self._panel_settings[(panel.path, panel.kind)] = panel.settings

    def _on_model_chosen(self, name: str) -> None:
        if name not in catalogue(include_timm=True):
            self.show_error(f"Unknown model '{name}': choose one from the list.", dialog=False)
            self._sync_model_boxes()
            return
        if self._loaded is None or name != self._loaded.name:
            self.set_model(name)

    def _on_weights_chosen(self, index: int) -> None:
        weights = self.weights_box.itemData(index)
        if weights != self._weights:
            self._weights = weights
            self.set_model(self._loaded.name if self._loaded else DEFAULT_MODEL, weights)

    def _on_image_selected(self, row: int) -> None:
        if row != self._queue.index:
            path = self._queue.select(row)
            if path is not None:
                self._request_image(ImageSource.from_path(path))

    def _on_filter(self, text: str) -> None:
        self.proxy.set_text(text)
        if text.strip():
            self.tree_view.expandAll()
        else:
            self.tree_view.collapseAll()
            self._expand_ticked()

    def _tree_menu(self, position: QPoint) -> None:
        index = self.tree_view.indexAt(position)
        node = self.tree_model.node(self.proxy.mapToSource(index)) if index.isValid() else None
        menu = QMenu(self)
        if node is not None:
            paths = self.tree_model.paths_of_type(node.type_name)
            for kind in ("forward", "pre", "backward"):
                action = menu.addAction(f"Tick {KIND_LABELS[kind]} of every {node.type_name} ({len(paths)})")
                pairs = [(p, kind) for p in paths]
                action.triggered.connect(lambda *_, pairs=pairs: self.tree_model.set_ticked(pairs, True))
            every = [(p, k) for p in paths for k in ("forward", "pre", "backward")]
            untick = menu.addAction(f"Untick every {node.type_name}")
            untick.triggered.connect(lambda *_, pairs=every: self.tree_model.set_ticked(pairs, False))
            self.interventions.add_module_actions(menu, node.path)  # edits and Grad-CAM (interventions_panel.py)
            menu.addSeparator()
        menu.addAction("Untick all").triggered.connect(self.untick_all)
        menu.addAction("Expand all").triggered.connect(self.tree_view.expandAll)
        menu.addAction("Collapse all").triggered.connect(self.tree_view.collapseAll)
        menu.popup(self.tree_view.viewport().mapToGlobal(position))

    # =========================================================================================== helpers ====
    def _expand_ticked(self) -> None:
        self.tree_view.expand(self.proxy.mapFromSource(self.tree_model.index_of("")))
        for path, _ in self.ticked_pairs():
            parts = path.split(".")
            for n in range(1, len(parts)):
                index = self.proxy.mapFromSource(self.tree_model.index_of(".".join(parts[:n])))
                if index.isValid():
                    self.tree_view.expand(index)
        self.tree_view.resizeColumnToContents(NAME)
        header = self.tree_view.header()
        header.resizeSection(NAME, min(max(header.sectionSize(NAME), 140), 300))
        first = sorted(self.ticked_pairs(), key=lambda pair: self.tree_model.order_of(pair[0]))
        if first:
            self.tree_view.scrollTo(self.proxy.mapFromSource(self.tree_model.index_of(first[0][0])),
                                    QAbstractItemView.ScrollHint.PositionAtCenter)

    def _sync_model_boxes(self) -> None:
        if self._loaded is not None:
            self.model_box.setCurrentText(self._loaded.name)
        index = self.weights_box.findData(self._weights)
        if index >= 0:
            self.weights_box.setCurrentIndex(index)

    def _update_title(self) -> None:
        parts = ["Hookscope"]
        if self._loaded is not None:
            parts.append(self._loaded.name + ("" if self._loaded.pretrained else " (untrained)"))
        if self._image is not None:
            parts.append(self._image.name)
        self.setWindowTitle(" — ".join(parts))

    def _update_busy(self, *_: object) -> None:
        busy = not self._closing and (self._runner.busy or self._run_timer.isActive() or self._loading)
        self.busy_bar.setVisible(busy)

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

    def _inform(self, title: str, text: str) -> None:
        box = QMessageBox(QMessageBox.Icon.Information, title, text, parent=self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    def _save_screenshot_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save window screenshot", "hookscope.png", "PNG (*.png)")
        if path and not self.save_screenshot(path):
            self.show_error(f"Could not write '{path}'.")

    # ========================================================================================== settings ====
    def _push_recent(self, path: str) -> None:
        settings = app_settings()
        recent = push_recent(read_list(settings, "recent_files"), path)
        settings.setValue("recent_files", recent)
        self._rebuild_recent_menu(recent)

    def _rebuild_recent_menu(self, recent: list[str] | None = None) -> None:
        if recent is None:
            recent = read_list(app_settings(), "recent_files") if self._remember else []
        self.recent_menu.clear()
        for path in recent:
            self.recent_menu.addAction(path).triggered.connect(lambda *_, p=path: self.open_paths([p]))
        self.recent_menu.setEnabled(bool(recent))

    def _restore_layout(self) -> None:
        settings = app_settings()
        geometry, state = settings.value("window/geometry"), settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state)
        self.channel_dock.setVisible(False)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Cancel and wait for the worker, remove every hook; safe to call twice."""
        if self._closing:
            return
        self._closing = True
        self._latest.value += 1
        self._run_timer.stop()
        download = getattr(self, "weights_download", None)
        if download is not None:
            download.stop()
        self._runner.shutdown()
        if self._registry is not None:
            self._registry.clear()
        if self._error_box is not None:
            self._error_box.close()
        if self._remember:
            settings = app_settings()
            settings.setValue("window/geometry", self.saveGeometry())
            settings.setValue("window/state", self.saveState())
            if self._loaded is not None:
                settings.setValue("last_model", self._loaded.name)

