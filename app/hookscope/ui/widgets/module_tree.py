"""The module tree as a Qt item model, with one tick column per hook kind.

The ``HookRegistry`` is the one source of truth for what is ticked: a tick's check state is read from the
registry. A click asks for the change (``tick_requested``, a direct connection to ``Workspace.set_ticked``), so
the hook is on the live module when ``setData`` returns; the workspace's ``hooks_changed`` then comes back to
``show_ticks``, which repaints the boxes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont

from hookscope.core.common.vocabulary import TERMS_OF_KIND, HookKind
from hookscope.core.engine.attention import AttentionSupport
from hookscope.core.engine.hooks import FALLBACK, HookRegistry
from hookscope.core.engine.tree import NOT_RUN_REASON, ModelSurvey, ModuleInfo
from hookscope.core.pictures.panels import KIND_LABELS
from hookscope.core.pictures.views import shape_text
from hookscope.core.teaching.snippets import kind_hook

# The tick columns in the order the panels show the kinds: what goes in, what comes out, the gradient of what comes
# out, the gradient of what goes in.
NAME, INPUTS, ACTIVATIONS, GRADIENTS, GRAD_INPUTS, ATTENTION, TYPE, PARAMS, SHAPE = range(9)
# Grad is a tensor hook on the output (exact after in-place ops and under a scale-grad edit on the same module);
# register_full_backward_hook is kept for what only it gives: grad_input, the Grad in column. (The "backward" kind,
# a full backward hook's grad_output, stays for the command line's --hooks; sessions that ticked it open as Grad.)
TICK_KINDS: dict[int, HookKind] = {
    INPUTS: "pre",
    ACTIVATIONS: "forward",
    GRADIENTS: "tensor",
    GRAD_INPUTS: "grad_input",
    ATTENTION: "attention",  # only on attention modules; the view hides the column for a model without any
}
KIND_COLUMNS: dict[str, int] = {kind: column for column, kind in TICK_KINDS.items()}
HEADERS = (  # a tick column's header is the vocabulary's
    "Module",
    *(str(TERMS_OF_KIND[TICK_KINDS[column]].column) for column in (INPUTS, ACTIVATIONS, GRADIENTS, GRAD_INPUTS)),
    str(TERMS_OF_KIND["attention"].column),
    "Type",
    "Params",
    "Output shape",
)
# "Grad in" drawn on two lines: four tick columns and 90 px of names fit the Modules dock of a 1024 px window.
HEADER_TEXTS = tuple(text.replace(" ", "\n") if column == GRAD_INPUTS else text for column, text in enumerate(HEADERS))
HEADER_TIPS = {
    **{column: f"{HEADERS[column]}: {kind_hook(kind)}" for column, kind in TICK_KINDS.items()},
    SHAPE: "Output shape in the last run (batch first)",
}
NOT_RUN_COLOR = QColor(128, 132, 140)
DISPLAY = Qt.ItemDataRole.DisplayRole.value
CHECK = Qt.ItemDataRole.CheckStateRole.value
FOREGROUND = Qt.ItemDataRole.ForegroundRole.value
FONT = Qt.ItemDataRole.FontRole.value
ALIGNMENT = Qt.ItemDataRole.TextAlignmentRole.value
TOOLTIP = Qt.ItemDataRole.ToolTipRole.value
USER = Qt.ItemDataRole.UserRole.value
CHECKED, UNCHECKED = Qt.CheckState.Checked, Qt.CheckState.Unchecked
RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
Index = QModelIndex | QPersistentModelIndex


def human_count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 1_000:
        return f"{n / 1_000:.1f}k"
    return str(n)


def _is_checked(value: object) -> bool:
    if isinstance(value, Qt.CheckState):
        return value == Qt.CheckState.Checked
    return int(value) == Qt.CheckState.Checked.value  # type: ignore[call-overload]


class ModuleTreeModel(QAbstractItemModel):
    """``module_tree`` nodes as rows; tick columns backed by a ``HookRegistry``; shapes from the last survey."""

    tick_requested = Signal(object, bool)  # list of (path, kind), ticked

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._nodes: list[ModuleInfo] = []
        self._by_path: dict[str, int] = {}
        self._parent_of: list[int] = []
        self._row_of: list[int] = []
        self._children_of: list[list[int]] = []
        self._registry: HookRegistry | None = None
        self._attention: dict[str, AttentionSupport] = {}  # the attention modules: the Attn column's boxes
        self._survey: ModelSurvey | None = None
        self._model_name = ""
        self._texts: dict[int, tuple[str | None, ...]] = {}  # display text per node, per column
        self._not_run: set[int] = set()  # nodes greyed after the last run
        self._grey = QBrush(NOT_RUN_COLOR)
        self._bold = QFont()
        self._bold.setBold(True)

    # ---- the data behind the model --------------------------------------------------------------------------
    def set_model(self, nodes: list[ModuleInfo], registry: HookRegistry, model_name: str = "") -> None:
        self.beginResetModel()
        self._nodes = list(nodes)
        self._by_path = {node.path: i for i, node in enumerate(self._nodes)}
        self._parent_of = [-1] * len(self._nodes)
        self._row_of = [0] * len(self._nodes)
        self._children_of = [[] for _ in self._nodes]
        for i, node in enumerate(self._nodes):
            for child in node.children:
                j = self._by_path.get(child)
                if j is not None and self._parent_of[j] == -1 and j != i:
                    self._parent_of[j] = i
                    self._row_of[j] = len(self._children_of[i])
                    self._children_of[i].append(j)
        self._registry = registry
        self._attention = registry.attention_modules()
        self._survey = None
        self._model_name = model_name
        self._texts = {}
        self._not_run = set()
        self.endResetModel()

    def set_survey(self, survey: ModelSurvey | None) -> None:
        """New output shapes and greying after a run.

        The engine keeps one survey per input shape and device, so most runs bring the same object: nothing to do.
        Otherwise only cell contents change, never the rows; one layout change refreshes proxies and views at a
        fraction of the cost of a dataChanged per parent (which a filter proxy maps cell by cell).
        """
        if survey is self._survey:
            return
        self.layoutAboutToBeChanged.emit()
        self._survey = survey
        self._texts = {}
        self._not_run = (
            set() if survey is None else {i for i, node in enumerate(self._nodes) if not survey.run_of(node.path).ran}
        )
        self.layoutChanged.emit()

    @property
    def registry(self) -> HookRegistry | None:
        return self._registry

    @property
    def has_attention(self) -> bool:
        """Whether the model has attention modules (the Attn column is shown only then)."""
        return bool(self._attention)

    @property
    def nodes(self) -> list[ModuleInfo]:
        return self._nodes

    def node(self, index: Index) -> ModuleInfo | None:
        if not index.isValid():
            return None
        return self._nodes[index.internalId()]

    def order_of(self, path: str) -> int:
        """Position in the tree (depth-first), for ordering panels like the tree."""
        return self._by_path.get(path, len(self._nodes))

    def index_of(self, path: str, column: int = NAME) -> QModelIndex:
        i = self._by_path.get(path)
        if i is None:
            return QModelIndex()
        return self.createIndex(self._row_of[i], column, i)

    def types(self) -> list[str]:
        return sorted({node.type_name for node in self._nodes})

    def paths_of_type(self, type_name: str) -> list[str]:
        return [node.path for node in self._nodes if node.type_name == type_name]

    def ran(self, path: str) -> bool | None:
        """Whether the module ran in the last pass (None before the first run)."""
        if self._survey is None:
            return None
        return self._survey.run_of(path).ran

    # ---- ticking --------------------------------------------------------------------------------------------
    def is_ticked(self, path: str, kind: str) -> bool:
        return self._registry is not None and self._registry.has(path, cast(HookKind, kind))

    def set_ticked(self, pairs: Iterable[tuple[str, str]], ticked: bool) -> None:
        """Ask for many (path, kind) pairs at once (the context menu's "every Conv2d")."""
        wanted = [(path, kind) for path, kind in pairs if path in self._by_path]
        if wanted:
            self.tick_requested.emit(wanted, ticked)

    def show_ticks(self, changes: Iterable[tuple[str, str, bool]]) -> None:
        """Repaint the boxes of pairs whose hooks were just registered or removed."""
        for path, kind, _ in changes:
            column = KIND_COLUMNS.get(kind)
            if column is not None and path in self._by_path:
                index = self.index_of(path, column)
                self.dataChanged.emit(index, index, [Qt.ItemDataRole.CheckStateRole])

    # ---- QAbstractItemModel ---------------------------------------------------------------------------------
    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        # Bounds checked here rather than with hasIndex(): proxies call this thousands of times per update.
        if row < 0 or not 0 <= column < len(HEADERS):
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, 0) if self._nodes and row == 0 else QModelIndex()
        if parent.column() != 0:
            return QModelIndex()
        children = self._children_of[parent.internalId()]
        if row >= len(children):
            return QModelIndex()
        return self.createIndex(row, column, children[row])

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        p = self._parent_of[index.internalId()]
        if p < 0:
            return QModelIndex()
        return self.createIndex(self._row_of[p], 0, p)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if not parent.isValid():
            return 1 if self._nodes else 0
        if parent.column() != 0:
            return 0
        return len(self._children_of[parent.internalId()])

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return HEADER_TEXTS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(section)
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        flags = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        if index.column() == ATTENTION:
            support = self._attention.get(self._nodes[index.internalId()].path)
            if support is None:
                return flags  # no box: not an attention module
            # A module whose weights cannot be read exactly keeps its box, disabled; the tooltip says why.
            return flags | Qt.ItemFlag.ItemIsUserCheckable if support.capturable else Qt.ItemFlag.ItemIsSelectable
        if index.column() in TICK_KINDS:
            flags |= Qt.ItemFlag.ItemIsUserCheckable
        return flags

    def data(self, index: Index, role: int = DISPLAY) -> object:
        # A tree paint asks every visible cell for several roles: plain int compares and cached text keep it fast.
        if not index.isValid():
            return None
        role = int(role)
        i = index.internalId()
        column = index.column()
        if role == DISPLAY:
            return self._text_of(i)[column]
        if role == CHECK:
            if column not in TICK_KINDS or (column == ATTENTION and self._nodes[i].path not in self._attention):
                return None
            ticked = self._registry is not None and self._registry.has(self._nodes[i].path, TICK_KINDS[column])
            return CHECKED if ticked else UNCHECKED
        if role == FOREGROUND:
            return self._grey if i in self._not_run else None
        if role == FONT:
            return self._bold if i == 0 and column == NAME else None
        if role == ALIGNMENT:
            return RIGHT if column == PARAMS else None
        if role == TOOLTIP:
            return self._tooltip(self._nodes[i], column)
        if role == USER:
            return self._nodes[i].path
        return None

    def _text_of(self, i: int) -> tuple[str | None, ...]:
        texts = self._texts.get(i)
        if texts is None:
            node = self._nodes[i]
            texts = self._texts[i] = tuple(self._display(node, column) for column in range(len(HEADERS)))
        return texts

    def setData(self, index: Index, value: object, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid() or role != Qt.ItemDataRole.CheckStateRole or index.column() not in TICK_KINDS:
            return False
        if not self.flags(index) & Qt.ItemFlag.ItemIsUserCheckable:
            return False  # not an attention module, or one whose weights cannot be captured
        node = self._nodes[index.internalId()]
        kind, ticked = TICK_KINDS[index.column()], _is_checked(value)
        if self.is_ticked(node.path, kind) != ticked:
            self.tick_requested.emit([(node.path, kind)], ticked)
        return True

    # ---- text -----------------------------------------------------------------------------------------------
    def _display(self, node: ModuleInfo, column: int) -> str | None:
        if column == NAME:
            return f"{node.name} ({self._model_name})" if node.path == "" and self._model_name else node.name
        if column == TYPE:
            return node.type_name
        if column == PARAMS:
            return human_count(node.params) if node.params else ""
        if column == SHAPE and self._survey is not None:
            run = self._survey.run_of(node.path)
            if not run.ran:
                return "did not run"
            shapes = list(dict.fromkeys(run.output_shapes))
            text = ", ".join(shape_text(s) for s in shapes[:3]) + (" …" if len(shapes) > 3 else "")
            return f"{text}  ({run.calls} calls)" if run.calls > 1 else text
        return None

    def _tooltip(self, node: ModuleInfo, column: int) -> str:
        lines = [node.path or "(the whole model)", node.type_name]
        if node.params:
            lines.append(f"{node.params:,} parameters")
        if column == ATTENTION:
            support = self._attention.get(node.path)
            if support is None:
                lines.append("Not an attention module: Attn is for the modules that compute attention weights")
                return "\n".join(lines)
            if not support.capturable:
                lines.append(f"Attn cannot be ticked: {support.reason}.")
                return "\n".join(lines)
        if column in TICK_KINDS and self._registry is not None:
            kind = TICK_KINDS[column]
            info = next((h for h in self._registry.handles() if h.path == node.path and h.kind == kind), None)
            if info is not None:
                lines.append(f"{KIND_LABELS[kind]} hook: {info.method}")
                if info.method == FALLBACK and info.note:
                    lines.append(info.note)
            else:
                method = kind_hook(kind).split(":", 1)[0]  # the hook a tick registers; the header says why
                lines.append(f"Tick to hook its {KIND_LABELS[kind].lower()} ({method})")
        # Every cell's tooltip, not only Shape's: a narrow dock hides the Shape column (ModuleTreeView.fit_name_column)
        if self._survey is not None and self._survey.run_of(node.path).ran:
            run = self._survey.run_of(node.path)
            lines.append(
                f"Output in the last run ({run.calls} call{'s' if run.calls > 1 else ''}): "
                + ", ".join(shape_text(s) for s in run.output_shapes)
            )
        if self.ran(node.path) is False:
            lines.append(f"Greyed: {NOT_RUN_REASON}.")
        return "\n".join(lines)


class ModuleFilterProxy(QSortFilterProxyModel):
    """Shows modules whose path or type contains the filter text, with their ancestors."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._text = ""
        self.setRecursiveFilteringEnabled(True)
        # The filter reads names and types, which never change: re-filtering on every dataChanged (ticks,
        # shapes after a run) would only cost time.
        self.setDynamicSortFilter(False)

    def set_text(self, text: str) -> None:
        if hasattr(self, "endFilterChange"):  # Qt >= 6.10 (6.9 has only the begin); invalidateFilter() is deprecated
            self.beginFilterChange()
            self._text = text.strip().lower()
            self.endFilterChange()
        else:
            self._text = text.strip().lower()
            self.invalidateFilter()

    @property
    def text(self) -> str:
        return self._text

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        if not self._text:
            return True
        source = self.sourceModel()
        index = source.index(source_row, 0, source_parent)
        node = source.node(index) if isinstance(source, ModuleTreeModel) else None
        if node is None:
            return False
        return self._text in node.path.lower() or self._text in node.type_name.lower()
