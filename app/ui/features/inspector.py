"""The hook inspector: every live hook handle on the model, and the plain PyTorch that registers it.

It lists ``registry.live_hooks()`` (module, kind, the PyTorch method, whether it reads or edits, and the engine's
note where it used a fallback), counts the handles, removes one hook or all of them through the window's own
paths (an untick for a capture hook, so the tree and the panels follow), and shows ``snippet_for`` of the selected
hook, copyable, with ``registry_script`` for all of them: what was done in the window, redone in a script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.hooks import FALLBACK, HookInfo
from app.core.snippets import registry_script, snippet_for
from app.ui.widgets.module_tree import KIND_COLUMNS

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

COLUMNS = ("Module", "Kind", "Method", "Reads/edits", "Note", "")
MODULE, KIND, METHOD, ROLE, NOTE, REMOVE = range(len(COLUMNS))


def hook_identity(info: HookInfo) -> tuple[str, str, int | None]:
    return info.path, info.kind, info.edit_id


class HookInspector(QWidget):
    """A table of the live hooks with a count, Remove / Remove all, and each hook's code."""

    def __init__(self, window: MainWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._window = window
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

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(False)
        header.setMinimumSectionSize(24)
        header.setSectionResizeMode(METHOD, QHeaderView.ResizeMode.Stretch)
        for column in (MODULE, KIND, ROLE, REMOVE):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.resizeSection(NOTE, 60)
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.itemSelectionChanged.connect(self._show_code)

        self.note = QLabel("")
        self.note.setObjectName("notice")
        self.note.setWordWrap(True)
        self.note.setVisible(False)
        self.code = QPlainTextEdit()
        self.code.setReadOnly(True)
        self.code.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.code.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.code.setPlaceholderText("Select a hook to see the plain PyTorch that registers it.")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy this hook's code to the clipboard")
        self.copy_button.clicked.connect(self.copy_snippet)
        self.copy_all_button = QPushButton("Copy whole script")
        self.copy_all_button.setToolTip("Every live hook as one runnable script (set `model` first)")
        self.copy_all_button.clicked.connect(self.copy_script)
        buttons = QHBoxLayout()
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.copy_all_button)
        buttons.addStretch(1)
        code_box = QWidget()
        code_layout = QVBoxLayout(code_box)
        code_layout.setContentsMargins(0, 0, 0, 0)
        code_layout.addWidget(self.note)
        code_layout.addWidget(self.code, 1)
        code_layout.addLayout(buttons)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(code_box)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)

        window.hooks_changed.connect(self.refresh)
        window.model_ready.connect(self.refresh)
        window.run_applied.connect(lambda *_: self.refresh())  # a run's survey may switch a hook to its fallback

    # ---- the table ----------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        registry = self._window.registry
        return registry.handle_count() if registry is not None else 0

    def refresh(self) -> None:
        registry = self._window.registry
        infos = registry.live_hooks() if registry is not None else []
        count = self.count
        shown = (id(registry), count, infos)
        if shown == self._shown:
            return  # after most runs nothing changed: rebuilding 40 rows would cost the GUI thread milliseconds
        self._shown = shown
        selected = self.selected()
        keep = hook_identity(selected) if selected is not None else None
        self.infos = infos
        self.count_label.setText(f"{count} live hook{'' if count == 1 else 's'}")
        self.remove_all_button.setEnabled(count > 0)
        self.table.blockSignals(True)
        self.table.clearContents()
        self.table.setRowCount(len(self.infos))
        row_to_select = -1
        for row, info in enumerate(self.infos):
            note = info.label if info.edit_id is not None else info.note
            cells = (info.path or "(model)", info.kind, info.method, info.reads_or_edits, note)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text if column != NOTE else note)
                self.table.setItem(row, column, item)
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
        registry = self._window.registry
        self.copy_button.setEnabled(info is not None)
        self.copy_all_button.setEnabled(bool(self.infos))
        if info is None or registry is None:
            self.code.setPlainText("")
            self.note.setVisible(False)
            return
        try:
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
            self._window.statusBar().showMessage("Copied the hook's code.", 3000)
        return text

    def copy_script(self) -> str:
        registry = self._window.registry
        if registry is None:
            return ""
        text = registry_script(registry)
        QApplication.clipboard().setText(text)
        self._window.statusBar().showMessage(f"Copied a script of {len(self.infos)} hooks.", 3000)
        return text

    # ---- removing -----------------------------------------------------------------------------------------
    def remove_hook(self, info: HookInfo) -> None:
        """Remove one hook the way the window would: an edit through the Interventions panel, a tick by unticking."""
        window = self._window
        registry = window.registry
        if registry is None:
            return
        if info.edit_id is not None:
            window.interventions.remove_edit(info.edit_id)
        elif info.kind in KIND_COLUMNS and window.tick(info.path, info.kind, False):
            pass  # the tree, the panels and the run follow the untick
        else:
            registry.remove_hook(info)
            window.registry_changed()

    def remove_all(self) -> None:
        """Untick every module (the tree and the panels follow), remove every intervention, and anything left."""
        window = self._window
        registry = window.registry
        if registry is None:
            return
        window.untick_all()
        window.interventions.remove_all(rerun=False)
        if registry.handle_count():
            registry.clear()
        window.registry_changed()
