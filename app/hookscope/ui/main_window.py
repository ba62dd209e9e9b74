"""The Hookscope window: a shell around the ``Workspace``.

The shell holds the docks, builds the menus from action specs, routes drops, saves and restores the layout, and
shows the workspace's messages. Its own views (module tree, panels, input, predictions, channel view) follow the
workspace's signals; every other feature (``FEATURES``) is built from the workspace and this window as its
``Host`` and plugs in docks, actions, context-menu entries and rows without the window knowing what they do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)
from PIL import Image
from PySide6.QtCore import QByteArray, QPoint, QRect, QSize, Qt, Signal
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
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.resources import sample_image
from hookscope.core.engine.devices import available_devices, unavailable_devices
from hookscope.core.models.catalogue import DEFAULT_MODEL, catalogue
from hookscope.core.pictures.panels import PanelPicture
from hookscope.ui.actions.builtin import builtin_actions
from hookscope.ui.actions.specs import ActionSpec, MenuBuilder
from hookscope.ui.features import FEATURES
from hookscope.ui.host import ChannelListener, DockSpec, DropHandler, ModuleMenuEntries, TileMenuEntries
from hookscope.ui.qimages import qimage_array
from hookscope.ui.state.image_queue import push_recent
from hookscope.ui.state.requests import ImageSource, LoadOutcome, RunOutcome
from hookscope.ui.state.settings import app_settings, read_list
from hookscope.ui.state.workspace import TICK_KINDS, HeldStart, Workspace
from hookscope.ui.theme import configure_pyqtgraph
from hookscope.ui.views.chooser import ChooserView
from hookscope.ui.views.modules import ModulesView
from hookscope.ui.views.panels import PanelsView
from hookscope.ui.views.results import InputView, PredictionsView
from hookscope.ui.views.status import StatusLine
from hookscope.ui.views.task_targets import TaskTargets
from hookscope.ui.widgets.channel_view import ChannelView
from hookscope.ui.widgets.disposal import dispose
from hookscope.ui.widgets.input_panel import InputPanel
from hookscope.ui.widgets.model_chooser import ModelChooser
from hookscope.ui.widgets.panel_area import PanelArea
from hookscope.ui.widgets.predictions import PredictionsPanel

AREAS = {
    "left": Qt.DockWidgetArea.LeftDockWidgetArea,
    "right": Qt.DockWidgetArea.RightDockWidgetArea,
    "bottom": Qt.DockWidgetArea.BottomDockWidgetArea,
}
# The cards keep at least this share of the window's height, and never less than CARD_MIN_HEIGHT px, whatever opens
# below them: at 1024x700 the Channel view and the Top images once left them 190 px.
CARD_SHARE, CARD_MIN_HEIGHT = 0.4, 320
# The side views (Channel, Top images, Visualize, the lessons: every "bottom" dock) share one tab stack under the
# cards. Layouts saved before that (stacked docks, lessons in the right column) are not restored: saveState's version.
SIDE_AREA = "bottom"
STATE_VERSION = 2


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
        ticks: list[str] | None = None,
        remember: bool = True,
        parent: QWidget | None = None,
        tick_kinds: tuple[str, ...] = TICK_KINDS,
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
        self._fitted_to_a_model = False
        self._fitted_size: QSize | None = None  # the size _fit_into_screen chose, until the first show

        self.workspace = space = Workspace(weights, device, ticks, self, tick_kinds)
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
        """The window's own views: each binds its widget to the workspace itself (``hookscope.ui.views``)."""
        space = self.workspace
        # First: the start of every run's apply, for the timings line (the views below each apply their part).
        self.status_line = StatusLine(space, self.statusBar())
        self.busy_bar, self.timing_label = self.status_line.busy_bar, self.status_line.timing_label
        space.run_applied.connect(self.status_line.run_arrived)
        self._notices = QVBoxLayout()
        self._notices.setContentsMargins(0, 0, 0, 0)
        self.modules = ModulesView(space, lambda: self._module_menus, self)
        self.tree_model, self.tree_view = self.modules.model, self.modules.view
        self.panel_area = PanelArea(self.tree_model.order_of, host=self)
        self.panels = PanelsView(space, self.panel_area, self._drawn_ahead)
        self.panel_area.channel_clicked.connect(self.open_channel)
        self.panel_area.channel_menu_requested.connect(self._tile_menu)
        self.panel_area.message.connect(
            lambda text, error: self.show_error(text) if error else self.statusBar().showMessage(text, 6000)
        )
        space.attach_view(self.panel_area.view_size, self._hidden_panels)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(4, 4, 4, 0)
        layout.setSpacing(4)
        layout.addLayout(self._notices)
        layout.addWidget(self.panel_area, 1)
        self.setCentralWidget(central)
        self._keep_card_room()

        self.add_dock(DockSpec("modules", "Modules", "left", scroll=False), self.tree_view)
        self.input_panel = InputPanel()
        self.input_view = InputView(space, self.input_panel)
        # "Input": a tab title that stays whole beside Grad-CAM's in a 230 px column (the panel says "as the model
        # sees it" itself).
        self.add_dock(DockSpec("input", "Input", "right"), self.input_panel)
        self.predictions = PredictionsPanel()
        self.predictions_view = PredictionsView(space, self.predictions)
        self.task_targets = TaskTargets(space, self.input_panel, self.predictions, self.show_error)
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
        self.chooser_view = ChooserView(space, self.chooser, self.show_error)
        bar.addWidget(self.chooser)
        bar.addSeparator()
        self.menus = MenuBuilder(self, bar)
        self.menus.add(builtin_actions(self))
        for dock_id in ("modules", "input", "predictions", "channel"):
            self._add_dock_toggle(dock_id)
        self.menus.actions["file.previous_image"].setEnabled(False)  # no image list yet

    def _connect_workspace(self) -> None:
        space = self.workspace
        space.model_changed.connect(self._on_model_changed)
        space.hooks_changed.connect(self._on_hooks_changed)
        space.run_applied.connect(self._on_run_shown)  # after the views: the channel view, the title, the timings
        space.image_list_changed.connect(self._on_image_list_changed)
        space.error.connect(self.show_error)

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
        dispose(dock)

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
    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self._docks["channel"].setVisible(False)  # nothing of the old model's run stays (the views clear their own)
        self._update_title()
        if self._docks_fitted and not self._layout_restored and not self._fitted_to_a_model:
            self._fitted_to_a_model = True  # once: a later switch keeps the columns as the person left them
            self.fit_docks()  # the tree's Type column asks for its model's type names (the first load ends after show)

    def _on_hooks_changed(self, changes: list[tuple[str, str, bool]]) -> None:
        shown = self.channel_view.picture
        if shown is not None and any((shown.path, shown.kind) == (p, k) and not on for p, k, on in changes):
            self._docks["channel"].setVisible(False)  # its panel's hook is gone

    def _on_image_list_changed(self) -> None:
        # Nothing before the first image: Previous (and Page Up) is off there rather than jumping to the last one.
        self.menus.actions["file.previous_image"].setEnabled(bool(self.workspace.image_index))

    def _on_run_shown(self, outcome: RunOutcome) -> None:
        """Every view has shown the run (they subscribe before this): the channel view, the title, the timings."""
        if self._docks["channel"].isVisible() and not self.channel_view.refresh(
            outcome.pictures, outcome.input_display
        ):
            self._docks["channel"].setVisible(False)
        if outcome.image.path and self.remembers:
            self._push_recent(outcome.image.path)
        self._update_title()
        self.status_line.show_run(outcome)
        self.run_finished.emit()

    @property
    def last_timings(self) -> dict[str, float]:
        """The run on screen's timings (ms): read, forward, backward, prepare (worker) and apply (GUI)."""
        return self.status_line.last_timings

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

    def _tile_menu(self, picture: PanelPicture, channel: int, position: QPoint) -> None:
        menu = QMenu(self)
        for entries in self._tile_menus:
            entries(menu, picture, channel)
        if not menu.isEmpty():
            menu.popup(position)

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
        if width >= 1500:  # room to spare (the 1560 px default): the tree's Type column too, up to a quarter
            tree = self.tree_view
            dock = self._docks["modules"].width() - tree.width() if tree.width() > 0 else 4
            left = max(left, min(tree.width_with_type() + dock, int(width * 0.25)))
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
