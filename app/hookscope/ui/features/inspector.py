"""The hook inspector feature: every live hook handle on the model, and the plain PyTorch that registers it.

It lists ``registry.live_hooks()`` (module, kind, the PyTorch method, whether it reads or edits, and the engine's
note where it used a fallback), says for the selected hook which tree column registered it and why that PyTorch
hook (``hookscope.core.teaching.snippets.KIND_HOOKS``: Grad is a tensor hook on the output, Grad in the full backward hook that
alone gives grad_input), counts the handles, removes one hook or all of them through the workspace (an
untick for a capture hook, so the tree and the panels follow), and shows ``snippet_for`` of the selected hook,
copyable, and **Copy whole script**: ``standalone_script``, a file that runs on its own (the same model, weights, image,
preprocessing, hooks and edits, forward and backward to the same target): what was done in the window, redone in
a script. Its dock shares a tab stack with the Interventions; Hooks > Hook inspector (Ctrl+I) brings it to the front.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStyle,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.vocabulary import word_of
from hookscope.core.engine.hooks import FALLBACK, HookInfo, callers_hooks
from hookscope.core.teaching.script_export import standalone_script
from hookscope.core.teaching.snippets import kind_hook, snippet_for
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.widgets.code_view import code_view, notice_label
from hookscope.ui.widgets.module_tree import HEADERS, KIND_COLUMNS
from hookscope.ui.widgets.wrapped_label import WrappedLabel

FEATURE_ID = "inspector"
DOCK_ID = "inspector"
SHOW_ACTION = "hooks.inspector"

SHOWN_ROWS = 5  # the table never shows fewer hooks than this without scrolling
COLUMNS = ("Module", "Kind", "Method", "Reads/edits", "Note", "")
MODULE, KIND, METHOD, ROLE, NOTE, REMOVE = range(len(COLUMNS))
WORDS = (MODULE, KIND, METHOD, ROLE, NOTE)  # the columns of words; the dock hides them from the right as it narrows
CELL_MARGIN = 14  # px beside a cell's words (the style's text margins and the grid line)
REMOVE_WIDTH = 28  # the ✕ column


YOURS_WHY = (
    "Not Hookscope's: a hook you put on the model yourself. Hookscope lists it and leaves it as it is: neither "
    "Remove all nor closing the window removes it."
)


def hook_identity(info: HookInfo) -> tuple[str, str, int | None, str]:
    return info.path, info.kind, info.edit_id, info.note if info.yours else ""


def why_text(info: HookInfo) -> str:
    """Which tick registered a capture hook and why that PyTorch hook; for an edit, the hook that carries it."""
    if info.edit_id is not None:
        return (
            f"An edit through {info.method}: its hook returns a value, so it changes what flows; registered "
            "with prepend=True, it runs before the module's capture hooks."
        )
    column = KIND_COLUMNS.get(info.kind)
    tick = f"The {HEADERS[column]} tick" if column is not None else f"A {info.kind} hook (not a column of the tree)"
    return f"{tick}: {kind_hook(info.kind)}."


class HookTable(QTableWidget):
    """The live hooks' table, its columns of words each shown whole or not at all, never reached by scrolling
    sideways (a 1024x700 window's dock scrolled to "register_forw" and "ethe"): Module and Kind always, then Method,
    Reads/edits and Note while they fit beside them. What a hidden column says is in the Module cell's tooltip and
    in the line under the table for the selected hook; a wider dock shows the columns again."""

    def __init__(self) -> None:
        super().__init__(0, len(COLUMNS))
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a module name wider than the whole dock
        self.columns_fitted = lambda: None  # told after each fit (the feature's line under the table follows)

    def words_width(self, column: int) -> int:
        """The width that shows every word of ``column``, its title's too."""
        metrics = self.fontMetrics()
        texts = [item.text() for row in range(self.rowCount()) if (item := self.item(row, column)) is not None]
        title = self.horizontalHeader().fontMetrics().horizontalAdvance(COLUMNS[column]) + 2 * CELL_MARGIN
        return max([metrics.horizontalAdvance(text) + CELL_MARGIN for text in texts] + [title])

    def room(self) -> int:
        """The width the columns share: the viewport's, less a vertical scroll bar whether it shows yet or not."""
        bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return self.maximumViewportSize().width() - bar - REMOVE_WIDTH

    def fit_columns(self) -> None:
        header = self.horizontalHeader()
        room = self.room()
        widths = {column: self.words_width(column) for column in WORDS}
        used = widths[MODULE] + widths[KIND]
        fits = True
        for column in (METHOD, ROLE, NOTE):
            fits = fits and used + widths[column] <= room
            self.setColumnHidden(column, not fits)
            if fits:
                header.resizeSection(column, widths[column])
                used += widths[column]
        header.resizeSection(KIND, widths[KIND])
        header.resizeSection(REMOVE, REMOVE_WIDTH)
        # Module takes what the others leave: more than its words in a wide dock, less ("…" mid-name, the whole name
        # in the tooltip) in one narrower than Module and Kind.
        header.resizeSection(MODULE, max(40, room - (used - widths[MODULE])))
        self.columns_fitted()

    def hidden_columns(self) -> list[int]:
        return [column for column in WORDS if self.isColumnHidden(column)]

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.fit_columns()


class InspectorFeature:
    """A table of the live hooks with a count, Remove / Remove all, and each hook's code."""

    id = FEATURE_ID

    # long because: builds the dock's widgets, layout and connections in the order they appear on screen
    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.widget = QWidget()
        self.infos: list[HookInfo] = []
        self._shown: tuple[int, int, list[HookInfo]] | None = None  # what the table holds: registry, count, hooks

        self.count_label = QLabel("0 live hooks")
        self.count_label.setObjectName("panelTitle")
        self.count_label.setToolTip("Handles this window holds on the model right now (one per tick or edit)")
        self.remove_all_button = QPushButton("Remove all")
        self.remove_all_button.setToolTip("Remove every hook: unticks every module and removes every intervention")
        self.remove_all_button.clicked.connect(self.remove_all)
        top = QHBoxLayout()
        top.addWidget(self.count_label)
        top.addStretch(1)
        top.addWidget(self.remove_all_button)

        self.table = HookTable()
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        # Every column shown as wide as its words (HookTable.fit_columns): a stretched Method column and a 60 px Note
        # showed "register_forw" and "ethe". Module takes what is left.
        header.setMinimumSectionSize(24)
        for column in WORDS:
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(REMOVE, QHeaderView.ResizeMode.Fixed)
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.columns_fitted = self._show_code
        self.table.itemSelectionChanged.connect(self._show_code)

        self.hidden_words = WrappedLabel("")  # the selected hook's words of the columns a narrow dock hides
        self.hidden_words.setObjectName("muted")
        self.hidden_words.setVisible(False)
        self.why = WrappedLabel("")
        self.why.setToolTip("Which tick registered this hook, and why that PyTorch hook")
        self.note = notice_label()
        self.code = code_view("Select a hook to see the plain PyTorch that registers it.", wrap=True)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy this hook's code to the clipboard")
        self.copy_button.clicked.connect(self.copy_snippet)
        self.copy_all_button = QPushButton("Copy whole script")
        self.copy_all_button.setToolTip(
            "A standalone Python script that redoes this run: the model and its weights, the "
            "image and its preprocessing, every hook and edit, forward and backward"
        )
        self.copy_all_button.clicked.connect(self.copy_script)
        buttons = QHBoxLayout()
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.copy_all_button)
        buttons.addStretch(1)
        # Not a splitter in a scroll area (a short dock scrolled the Copy buttons out of sight and could shrink the
        # table to two rows): minimum heights the dock keeps. Five rows, the explanation under them, then the code
        # (which scrolls itself) and the Copy buttons.
        rows = self.table.verticalHeader().defaultSectionSize() * SHOWN_ROWS
        self._least_heights = (
            rows + self.table.horizontalHeader().sizeHint().height() + 2 * self.table.frameWidth() + 2,
            3 * self.code.fontMetrics().lineSpacing() + 12,
        )
        layout = QVBoxLayout(self.widget)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.table, 2)
        layout.addWidget(self.hidden_words)
        layout.addWidget(self.why)
        layout.addWidget(self.note)
        layout.addWidget(self.code, 1)
        layout.addLayout(buttons)

        self.dock = host.add_dock(
            DockSpec(DOCK_ID, "Hook inspector", area="left", tab_with="interventions", scroll=False), self.widget
        )
        # The least heights hold while the inspector is the tab in front: the window then gives it the room (from
        # the module tree above); behind the Interventions it asks for none, and the tree can take the height back.
        self.dock.visibilityChanged.connect(self._on_visibility)
        self.dock.visibilityChanged.connect(lambda visible: self.refresh() if visible else None)  # your new hooks
        self._on_visibility()
        host.add_actions(
            [
                ActionSpec(
                    SHOW_ACTION,
                    "Hook inspector",
                    "Hooks",
                    callback=lambda: host.show_dock(DOCK_ID),
                    group=60,
                    order=20,
                    shortcut="Ctrl+I",
                    tooltip="Every live hook, with the plain PyTorch that registers it",
                )
            ]
        )
        workspace.hooks_changed.connect(self._on_hooks_changed)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.external_hooks_changed.connect(self._on_external_hooks_changed)
        self.refresh()

    def _on_visibility(self, _visible: bool = False) -> None:
        # Read once the window has settled: showing a window shows every tab of a stack for a moment, and the
        # inspector's least heights would then push the tree's separator down for good.
        QTimer.singleShot(0, self.dock, self._keep_least_heights)  # not after the dock is gone (a closed viewer's)

    def _keep_least_heights(self) -> None:
        visible = self.dock.isVisible() and not self.dock.visibleRegion().isEmpty()
        table, code = self._least_heights if visible else (0, 0)
        self.table.setMinimumHeight(table)
        self.code.setMinimumHeight(code)

    # ---- the workspace's signals ------------------------------------------------------------------------------
    def _on_hooks_changed(self, _changes: object = None) -> None:
        self.refresh()

    def _on_model_changed(self, _outcome: object = None) -> None:
        self.refresh()

    def _on_run_applied(self, _outcome: object = None) -> None:
        self.refresh()  # a run's survey may switch a hook to its fallback

    def _on_external_hooks_changed(self, _infos: object = None) -> None:
        self.refresh()  # a feature's own hook (a feature visualization's) came or went

    # ---- the table ----------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        registry = self.workspace.registry
        return (registry.handle_count() if registry is not None else 0) + len(self.workspace.external_hooks)

    def yours(self) -> list[HookInfo]:
        """The hooks on the model that Hookscope did not register (the model owner's own), for any model."""
        registry = self.workspace.registry
        if registry is None:
            return []
        return callers_hooks(registry.model, registry.handle_ids())

    def is_external(self, info: HookInfo) -> bool:
        """A hook a feature holds on the model outside the registry (listed while it lives, removed by it)."""
        return any(info is external for external in self.workspace.external_hooks)

    def refresh(self) -> None:
        registry = self.workspace.registry
        yours = self.yours()
        infos = (registry.live_hooks() if registry is not None else []) + list(self.workspace.external_hooks) + yours
        count = self.count
        shown = (id(registry), count, infos)
        if shown == self._shown:
            return  # after most runs nothing changed: rebuilding 40 rows would cost the GUI thread milliseconds
        self._shown = shown
        selected = self.selected()
        keep = hook_identity(selected) if selected is not None else None
        self.infos = infos
        text = f"{count} live hook{'' if count == 1 else 's'}"
        if yours:
            text += f", and {len(yours)} of yours (not Hookscope's)"
        self.count_label.setText(text)
        self.remove_all_button.setEnabled(count > 0)
        self.table.blockSignals(True)
        self.table.clearContents()
        self.table.setRowCount(len(self.infos))
        row_to_select = -1
        for row, info in enumerate(self.infos):
            note = info.label if info.edit_id is not None else info.note
            cells = (info.path or "(model)", word_of(info.kind), info.method, info.reads_or_edits, note)
            # The Module cell's tooltip has the whole row's words: what the columns a narrow dock hides say too
            words = "\n".join([cells[MODULE], *(f"{COLUMNS[c]}: {cells[c]}" for c in WORDS[1:] if cells[c])])
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                tip = YOURS_WHY if info.yours else why_text(info)
                item.setToolTip(words if column == MODULE else tip if column in (KIND, METHOD) else text)
                self.table.setItem(row, column, item)
            if not self.is_external(info) and not info.yours:  # a feature's hook: its feature removes it; yours: you
                remove = QToolButton()
                remove.setObjectName("closePanel")
                remove.setText("✕")
                remove.setToolTip("Remove this hook (an untick for a tick, the intervention for an edit)")
                # Later, not inside the click: removing refreshes the table, and with it this button.
                remove.clicked.connect(lambda *_, i=info: QTimer.singleShot(0, lambda: self.remove_hook(i)))
                self.table.setCellWidget(row, REMOVE, remove)
            if keep is not None and hook_identity(info) == keep:
                row_to_select = row
        self.table.blockSignals(False)
        self.table.fit_columns()  # the new rows' words
        if row_to_select >= 0:
            self.table.selectRow(row_to_select)
        else:
            self.table.clearSelection()
        self._show_code()

    def selected(self) -> HookInfo | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows or not 0 <= rows[0].row() < len(self.infos):
            return None
        return self.infos[rows[0].row()]

    def select(self, info: HookInfo) -> bool:
        for row, candidate in enumerate(self.infos):
            if hook_identity(candidate) == hook_identity(info):
                self.table.selectRow(row)
                return True
        return False

    # ---- code ---------------------------------------------------------------------------------------------
    def _show_code(self) -> None:
        info = self.selected()
        registry = self.workspace.registry
        self.copy_button.setEnabled(info is not None)
        self.copy_all_button.setEnabled(bool(self.infos))
        if info is None or registry is None:
            self.code.setPlainText("")
            self.why.setText("")
            self.note.setVisible(False)
            self.hidden_words.setVisible(False)
            return
        row = self.infos.index(info)
        hidden = [
            f"{COLUMNS[column]}: {item.text()}"
            for column in self.table.hidden_columns()
            if (item := self.table.item(row, column)) is not None and item.text()
        ]
        self.hidden_words.setText(" · ".join(hidden))
        self.hidden_words.setVisible(bool(hidden))
        self.why.setText(YOURS_WHY if info.yours else "" if self.is_external(info) else why_text(info))
        try:
            if info.yours:
                text = (
                    f"# Yours, not Hookscope's: {info.note.split('(', 1)[-1].rstrip(')')}, registered with\n"
                    f"# model{'.' + info.path if info.path else ''}.{info.method}(...) before or beside Hookscope's own hooks;\n"
                    "# Hookscope leaves it in place."
                )
            elif self.is_external(info):
                text = (
                    f"# {info.label}: a {info.method} hook on model.{info.path}, registered by the feature that\n"
                    "# runs it and removed when it ends."
                )
            else:
                text = snippet_for(registry, info)
        except Exception as error:  # noqa: BLE001  (an edit removed meanwhile: the next refresh follows)
            text = f"# No code for this hook: {error}"
        self.code.setPlainText(text)
        fallback = info.method == FALLBACK
        self.note.setText(info.note if fallback else "")
        self.note.setVisible(fallback and bool(info.note))

    def copy_snippet(self) -> str:
        text = self.code.toPlainText()
        if text:
            QApplication.clipboard().setText(text)
            self.host.show_status("Copied the hook's code.", 3000)
        return text

    def copy_script(self) -> str:
        """The run on screen as a standalone script (``hookscope.core.teaching.script_export``), on the clipboard."""
        space = self.workspace
        registry, loaded = space.registry, space.loaded
        if registry is None or loaded is None:
            return ""
        image = space.image.path if space.image is not None else None  # pasted pixels have no file: --image then
        try:
            text = standalone_script(
                loaded, registry, image=image, target=space.target, device=space.device, what="the hook inspector"
            )
        except HookscopeError as error:
            self.host.show_error(str(error), dialog=False)
            return ""
        QApplication.clipboard().setText(text)
        self.host.show_status(
            f"Copied a script that redoes this run with its {len(self.infos)} hooks "
            "(python script.py --save captures.npz).",
            5000,
        )
        return text

    # ---- removing -----------------------------------------------------------------------------------------------
    def remove_hook(self, info: HookInfo) -> None:
        """Remove one hook through the workspace: a tick is unticked (the tree and the panels follow), an edit
        removed."""
        self.workspace.remove_hook(info)

    def remove_all(self) -> None:
        """Untick every module and remove every intervention: no hook is left, and one run follows."""
        self.workspace.untick_all()
        self.workspace.remove_all_edits()
