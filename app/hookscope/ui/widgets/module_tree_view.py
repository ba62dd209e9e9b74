"""The Modules dock's contents: a filter box over the module tree, with tick columns per hook kind."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from PySide6.QtCore import (
    QAbstractItemModel,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QKeyEvent, QMouseEvent, QPainter, QPalette, QPen, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLineEdit,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionHeader,
    QStyleOptionViewItem,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from hookscope.ui.theme import ACCENT, MUTED
from hookscope.ui.widgets.module_tree import (
    ATTENTION,
    HEADERS,
    KIND_COLUMNS,
    NAME,
    PARAMS,
    SHAPE,
    TYPE,
    ModuleFilterProxy,
    ModuleTreeModel,
)

NAME_MIN_WIDTH = 90  # the module names never narrower, however narrow the dock
PARAMS_WIDTH = 50  # "11.7M"
SHAPE_MIN_WIDTH = 80  # the Shape column shown from this width on (elided, its words in the tooltip)
BOX = 13  # px side of a tick box
# The box's outline: Fusion draws an unticked box in the window colour darkened, about 1.1:1 against the dark rows
# (invisible); the muted text colour is about 6:1 against them.
BOX_OUTLINE = QColor(MUTED)
BOX_TICKED = QColor(ACCENT)


def cell_of(option: QStyleOptionViewItem) -> QRect:
    """The cell's rectangle (``option.rect``: a field PySide's type stubs leave out)."""
    return cast(Any, option).rect


class TickDelegate(QStyledItemDelegate):
    """The tick columns' cells: a box drawn in the theme's colours, and a click anywhere in the cell toggles it
    (Qt's own delegate answers only on the 13 px box)."""

    def box_rect(self, cell: QRect) -> QRect:
        return QRect(cell.center().x() - BOX // 2, cell.center().y() - BOX // 2, BOX, BOX)

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        plain = QStyleOptionViewItem(option)
        self.initStyleOption(plain, index)
        fields: Any = plain  # features, widget, rect: fields PySide's type stubs leave out
        fields.features &= ~QStyleOptionViewItem.ViewItemFeature.HasCheckIndicator  # the box is ours
        widget = fields.widget
        style = widget.style() if widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, plain, painter, widget)
        state = index.data(Qt.ItemDataRole.CheckStateRole)
        if state is None:
            return
        ticked = Qt.CheckState(state) == Qt.CheckState.Checked
        box = self.box_rect(fields.rect)
        painter.save()
        if not index.flags() & Qt.ItemFlag.ItemIsEnabled:
            painter.setOpacity(0.35)  # a box that cannot be ticked (Attn of a module whose weights cannot be read)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        if ticked:
            painter.fillRect(box, BOX_TICKED)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            painter.setPen(QPen(QColor("white"), 2))
            x, y = box.x(), box.y()
            painter.drawPolyline([QPoint(x + 3, y + 7), QPoint(x + 5, y + 10), QPoint(x + 10, y + 3)])
        else:
            painter.setPen(QPen(BOX_OUTLINE, 1))
            painter.drawRect(box.adjusted(0, 0, -1, -1))
        painter.restore()

    def editorEvent(
        self,
        event: QEvent,
        model: QAbstractItemModel,
        option: QStyleOptionViewItem,  # noqa: N802
        index: QModelIndex | QPersistentModelIndex,
    ) -> bool:
        if not index.flags() & Qt.ItemFlag.ItemIsUserCheckable:
            return False
        kind = event.type()
        if kind in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonDblClick):
            # Taken, not passed on: a double-click in a tick cell ticks twice, it never folds the branch.
            return (
                isinstance(event, QMouseEvent)
                and event.button() == Qt.MouseButton.LeftButton
                and cell_of(option).contains(event.position().toPoint())
            )
        if kind == QEvent.Type.MouseButtonRelease:
            if not (
                isinstance(event, QMouseEvent)
                and event.button() == Qt.MouseButton.LeftButton
                and cell_of(option).contains(event.position().toPoint())
            ):
                return False
        elif kind == QEvent.Type.KeyPress:
            if not (isinstance(event, QKeyEvent) and event.key() in (Qt.Key.Key_Space, Qt.Key.Key_Select)):
                return False
        else:
            return False
        state = index.data(Qt.ItemDataRole.CheckStateRole)
        ticked = state is not None and Qt.CheckState(state) == Qt.CheckState.Checked
        return model.setData(
            index, Qt.CheckState.Unchecked if ticked else Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole
        )


