"""The central page of record panels: one card per ticked module, in module-tree order.

A card holds its module's panels with the hook kinds side by side (In | Act | Grad | Grad in: ``KIND_ORDER``), one
row per record (a module called twice, or one with a structured output, has several); where the page is too narrow
for the kinds side by side at ``MIN_PANEL_WIDTH``, they stack inside the card. Cards of few kinds flow several to a
row on a wide page. Nothing is clipped: the page scrolls vertically, and horizontally when it is narrower than one
panel.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from PySide6.QtCore import QEvent, QObject, QPoint, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen, QResizeEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QStyle,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import Shiboken
from superqt import QElidingLabel

from hookscope.core.engine.hooks import Record, record_key
from hookscope.core.pictures.panels import KIND_ORDER, PanelPicture, PanelSettings
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.theme import BORDER
from hookscope.ui.widgets.disposal import detach, dispose, drop_layout
from hookscope.ui.widgets.feature_map_panel import MIN_PANEL_HEIGHT, MIN_PANEL_WIDTH, FeatureMapPanel

PREFERRED_PANEL_WIDTH = 380  # cards of one or two kinds flow side by side on a wide page at about this width a panel
CARD_MARGIN = 6  # inside a card, around its title and panels
CARD_SPACING = 6  # between the panels of a card, and between cards
PAGE_MARGIN = 6
MAX_HEIGHT = 16777215  # QWIDGETSIZE_MAX
PANELS_PER_TURN = 2  # panels built per turn of the event loop after a tick
EMPTY_HINT = (
    "Tick a module in the tree (In = inputs, Act = activations, Grad = gradient of the output,\n"
    "Grad in = gradient of the input) to see what it computes. Drop image files anywhere on the window."
)


class ModuleCard(QFrame):
    """One ticked module: its path, and its panels in a grid (a row per record, a column per kind in the order
    In | Act | Grad | Grad in), or wrapped into as many columns as the page has room for, in lines of equal length
    (four kinds two by two, so the card fills the page's width), down to one column (stacked) on a narrow page.

    A module with several records (called twice, or a structured output) puts ``per_line`` records side by side
    where the page has room, so that its card is as tall as its neighbours."""

    def __init__(self, path: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.setObjectName("moduleCard")
        self.title = QElidingLabel(path or "(model)")
        self.title.setObjectName("panelTitle")
        self.title.setElideMode(Qt.TextElideMode.ElideLeft)
        self.title.setToolTip(path or "(the whole model)")
        self._grid = QGridLayout()
        self._in_grid: list[FeatureMapPanel] = []  # the panels the grid holds
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(CARD_SPACING)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(CARD_MARGIN + 1, CARD_MARGIN - 2, CARD_MARGIN + 1, CARD_MARGIN + 1)
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addLayout(self._grid)
        self.rows: list[list[FeatureMapPanel | None]] = []  # a list per record, a panel (or None) per kind
        self.wrap = 0  # kinds per line where they do not fit side by side (1: stacked); 0: all side by side
        self.per_line = 1  # records side by side
        self._placed: tuple = ()

    @property
    def kinds(self) -> int:
        return len(self.rows[0]) if self.rows else 0

    @property
    def columns(self) -> int:
        """Panels side by side."""
        return self.wrap or max(1, self.kinds * self.per_line)

    @property
    def stacked(self) -> bool:
        """One panel above the other, in one column."""
        return self.wrap == 1

    def panels(self) -> list[FeatureMapPanel]:
        """Its panels in reading order: row by row, In | Act | Grad | Grad in."""
        return [panel for row in self.rows for panel in row if panel is not None]

    @staticmethod
    def width_for(columns: int) -> int:
        """The least width of a card with ``columns`` panels side by side."""
        columns = max(1, columns)
        return columns * MIN_PANEL_WIDTH + (columns - 1) * CARD_SPACING + 2 * (CARD_MARGIN + 1)

    def title_height(self) -> int:
        """The card's height above and below its panels."""
        layout = self.layout()
        assert layout is not None  # made in __init__
        margins = layout.contentsMargins()
        return self.title.sizeHint().height() + layout.spacing() + margins.top() + margins.bottom()

    def minimum_width(self) -> int:
        return self.width_for(self.columns)

    def set_panels(self, rows: list[list[FeatureMapPanel | None]]) -> None:
        self.rows = rows
        self._place()

    def set_shape(self, wrap: int = 0, per_line: int = 1) -> None:
        """``wrap`` kinds to a line (0: all of them side by side, with ``per_line`` records side by side)."""
        self.wrap, self.per_line = (wrap if 0 < wrap < self.kinds else 0), max(1, per_line)
        if self.wrap:
            self.per_line = 1
        self._place()

    def _place(self) -> None:
        placed = (self.wrap, self.per_line, tuple(tuple(row) for row in self.rows))  # widgets: by identity
        if placed == self._placed:
            return
        self._placed = placed
        # Taken out by name, not by takeAt(): a layout item taken from Python gets a Python wrapper over an object
        # Qt made and may free without PySide knowing (see PanelArea._place_rows).
        for panel in self._in_grid:
            if Shiboken.isValid(panel):
                self._grid.removeWidget(panel)
        self._in_grid = self.panels()
        for column in range(self._grid.columnCount()):
            self._grid.setColumnStretch(column, 0)
        if self.wrap:
            lines = -(-self.kinds // self.wrap)  # lines of a record
            for n, row in enumerate(self.rows):
                for c, cell in enumerate(row):
                    if cell is not None:
                        self._grid.addWidget(cell, n * lines + c // self.wrap, c % self.wrap)
            for column in range(self.wrap):
                self._grid.setColumnStretch(column, 1)
        else:
            kinds = self.kinds
            for n, row in enumerate(self.rows):
                line, offset = divmod(n, self.per_line)
                for c, cell in enumerate(row):
                    if cell is not None:
                        self._grid.addWidget(cell, line, offset * kinds + c)
            for column in range(self.columns):
                self._grid.setColumnStretch(column, 1)
        for panel in self.panels():
            panel.set_in_card(True)
            panel.show()

    def fit_width(self, width: int, max_height: int) -> None:
        """Take ``width`` pixels; each panel gets its share, and a height that keeps its mosaic about square but
        no taller than ``max_height`` (so that a whole panel can be scrolled into view)."""
        self.setFixedWidth(width)
        columns = self.columns
        inner = width - 2 * (CARD_MARGIN + 1) - (columns - 1) * CARD_SPACING
        panel_width = max(MIN_PANEL_WIDTH, inner // columns)
        for panel in self.panels():
            height = max(MIN_PANEL_HEIGHT, min(panel.height_for_width(panel_width), max_height))
            if panel.minimumHeight() != height or panel.maximumHeight() != height:
                panel.setFixedHeight(height)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(QColor(BORDER), 1))
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 6, 6)
        painter.end()


class _DockCloseWatcher(QObject):
    """Tells when a popped-out panel's dock gets a close event (its ✕): the dock is the host's (``Host.add_dock``),
    so it is watched rather than subclassed."""

    closed = Signal(object)  # the dock

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Close and isinstance(watched, QDockWidget):
            self.closed.emit(watched)
        return False


class PanelArea(QScrollArea):
    """Owns the record panels; the window tells it which (path, kind) pairs are ticked and what a run found."""

    close_requested = Signal(str, str)
    channel_clicked = Signal(object, int)
    channel_menu_requested = Signal(object, int, object)  # picture, channel, global QPoint (a tile right-clicked)
    settings_changed = Signal(str, str, object)
    message = Signal(str, bool)  # a panel's message for the user (exports), and whether it is an error
    pictures_wanted = Signal(object)  # [(kind, key)]: panels scrolled into view whose run left their pictures to make

    def __init__(self, order_of: Callable[[str], int], host: Host | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._order_of = order_of
        self._host = host  # the window that holds popped-out panels as docks (listed in its View menu)
        self.docks: dict[tuple[str, str], QDockWidget] = {}
        self._dock_watcher = _DockCloseWatcher(self)
        self._dock_watcher.closed.connect(self._put_back)
        self.panels: dict[tuple[str, str], FeatureMapPanel] = {}  # (kind, record key) -> panel
        self._sort_keys: dict[tuple[str, str], tuple[int, int, str]] = {}  # (tree order, call, leaf)
        self._cards: dict[str, ModuleCard] = {}  # module path -> its card
        self._order: list[str] = []  # the cards' paths in module-tree order
        self._flow: tuple[tuple[ModuleCard, ...], ...] = ()  # the cards row by row, as placed
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)  # a page narrower than a panel
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        container = QWidget()
        container.setObjectName("panelPage")
        outer = QVBoxLayout(container)
        outer.setContentsMargins(PAGE_MARGIN, PAGE_MARGIN, PAGE_MARGIN, PAGE_MARGIN)
        self._hint = QLabel(EMPTY_HINT)
        self._hint.setObjectName("emptyHint")
        self._hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._hint.setWordWrap(True)
        outer.addWidget(self._hint, 1)
        self._rows = QVBoxLayout()  # one QHBoxLayout of cards per row
        self._lines: list[tuple[QHBoxLayout, list[ModuleCard]]] = []  # those rows, with the cards in each
        self._rows.setSpacing(CARD_SPACING)
        outer.addLayout(self._rows)
        outer.addStretch(1)  # spare height goes below the rows, not into the panels
        self.setWidget(container)
        # Ticked pairs whose panels are still to be built (``ensure_pairs``), in the order they were ticked.
        self._pending: OrderedDict[tuple[str, str], Callable[[str, str], PanelSettings]] = OrderedDict()
        self._pending_timer = QTimer(self)
        self._pending_timer.setSingleShot(True)
        self._pending_timer.setInterval(0)
        self._pending_timer.timeout.connect(self._make_pending)
        # Panels whose last run made no picture for them while they were out of view (``hidden_idents``), and
        # those of them already asked for (``pictures_wanted``); checked after every scroll and layout.
        self._stale: set[tuple[str, str]] = set()
        self._asked: set[tuple[str, str]] = set()
        self._ahead = 1.0  # how far ahead of the view the last run's pictures were made, in viewport heights
        self._shown_check = QTimer(self)
        self._shown_check.setSingleShot(True)
        self._shown_check.setInterval(0)  # after the layout has placed the cards
        self._shown_check.timeout.connect(self._want_shown)
        self.verticalScrollBar().valueChanged.connect(self._want_shown)
        self.horizontalScrollBar().valueChanged.connect(self._want_shown)

    # ---- which panels exist ---------------------------------------------------------------------------------
    def cards(self) -> list[ModuleCard]:
        """The module cards in module-tree order."""
        return [self._cards[path] for path in self._order if path in self._cards]

    def holds(self, panel: FeatureMapPanel) -> bool:
        """Whether ``panel`` is on the page (in a card), not popped out into a dock."""
        return any(panel in card.panels() for card in self._cards.values())

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
                panel = self._make(
                    path, kind, record_key(path), settings_for(path, kind), (self._order_of(path), 0, "")
                )
                panel.show_message("Waiting for the run…")
                made += 1
        if made:
            self._relayout()
        if self._pending:
            self._pending_timer.start()

    def view_size(self) -> tuple[int, int] | None:
        """The largest mosaic view among the panels in the area (not popped out), in device pixels (what a run colours mosaics
        at); None before the panels are laid out, and then mosaics are coloured whole."""
        views = [panel.view_size() for ident, panel in self.panels.items() if ident not in self.docks]
        sizes = [size for size in views if size is not None]
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
    # long because: one run's outcome applied to every panel in one pass, in the order that keeps what is on screen
    # first
    def show_results(
        self,
        pictures: Iterable[PanelPicture],
        ticked: set[tuple[str, str]],
        missing_reason: Callable[[str, str], str],
        settings_for: Callable[[str, str], PanelSettings],
        views: Mapping[tuple[str, str], Mapping[str, PanelPicture]] | None = None,
        deferred: Iterable[Record] = (),
        ahead: float = 1.0,
    ) -> None:
        """Fill every ticked pair's panels from one run; pairs without a record say why. ``views``: with image B
        set, each record's (kind, key) A / B / A − B pictures (``Comparison.views``); each panel shows the one
        its settings' ``view`` names. ``deferred``: records of panels that were out of view, whose pictures are
        made when they scroll in (``pictures_wanted``); until then such a panel keeps what it showed. ``ahead``:
        the margin, in viewport heights, the run drew beyond the view (``hidden_idents``); the deferred panels
        within it are asked for at once, the others when they scroll within it."""
        self._ahead = ahead
        self._pending.clear()  # every ticked pair gets its panel here
        self._stale.clear()
        self._asked.clear()
        seen: set[tuple[str, str]] = set()
        covered: set[tuple[str, str]] = set()
        changed = False
        pair: tuple[str, str]
        ident: tuple[str, str]
        for record in deferred:
            pair = (record.path, record.kind)
            if pair not in ticked:
                continue
            ident = (record.kind, record.key)
            if ident not in self.panels:
                self._make(
                    record.path,
                    record.kind,
                    record.key,
                    settings_for(*pair),
                    (self._order_of(record.path), record.call, record.leaf),
                ).show_message("Drawing…")
                changed = True
            self._stale.add(ident)
            seen.add(ident)
            covered.add(pair)
        for picture in pictures:
            pair = (picture.path, picture.kind)
            if pair not in ticked:
                continue
            ident = (picture.kind, picture.key)
            panel = self.panels.get(ident)
            if panel is None:
                panel = self._make(
                    picture.path,
                    picture.kind,
                    picture.key,
                    picture.settings,
                    (self._order_of(picture.path), picture.call, picture.leaf),
                )
                changed = True
            record_views = views.get(ident) if views else None
            if record_views:
                panel.show_views(dict(record_views))
            else:
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
                self._make(
                    path, kind, record_key(path), settings_for(path, kind), (self._order_of(path), 0, "")
                ).show_message(missing_reason(path, kind))
                changed = True
        if changed:
            self._relayout()
        self._shown_check.start()

    def show_pictures(
        self,
        pictures: Iterable[PanelPicture],
        views: Mapping[tuple[str, str], Mapping[str, PanelPicture]] | None = None,
    ) -> None:
        """Pictures made for panels that scrolled into view after their run (``pictures_wanted``)."""
        for picture in pictures:
            ident = (picture.kind, picture.key)
            panel = self.panels.get(ident)
            if panel is None or ident not in self._stale:
                continue  # unticked since, or drawn by a newer run
            self._stale.discard(ident)
            self._asked.discard(ident)
            record_views = views.get(ident) if views else None
            if record_views:
                panel.show_views(dict(record_views))
            else:
                panel.show_picture(picture)

    @property
    def stale(self) -> frozenset[tuple[str, str]]:
        """Panels whose picture waits until they are in view."""
        return frozenset(self._stale)

    def in_view(self, panel: FeatureMapPanel, ahead: float = 1.0) -> bool:
        """Whether ``panel`` is on the page and in view or within ``ahead`` viewport heights of it (about to scroll
        in). A popped-out panel is always in view; a page not laid out yet shows everything."""
        if panel.ident in self.docks:
            return True
        page = self.widget()
        if page is None or not self.isVisible() or not panel.isVisibleTo(page):
            return True  # the page, or this panel, not laid out yet: no telling where it will be
        viewport = self.viewport()
        margin = round(viewport.height() * ahead)
        seen = QRect(
            self.horizontalScrollBar().value(),
            self.verticalScrollBar().value() - margin,
            viewport.width(),
            viewport.height() + 2 * margin,
        )
        return seen.intersects(QRect(panel.mapTo(page, QPoint(0, 0)), panel.size()))

    def hidden_idents(self, ahead: float = 1.0) -> frozenset[tuple[str, str]]:
        """The panels out of view (more than ``ahead`` pages away): a run leaves their pictures until they scroll
        in."""
        if not self.isVisible():
            return frozenset()
        return frozenset(ident for ident, panel in self.panels.items() if not self.in_view(panel, ahead))

    def _want_shown(self, *_: object) -> None:
        """Ask for the pictures of the waiting panels in view, then (a second request, made after the first) of
        those within the last run's margin (a page for an image), so that what is on screen comes first. A video
        frame's margin is the view itself: the page below is not drawn for a frame that the next one replaces
        before a person scrolls (it was a second picture job, and a second hand-over, every frame)."""
        waiting = [ident for ident in self._stale - self._asked if self.in_view(self.panels[ident], self._ahead)]
        now = [ident for ident in waiting if self.in_view(self.panels[ident], ahead=0)]
        soon = [ident for ident in waiting if ident not in now]
        for wanted in (now, soon):
            if wanted:
                self._asked.update(wanted)
                self.pictures_wanted.emit(wanted)

    # ---- internals ------------------------------------------------------------------------------------------
    def _make(
        self, path: str, kind: str, key: str, settings: PanelSettings, sort_key: tuple[int, int, str]
    ) -> FeatureMapPanel:
        panel = FeatureMapPanel(path, kind, key, settings)
        panel.close_requested.connect(self.close_requested)
        panel.channel_clicked.connect(self.channel_clicked)
        panel.message.connect(self.message)
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
        self._stale.discard(ident)
        self._asked.discard(ident)
        self._sort_keys.pop(ident, None)
        dock = self.docks.pop(ident, None)
        panel.release()  # its pictures go now, not when Python's collector reaches the plot's cycles
        dispose(panel)
        if dock is not None and self._host is not None:
            dock.removeEventFilter(self._dock_watcher)
            self._host.remove_dock(dock.objectName())

    # ---- popping out ----------------------------------------------------------------------------------------
    def pop_out(self, panel: FeatureMapPanel) -> QDockWidget | None:
        """Move ``panel`` into a floating dock of the window (``Host.add_dock``: listed in its View menu like every
        dock), dockable anywhere, on a second screen too."""
        if self._host is None or panel.ident in self.docks:
            return None
        panel.setMinimumHeight(MIN_PANEL_HEIGHT)  # the card gave it a fixed height; the dock resizes it
        panel.setMaximumHeight(MAX_HEIGHT)
        panel.set_in_card(False)
        panel.float_button.setVisible(False)
        title = f"{panel.key or '(model)'} · {panel.kind_label}"
        dock = self._host.add_dock(DockSpec(f"panel:{panel.kind}:{panel.key}", title, "right", scroll=False), panel)
        dock.installEventFilter(self._dock_watcher)
        self.docks[panel.ident] = dock
        dock.setFloating(True)
        dock.resize(max(panel.width(), 480), max(panel.height(), 520))
        dock.show()
        self._relayout()
        return dock

    def _put_back(self, dock: QDockWidget) -> None:
        panel = dock.widget()
        ident = next((i for i, d in self.docks.items() if d is dock), None)
        if ident is None or not isinstance(panel, FeatureMapPanel) or self._host is None:
            return
        del self.docks[ident]
        dock.removeEventFilter(self._dock_watcher)
        detach(panel)
        panel.float_button.setVisible(True)
        self._host.remove_dock(dock.objectName())
        self._relayout()

    def _relayout(self) -> None:
        """Cards for the panels in the area (one per module, in module-tree order), flowed into rows."""
        in_area = [ident for ident in self.panels if ident not in self.docks]
        self._hint.setVisible(not self.panels)
        by_path: dict[str, list[tuple[str, str]]] = {}
        for ident in in_area:
            by_path.setdefault(self.panels[ident].path, []).append(ident)
        for path in [path for path in self._cards if path not in by_path]:
            dispose(self._cards.pop(path))
        for path, idents in by_path.items():
            card = self._cards.get(path)
            if card is None:
                card = self._cards[path] = ModuleCard(path)
            rows = sorted({self._sort_keys[ident][1:] for ident in idents})
            kinds = sorted({kind for kind, _ in idents}, key=lambda k: KIND_ORDER.get(k, 9))
            grid: list[list[FeatureMapPanel | None]] = [[None] * len(kinds) for _ in rows]
            for ident in idents:
                grid[rows.index(self._sort_keys[ident][1:])][kinds.index(ident[0])] = self.panels[ident]
            card.set_panels(grid)
        self._order = sorted(self._cards, key=lambda path: (min(self._sort_keys[i][0] for i in by_path[path]), path))
        self._fit()
        if self._stale:
            self._shown_check.start()

    def page_width(self) -> int:
        """The width the cards are laid out in: the viewport's, less the vertical scroll bar whether it shows or
        not (so that the bar coming and going cannot make the layout flip back and forth)."""
        extent = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return max(1, self.maximumViewportSize().width() - extent - 2 * PAGE_MARGIN)

    def page_height(self) -> int:
        """The height a panel can take and still be seen whole: the viewport's, less a horizontal scroll bar."""
        extent = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return max(1, self.maximumViewportSize().height() - extent - 2 * PAGE_MARGIN)

    def _fit(self) -> None:
        """Size the cards to the page: kinds side by side where they fit at MIN_PANEL_WIDTH, else wrapped into the
        columns that fit (lines of equal length: four kinds two by two where three would fit), down to stacked; cards
        of one kind flow several to a row, about PREFERRED_PANEL_WIDTH each."""
        width = self.page_width()
        slots = max(1, (width + CARD_SPACING) // (PREFERRED_PANEL_WIDTH + CARD_SPACING))
        slot = (width - (slots - 1) * CARD_SPACING) / slots
        rows: list[list[tuple[ModuleCard, int]]] = []
        used = slots
        for path in self._order:
            card = self._cards[path]
            if ModuleCard.width_for(card.kinds) > width:
                fit = max([c for c in range(1, card.kinds) if ModuleCard.width_for(c) <= width], default=1)
                lines = -(-card.kinds // fit)
                card.set_shape(wrap=-(-card.kinds // lines))
            else:
                card.set_shape(per_line=min(len(card.rows), slots // card.kinds))
            span = min(card.columns, slots)
            if used + span > slots:
                rows.append([])
                used = 0
            card_width = max(round(span * slot + (span - 1) * CARD_SPACING), card.minimum_width())
            rows[-1].append((card, card_width))
            used += span
        signature = tuple(tuple(card for card, _ in row) for row in rows)
        if signature != self._flow:
            self._flow = signature
            self._place_rows(rows)
        max_height = self.page_height()
        for row in rows:
            for card, card_width in row:
                card.fit_width(card_width, max_height - card.title_height())

    def _place_rows(self, rows: list[list[tuple[ModuleCard, int]]]) -> None:
        # The old lines are taken apart through what this object made and holds (removeWidget, drop_layout), never
        # through takeAt(), and a new line joins the rows while still empty: PySide gives a wrapper to every item
        # of a filled layout added to another (its stretch, a QWidgetItem per card), owned by the rows, and those
        # outlived the line's items in PySide's table of wrappers, handed back later as the wrong objects
        # (ui/widgets/disposal.py; issue 48).
        for line, cards in self._lines:
            for card in cards:
                if Shiboken.isValid(card):
                    line.removeWidget(card)
            drop_layout(line)
        self._lines = []
        for row in rows:
            line = QHBoxLayout()
            line.setSpacing(CARD_SPACING)
            self._rows.addLayout(line)  # empty: see above
            for card, _ in row:
                line.addWidget(card, 0, Qt.AlignmentFlag.AlignTop)
                card.show()
            line.addStretch(1)
            self._lines.append((line, [card for card, _ in row]))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self._cards:
            self._fit()
        if self._stale:
            self._shown_check.start()
