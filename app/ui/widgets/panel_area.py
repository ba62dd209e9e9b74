"""The central grid of record panels: one row per record (in module-tree order), one column per hook kind.

With several hook kinds ticked, a module's Inputs, Activations and Gradients sit side by side; with one kind,
panels flow into as many columns as fit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QResizeEvent
from PySide6.QtWidgets import QDockWidget, QGridLayout, QLabel, QMainWindow, QScrollArea, QVBoxLayout, QWidget

from app.core.hooks import record_key
from app.core.pictures import KIND_ORDER, PanelPicture, PanelSettings
from app.ui.widgets.feature_map_panel import FeatureMapPanel

MIN_PANEL_WIDTH = 380
PANELS_PER_TURN = 2  # panels built per turn of the event loop after a tick
EMPTY_HINT = (
    "Tick a module in the tree (Act = activations, In = inputs, Grad = gradients)\n"
    "to see what it computes. Drop image files anywhere on the window."
)


class PanelDock(QDockWidget):
    """A panel popped out of the grid; closing the dock puts the panel back."""

    closed = Signal(object)

    def closeEvent(self, event: QCloseEvent) -> None:
        super().closeEvent(event)
        self.closed.emit(self)


class PanelArea(QScrollArea):
    """Owns the record panels; the window tells it which (path, kind) pairs are ticked and what a run found."""

    close_requested = Signal(str, str)
    channel_clicked = Signal(object, int)
    channel_menu_requested = Signal(object, int, object)  # picture, channel, global QPoint (a tile right-clicked)
    settings_changed = Signal(str, str, object)

    def __init__(
        self, order_of: Callable[[str], int], host: QMainWindow | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._order_of = order_of
        self._host = host  # the window that holds popped-out panels as docks
        self.docks: dict[tuple[str, str], PanelDock] = {}
        self.panels: dict[tuple[str, str], FeatureMapPanel] = {}  # (kind, record key) -> panel
        self._sort_keys: dict[tuple[str, str], tuple[int, int, str]] = {}
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        container = QWidget()
        outer = QVBoxLayout(container)
        outer.setContentsMargins(6, 6, 6, 6)
        self._hint = QLabel(EMPTY_HINT)
        self._hint.setObjectName("emptyHint")
        self._hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        outer.addWidget(self._hint, 1)
        self._grid = QGridLayout()
        self._grid.setSpacing(6)
        outer.addLayout(self._grid)
        outer.addStretch(1)  # spare height goes below the rows, not into the panels
        self.setWidget(container)
        self._columns = 0
        # Ticked pairs whose panels are still to be built (``ensure_pairs``), in the order they were ticked.
        self._pending: OrderedDict[tuple[str, str], Callable[[str, str], PanelSettings]] = OrderedDict()
        self._pending_timer = QTimer(self)
        self._pending_timer.setSingleShot(True)
        self._pending_timer.setInterval(0)
        self._pending_timer.timeout.connect(self._make_pending)

    # ---- which panels exist ---------------------------------------------------------------------------------
    def pairs(self) -> set[tuple[str, str]]:
        return {(panel.path, panel.kind) for panel in self.panels.values()}

    def panels_of(self, path: str, kind: str) -> list[FeatureMapPanel]:
        return [p for p in self.panels.values() if p.path == path and p.kind == kind]

    def ensure_pairs(self, pairs: Iterable[tuple[str, str]], settings_for: Callable[[str, str], PanelSettings]) -> None:
        """Ticked pairs get a panel saying "Waiting for the run…" (filled when the run comes back), a few per turn
        of the event loop: a panel takes about 6 ms to build, and ticking every Conv2d of a network at once must
        not freeze the window for a quarter of a second."""
        for pair in pairs:
            if pair not in self._pending and not self.panels_of(*pair):
                self._pending[pair] = settings_for
        self._make_pending()

    def _make_pending(self) -> None:
        made = 0
        while self._pending and made < PANELS_PER_TURN:
            (path, kind), settings_for = self._pending.popitem(last=False)
            if not self.panels_of(path, kind):
                panel = self._make(path, kind, record_key(path), settings_for(path, kind), (self._order_of(path), 0, ""))
                panel.show_message("Waiting for the run…")
                made += 1
        if made:
            self._relayout()
        if self._pending:
            self._pending_timer.start()

    def view_size(self) -> tuple[int, int] | None:
        """The largest mosaic view among the panels in the grid, in device pixels (what a run colours mosaics
        at); None before the panels are laid out, and then mosaics are coloured whole."""
        sizes = [panel.view_size() for ident, panel in self.panels.items() if ident not in self.docks]
        sizes = [size for size in sizes if size is not None]
        if not sizes:
            return None
        return max(w for w, _ in sizes), max(h for _, h in sizes)

    def remove_pair(self, path: str, kind: str) -> None:
        self._pending.pop((path, kind), None)
        doomed = [ident for ident, panel in self.panels.items() if panel.path == path and panel.kind == kind]
        for ident in doomed:
            self._drop(ident)
        if doomed:
            self._relayout()

    def clear(self) -> None:
        self._pending.clear()
        for ident in list(self.panels):
            self._drop(ident)
        self._relayout()

    # ---- after a run ----------------------------------------------------------------------------------------
    def show_results(
        self,
        pictures: Iterable[PanelPicture],
        ticked: set[tuple[str, str]],
        missing_reason: Callable[[str, str], str],
        settings_for: Callable[[str, str], PanelSettings],
    ) -> None:
        """Fill every ticked pair's panels from one run; pairs without a record say why."""
        self._pending.clear()  # every ticked pair gets its panel here
        seen: set[tuple[str, str]] = set()
        covered: set[tuple[str, str]] = set()
        changed = False
        for picture in pictures:
            pair = (picture.path, picture.kind)
            if pair not in ticked:
                continue
            ident = (picture.kind, picture.key)
            panel = self.panels.get(ident)
            if panel is None:
                panel = self._make(picture.path, picture.kind, picture.key, picture.settings,
                                   (self._order_of(picture.path), picture.call, picture.leaf))
                changed = True
            panel.show_picture(picture)
            seen.add(ident)
            covered.add(pair)
        for ident, panel in list(self.panels.items()):
            pair = (panel.path, panel.kind)
            if pair not in ticked:
                self._drop(ident)
                changed = True
            elif ident not in seen and pair in covered:
                self._drop(ident)  # a placeholder replaced by the run's real records (e.g. "/0" leaves)
                changed = True
            elif ident not in seen:
                panel.show_message(missing_reason(panel.path, panel.kind))
        for path, kind in ticked - covered:
            if not self.panels_of(path, kind):
                self._make(path, kind, record_key(path), settings_for(path, kind),
                           (self._order_of(path), 0, "")).show_message(missing_reason(path, kind))
                changed = True
        if changed:
            self._relayout()

    def apply_to_all(self, change: Callable[[PanelSettings], PanelSettings]) -> None:
        for panel in self.panels.values():
            panel.apply_settings(change(panel.settings))

    # ---- internals ------------------------------------------------------------------------------------------
    def _make(self, path: str, kind: str, key: str, settings: PanelSettings,
              sort_key: tuple[int, int, str]) -> FeatureMapPanel:
        panel = FeatureMapPanel(path, kind, key, settings)
        panel.close_requested.connect(self.close_requested)
        panel.channel_clicked.connect(self.channel_clicked)
        panel.channel_menu_requested.connect(self.channel_menu_requested)
        panel.settings_changed.connect(self._on_settings_changed)
        panel.float_requested.connect(self.pop_out)
        panel.float_button.setVisible(self._host is not None)
        self.panels[(kind, key)] = panel
        self._sort_keys[(kind, key)] = sort_key
        return panel

    def _on_settings_changed(self, path: str, kind: str, settings: PanelSettings) -> None:
        for panel in self.panels_of(path, kind):  # every call/leaf of the pair follows
            if panel.settings != settings:
                panel.apply_settings(settings)
        self.settings_changed.emit(path, kind, settings)

    def _drop(self, ident: tuple[str, str]) -> None:
        panel = self.panels.pop(ident)
        self._sort_keys.pop(ident, None)
        dock = self.docks.pop(ident, None)
        self._grid.removeWidget(panel)
        panel.hide()
        panel.setParent(None)
        panel.deleteLater()
        if dock is not None:
            dock.closed.disconnect(self._put_back)
            dock.close()
            dock.deleteLater()

    # ---- popping out ----------------------------------------------------------------------------------------
    def pop_out(self, panel: FeatureMapPanel) -> PanelDock | None:
        """Move ``panel`` into a floating dock of the window: dockable anywhere, on a second screen too."""
        if self._host is None or panel.ident in self.docks:
            return None
        self._grid.removeWidget(panel)
        dock = PanelDock(f"{panel.key or '(model)'} · {panel.kind_label}", self._host)
        dock.setObjectName(f"panel:{panel.kind}:{panel.key}")
        dock.setWidget(panel)
        panel.float_button.setVisible(False)
        dock.closed.connect(self._put_back)
        self.docks[panel.ident] = dock
        self._host.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
        dock.setFloating(True)
        dock.resize(max(panel.width(), 480), max(panel.height(), 520))
        dock.show()
        self._relayout()
        return dock

    def _put_back(self, dock: PanelDock) -> None:
        panel = dock.widget()
        ident = next((i for i, d in self.docks.items() if d is dock), None)
        if ident is None or not isinstance(panel, FeatureMapPanel):
            return
        del self.docks[ident]
        panel.setParent(None)
        panel.float_button.setVisible(True)
        self._host.removeDockWidget(dock)
        dock.deleteLater()
        self._relayout()

    def _relayout(self) -> None:
        while self._grid.count():
            self._grid.takeAt(0)
        for column in range(self._grid.columnCount()):
            self._grid.setColumnStretch(column, 0)

        in_grid = [ident for ident in self.panels if ident not in self.docks]
        self._hint.setVisible(not self.panels)
        if not in_grid:
            return
        kinds = sorted({kind for kind, _ in in_grid}, key=lambda k: KIND_ORDER.get(k, 9))
        idents = sorted(in_grid, key=lambda ident: (self._sort_keys[ident], KIND_ORDER.get(ident[0], 9)))
        if len(kinds) > 1:
            rows = sorted({(self._sort_keys[i], i[1]) for i in idents})
            row_of = {key: r for r, (_, key) in enumerate(rows)}
            for ident in idents:
                self._grid.addWidget(self.panels[ident], row_of[ident[1]], kinds.index(ident[0]))
            self._columns = len(kinds)
        else:
            self._columns = self._flow_columns(len(idents))
            for n, ident in enumerate(idents):
                self._grid.addWidget(self.panels[ident], n // self._columns, n % self._columns)
        for column in range(self._columns):
            self._grid.setColumnStretch(column, 1)
        self._fit_heights()

    def _flow_columns(self, count: int) -> int:
        return max(1, min(count, self.viewport().width() // MIN_PANEL_WIDTH))

    def _fit_heights(self) -> None:
        """Roughly square panels: the mosaics are square, and rows then fill the view without tiny tiles."""
        if not self._columns:
            return
        width = max(1, self.viewport().width() // self._columns)
        height = int(min(max(300, width * 0.9 + 70), 900))
        for ident, panel in self.panels.items():
            panel.setMinimumHeight(300 if ident in self.docks else height)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        in_grid = [ident for ident in self.panels if ident not in self.docks]
        kinds = {kind for kind, _ in in_grid}
        if len(kinds) == 1 and self._flow_columns(len(in_grid)) != self._columns:
            self._relayout()
        else:
            self._fit_heights()