class TickHeader(QHeaderView):
    """The tree's header. Where the dock is too narrow for the tick columns' titles side by side (a ViT's five
    columns, Attn too, in a 1024 px window), the titles are written upwards, so that each tick column is only as
    wide as its box and the names keep their width; the header grows as tall as the longest title."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.upright = False  # the tick columns' titles written upwards

    def set_upright(self, upright: bool) -> None:
        if upright != self.upright:
            self.upright = upright
            self.updateGeometry()  # the header's height follows sizeHint
            self.viewport().update()

    def upright_height(self) -> int:
        """The height the upward titles need: the longest on one line ("Grad in"), and a margin."""
        return max(self.fontMetrics().horizontalAdvance(HEADERS[c]) for c in KIND_COLUMNS.values()) + 12

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        if self.upright:
            hint.setHeight(max(hint.height(), self.upright_height()))
        return hint

    def paintSection(self, painter: QPainter, rect: QRect, index: int) -> None:  # noqa: N802
        if not self.upright or index not in KIND_COLUMNS.values():
            super().paintSection(painter, rect, index)
            return
        option = QStyleOptionHeader()
        self.initStyleOption(option)
        fields: Any = option  # rect, section, text: fields PySide's type stubs leave out
        fields.rect, fields.section, fields.text = rect, index, ""
        # The style's CE_Header puts back the clip it found as a region, an empty one where there was none, which
        # would clip away everything drawn after it: the painter's state is saved around it.
        painter.save()
        self.style().drawControl(QStyle.ControlElement.CE_Header, option, painter, self)  # the frame, no title
        painter.restore()
        painter.save()
        painter.translate(rect.left(), rect.bottom())
        painter.rotate(-90)  # x now runs up the section, y across it
        painter.setPen(self.palette().color(QPalette.ColorRole.ButtonText))
        painter.drawText(QRect(6, 0, rect.height() - 8, rect.width()),
                         int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), HEADERS[index])  # fmt: skip
        painter.restore()


class ModuleTreeView(QWidget):
    """Filter box and tree; a right-click asks for the module's context menu (``menu_requested``). It takes ``model``
    as its child, so that the model goes with the tree that shows it, after it."""

    menu_requested = Signal(str, QPoint)  # module path ("" for none under the mouse), global position

    def __init__(self, model: ModuleTreeModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.filter_box = QLineEdit(self)
        self.filter_box.setPlaceholderText("Filter modules by name or type (Ctrl+F)")
        self.filter_box.setClearButtonEnabled(True)
        self.tree = QTreeView(self)
        self.tree.setHeader(TickHeader(self.tree))
        # The tree goes before its models, never after: Qt deletes a widget's children in the order they became its
        # children, so the proxy and the model are made this widget's children after the tree. A source model
        # deleted first (it was the window's child, made before the docks) makes the proxy drop its index mapping
        # without telling the view, whose rows then point at freed memory; the next scroll-bar clamp (the window's
        # docks going, at exit, after the tree had been scrolled) read them and crashed the process (issue 43).
        self.proxy = ModuleFilterProxy(self)
        model.setParent(self)
        self.proxy.setSourceModel(model)
        self.filter_box.textChanged.connect(self._on_filter)
        self.tree.setModel(self.proxy)
        self.tree.setUniformRowHeights(True)
        self.tree.setIndentation(12)  # deep trees keep their names readable in a narrow dock
        # A name that must give way loses its middle ("Sequ…ial"), not its end; the full path is in the tooltip.
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.ticks = TickDelegate(self.tree)
        for column in KIND_COLUMNS.values():
            self.tree.setItemDelegateForColumn(column, self.ticks)
        self.tree.customContextMenuRequested.connect(self._on_context_menu)
        model.modelReset.connect(self.fit_type_column)  # a model loaded: its own type names
        model.modelReset.connect(self._show_attention_column)
        header = self.tree.header()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for column, width in ((NAME, 150), (TYPE, 104), (PARAMS, PARAMS_WIDTH), (SHAPE, 110)):
            header.resizeSection(column, width)
        # The tick columns as narrow as their titles and check boxes allow, in whatever font ("Grad in" is on two
        # lines), so that in a 1024 px window the names keep 90 px beside all four.
        header.setMinimumSectionSize(16)
        self.check = self.tree.style().pixelMetric(QStyle.PixelMetric.PM_IndicatorWidth, None, self.tree) + 6
        # Each tick column's width with its title written across (fit_name_column narrows them to the box, titles
        # upwards, where they do not fit side by side).
        self.tick_widths: dict[int, int] = {}
        for column in KIND_COLUMNS.values():
            self.tree.resizeColumnToContents(column)
            self.tick_widths[column] = max(header.sectionSize(column), self.check)
            header.resizeSection(column, self.tick_widths[column])
        self._show_attention_column()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.filter_box)
        layout.addWidget(self.tree, 1)

    def focus_filter(self) -> None:
        self.filter_box.setFocus()
        self.filter_box.selectAll()

    def click_tick(self, path: str, kind: str, ticked: bool = True) -> bool:
        """Tick or untick exactly as a click on the check box does (through the proxy when the row is shown)."""
        column = KIND_COLUMNS.get(kind)
        if column is None:
            return False
        source = self.model.index_of(path, column)
        if not source.isValid():
            return False
        index = self.proxy.mapFromSource(source)
        state = Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked
        if index.isValid():
            return self.proxy.setData(index, state, Qt.ItemDataRole.CheckStateRole)
        return self.model.setData(source, state, Qt.ItemDataRole.CheckStateRole)

    def expand_to(self, paths: Iterable[str]) -> None:
        """Open the tree down to every path in ``paths`` and scroll the first (in tree order) into view."""
        paths = sorted(set(paths), key=self.model.order_of)
        self.tree.expand(self.proxy.mapFromSource(self.model.index_of("")))
        for path in paths:
            parts = path.split(".")
            for n in range(1, len(parts)):
                index = self.proxy.mapFromSource(self.model.index_of(".".join(parts[:n])))
                if index.isValid():
                    self.tree.expand(index)
        self.fit_name_column()
        if paths:
            self.tree.scrollTo(
                self.proxy.mapFromSource(self.model.index_of(paths[0])), QAbstractItemView.ScrollHint.PositionAtCenter
            )

    def _show_attention_column(self) -> None:
        """The Attn column only for a model with attention modules, as wide as its title (it was hidden, at no
        width, when the other tick columns were fitted)."""
        shown = self.model.has_attention
        self.tree.setColumnHidden(ATTENTION, not shown)
        if shown:
            title = self.tree.fontMetrics().horizontalAdvance(HEADERS[ATTENTION]) + 12
            self.tick_widths[ATTENTION] = max(self.tick_widths[ATTENTION], title, self.check)
        self.fit_name_column()

    def fit_name_column(self) -> None:
        """The name column as wide as its names, but never so wide that the tick columns leave a narrow dock."""
        self.tree.resizeColumnToContents(NAME)
        header = cast(TickHeader, self.tree.header())
        # The viewport less the vertical scroll bar whether it shows yet or not: expanding the tree brings the bar
        # only after this runs, and would push the last tick column out of view.
        bar = self.tree.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self.tree)
        width = self.tree.maximumViewportSize().width() - bar
        shown = [column for column in KIND_COLUMNS.values() if not self.tree.isColumnHidden(column)]
        # Titles across where the names keep their least width beside them, else upwards over box-wide columns.
        upright = width - sum(self.tick_widths[column] for column in shown) - 4 < NAME_MIN_WIDTH
        header.set_upright(upright)
        widths = {column: self.check if upright else self.tick_widths[column] for column in shown}
        for column, tick_width in widths.items():
            header.resizeSection(column, tick_width)
        room = width - sum(widths.values()) - 4  # not the sections' sizes: the last one shown may be stretched
        wanted = min(max(header.sectionSize(NAME), NAME_MIN_WIDTH), 300)
        # Type, Params and Shape in turn, each where the names keep most of their width beside it (under a third
        # given up, never under NAME_MIN_WIDTH); the first that does not fit and those after it are hidden, never
        # reached by scrolling sideways (a narrow dock, 1024x700, scrolled to them): every row's tooltip says its
        # type, parameters and output shape, and a wider dock shows them again.
        keep = max(NAME_MIN_WIDTH, int(wanted * 0.7))
        used, fits = 0, True
        for column, least in ((TYPE, self.fit_type_column()), (PARAMS, PARAMS_WIDTH), (SHAPE, SHAPE_MIN_WIDTH)):
            fits = fits and room - used - least >= keep
            self.tree.setColumnHidden(column, not fits)
            if fits:
                header.resizeSection(column, least)
                used += least
        # The names take the rest (the last column shown stretches over what they leave); Shape, when shown, takes
        # what is beyond the names' own width.
        names = max(NAME_MIN_WIDTH, room - used)
        if not self.tree.isColumnHidden(SHAPE):
            names = min(names, max(wanted, keep))
        header.resizeSection(NAME, names)

    def width_with_type(self) -> int:
        """The width this view needs to show the Type column beside the names and the tick columns (titles across),
        by fit_name_column's rule: what a window with room to spare gives its dock (MainWindow.fit_docks)."""
        names = max(self.tree.sizeHintForColumn(NAME), self.tree.header().sectionSizeHint(NAME))  # as fitted
        wanted = min(max(names, NAME_MIN_WIDTH), 300)
        shown = [column for column in KIND_COLUMNS.values() if not self.tree.isColumnHidden(column)]
        ticks = sum(self.tick_widths[column] for column in shown)
        bar = self.tree.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self.tree)
        frame = self.width() - self.tree.maximumViewportSize().width()  # the layout's margins, the tree's frame
        return max(NAME_MIN_WIDTH, int(wanted * 0.7)) + ticks + self.type_width() + 4 + bar + frame

    def fit_type_column(self) -> int:
        """The Type column as wide as the longest type name of the whole model, folded rows too (it was 104 px:
        "AdaptiveAvgPool2d" and "BatchNorm2d" were cut at every window size); returns that width."""
        width = self.type_width()
        self.tree.header().resizeSection(TYPE, width)
        return width

    def type_width(self) -> int:
        """The width that shows the longest type name of the model whole."""
        metrics = self.tree.fontMetrics()
        widest = max((metrics.horizontalAdvance(name) for name in self.model.types()), default=0)
        title = metrics.horizontalAdvance("Type")
        margin = 2 * self.tree.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, self.tree) + 12
        return max(widest, title) + margin

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_name_column()

    def _on_filter(self, text: str) -> None:
        self.proxy.set_text(text)
        if text.strip():
            self.tree.expandAll()
        else:
            self.tree.collapseAll()
            registry = self.model.registry
            self.expand_to([h.path for h in registry.handles()] if registry is not None else [])

    def _on_context_menu(self, position: QPoint) -> None:
        index = self.tree.indexAt(position)
        node = self.model.node(self.proxy.mapToSource(index)) if index.isValid() else None
        self.menu_requested.emit(node.path if node is not None else "\0", self.tree.viewport().mapToGlobal(position))
