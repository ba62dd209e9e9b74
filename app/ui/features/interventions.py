"""The Interventions dock: edits of what flows through the network, each a hook that returns a value.

Every edit lives in the window's ``HookRegistry`` (``add_edit`` / ``set_edit_enabled`` / ``remove_edit``), which
stays the source of truth; this panel lists them with an on/off switch and a remove button, adds them from a
dialog or from context menus (a channel tile, a module in the tree), and re-runs at once through the window's run
scheduling (``MainWindow.registry_changed``). The predictions then show the change of each top-5 probability
against the same input run with every edit suspended (``capture_run(..., baseline=True)``).

An edit the engine refuses (a channel that does not exist, a full backward hook an in-place op would break) is an
error through ``show_error``; an edit that fails in the run is switched off and shown as failed, and the run
repeats without it, so the results on screen stay valid.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.compare import prediction_changes
from app.core.errors import DeviceError, HookscopeError, ImageError
from app.core.hooks import HookInfo
from app.core.images import IMAGE_SUFFIXES
from app.core.interventions import CHANNEL_KINDS, EDIT_KINDS, Intervention
from app.core.pictures import PanelPicture
from app.ui.state.requests import RunOutcome

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

EDIT_LABELS: dict[str, str] = {
    "zero": "Switch off channels of the output",
    "keep": "Keep only some channels of the output",
    "scale": "Scale the output (or some channels)",
    "scale-input": "Scale the input (forward pre-hook)",
    "scale-grad": "Scale the gradient of the output (tensor hook)",
    "scale-grad-input": "Scale grad_input (full backward hook)",
    "mix": "Mix the output with its output on another image",
}
DEFAULT_FACTORS: dict[str, float] = {
    "scale": 2.0,
    "scale-input": 2.0,
    "scale-grad": 1.6,
    "scale-grad-input": 1.6,
    "mix": 0.5,
}
# The module context menu: (label, edit kind).
MODULE_ACTIONS: tuple[tuple[str, str], ...] = (
    ("Switch off channels…", "zero"),
    ("Scale output…", "scale"),
    ("Scale input…", "scale-input"),
    ("Scale gradient (tensor hook)…", "scale-grad"),
    ("Scale grad_input (full backward hook)…", "scale-grad-input"),
    ("Mix with another image…", "mix"),
)
ON, DESCRIPTION, SPEC, REMOVE = range(4)
FAILED_COLOR = QColor("#ff9b8f")
OFF_COLOR = QColor("#9aa0aa")


def parse_channels(text: str) -> tuple[int, ...]:
    """``"3, 5 8-10"`` -> (3, 5, 8, 9, 10); a bad part raises ``HookscopeError`` in one line."""
    channels: list[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        low, dash, high = part.partition("-")
        if low.isdigit() and (not dash or high.isdigit()):
            first, last = int(low), int(high) if dash else int(low)
            if last < first:
                raise HookscopeError(f"The range '{part}' runs backwards; write it low-high, e.g. 3-7.")
            channels.extend(range(first, last + 1))
        else:
            raise HookscopeError(f"'{part}' is not a channel: channels are whole numbers from 0, e.g. 3, 5 or 8-10.")
    return tuple(channels)


class EditDialog(QDialog):
    """Add an intervention: kind, module (with completion), channels, factor, the other image of a mix."""

    def __init__(
        self,
        paths: list[str],
        parent: QWidget | None = None,
        *,
        kind: str = "zero",
        path: str = "",
        channels: tuple[int, ...] = (),
        factor: float | None = None,
        other_image: str = "",
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add an intervention")
        self.setMinimumWidth(520)
        self._paths = set(paths)
        self.kind_box = QComboBox()
        for key in EDIT_KINDS:
            self.kind_box.addItem(EDIT_LABELS[key], key)
        self.path_edit = QLineEdit(path)
        self.path_edit.setPlaceholderText("module path, e.g. layer4.1.conv2")
        completer = QCompleter(sorted(p for p in paths if p), self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.path_edit.setCompleter(completer)
        self.channels_edit = QLineEdit(", ".join(str(c) for c in channels))
        self.channels_edit.setPlaceholderText("e.g. 3, 5 or 8-10")
        self.factor_box = QDoubleSpinBox()
        self.factor_box.setDecimals(3)
        self.factor_box.setRange(-1000.0, 1000.0)
        self.factor_box.setSingleStep(0.1)
        self.other_edit = QLineEdit(other_image)
        self.other_edit.setPlaceholderText("the other image file")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        other_row = QHBoxLayout()
        other_row.setContentsMargins(0, 0, 0, 0)
        other_row.addWidget(self.other_edit, 1)
        other_row.addWidget(browse)
        self._other_widget = QWidget()
        self._other_widget.setLayout(other_row)
        self.preview = QLabel("")
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #ff9b8f;")
        self.form = QFormLayout()
        self.form.addRow("Kind", self.kind_box)
        self.form.addRow("Module", self.path_edit)
        self.form.addRow("Channels", self.channels_edit)
        self.form.addRow("Factor", self.factor_box)
        self.form.addRow("Other image", self._other_widget)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(self.form)
        layout.addWidget(self.preview)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)

        self.kind_box.currentIndexChanged.connect(self._on_kind)
        for edit in (self.path_edit, self.channels_edit, self.other_edit):
            edit.textChanged.connect(self._update)
        self.factor_box.valueChanged.connect(self._update)
        self.kind_box.setCurrentIndex(max(0, self.kind_box.findData(kind)))
        self._on_kind()
        if factor is not None:
            self.factor_box.setValue(factor)
        self._update()

    @property
    def kind(self) -> str:
        return str(self.kind_box.currentData())

    def _on_kind(self, *_: object) -> None:
        kind = self.kind
        self.form.setRowVisible(self.channels_edit, kind in (*CHANNEL_KINDS, "scale"))
        self.form.setRowVisible(self.factor_box, kind not in CHANNEL_KINDS)
        self.form.setRowVisible(self._other_widget, kind == "mix")
        if kind == "mix":
            self.factor_box.setRange(0.0, 1.0)
            self.factor_box.setToolTip("lambda: lambda × this image + (1 − lambda) × the other image")
        else:
            self.factor_box.setRange(-1000.0, 1000.0)
            self.factor_box.setToolTip("The factor to multiply by")
        if kind in DEFAULT_FACTORS:
            self.factor_box.setValue(DEFAULT_FACTORS[kind])
        self._update()

    def _browse(self) -> None:
        patterns = " ".join(f"*{suffix}" for suffix in sorted(IMAGE_SUFFIXES))
        start = os.path.dirname(self.other_edit.text()) or os.path.expanduser("~")
        path, _ = QFileDialog.getOpenFileName(self, "The other image", start, f"Images ({patterns});;All files (*)")
        if path:
            self.other_edit.setText(path)

    def value(self) -> Intervention:
        """The intervention the fields describe; ``HookscopeError`` (one line) where they describe none."""
        kind, path = self.kind, self.path_edit.text().strip()
        if path not in self._paths:
            raise HookscopeError(f"The model has no module '{path}'." if path else "Choose a module.")
        channels = parse_channels(self.channels_edit.text()) if kind in (*CHANNEL_KINDS, "scale") else ()
        if kind in CHANNEL_KINDS:
            return Intervention(kind, path, channels=channels)
        other = self.other_edit.text().strip() if kind == "mix" else None
        if kind == "mix" and other and not os.path.isfile(other):
            raise HookscopeError(f"There is no file '{other}'.")
        return Intervention(kind, path, channels=channels, factor=self.factor_box.value(), other_image=other or None)

    def _update(self, *_: object) -> None:
        try:
            edit = self.value()
        except HookscopeError as error:
            self.problem.setText(str(error))
            self.preview.setText("")
            ok = False
        else:
            self.problem.setText("")
            self.preview.setText(f"{edit.describe()}.\nCommand line: --edit {edit.spec}")
            ok = True
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)


class InterventionsPanel(QWidget):
    """The list of edits, with their switches; the menus and the dialog that add them."""

    edits_changed = Signal()

    def __init__(self, window: MainWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._window = window
        self.failed: dict[int, str] = {}  # edit id -> why it failed in a run (it was switched off)
        self._pending: set[int] = set()  # added or switched on since the last run that came back
        self.dialog: EditDialog | None = None

        self.tree = QTreeWidget()
        self.tree.setColumnCount(4)
        self.tree.setHeaderLabels(["On", "Intervention", "Spec", ""])
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(ON, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(DESCRIPTION, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(SPEC, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(REMOVE, QHeaderView.ResizeMode.ResizeToContents)
        header.resizeSection(SPEC, 150)
        self.tree.itemChanged.connect(self._on_item_changed)
        self.add_button = QPushButton("Add…")
        self.add_button.setToolTip(
            "Add an intervention: switch off or scale channels, scale an input or a gradient, mix with another image"
        )
        self.add_button.clicked.connect(lambda: self.open_add_dialog())
        self.clear_button = QPushButton("Remove all")
        self.clear_button.setToolTip("Remove every intervention (their hooks go with them)")
        self.clear_button.clicked.connect(self.remove_all)
        self.hint = QLabel("Right-click a channel tile or a module in the tree to change what flows through it.")
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.hint)

        window.hooks_changed.connect(self.refresh)
        window.model_ready.connect(self._on_model_ready)
        window.run_applied.connect(self._on_run_applied)
        window.run_failed.connect(self._on_run_failed)

    # ---- the edits ----------------------------------------------------------------------------------------
    def add_edit(self, edit: Intervention) -> int | None:
        """Register ``edit`` on the live model and re-run; an edit the engine refuses is an error, not a row."""
        registry = self._window.registry
        if registry is None:
            self._window.show_error("No model is loaded yet.")
            return None
        try:
            edit_id = registry.add_edit(edit)
        except HookscopeError as error:
            self._window.show_error(str(error))
            return None
        if edit.enabled:
            self._pending.add(edit_id)
        self._window.statusBar().showMessage(f"Added: {edit.describe()}", 5000)
        self._window.registry_changed()
        return edit_id

    def set_enabled(self, edit_id: int, enabled: bool) -> bool:
        """Switch an edit on (its hook is registered again) or off (its hook is removed)."""
        registry = self._window.registry
        if registry is None:
            return False
        try:
            registry.set_edit_enabled(edit_id, enabled)
        except HookscopeError as error:
            self._window.show_error(str(error))
            self.refresh()
            return False
        self.failed.pop(edit_id, None)
        if enabled:
            self._pending.add(edit_id)
        else:
            self._pending.discard(edit_id)
        self._window.registry_changed()
        return True

    def remove_edit(self, edit_id: int) -> None:
        """Remove the edit and its hook, and nothing else."""
        registry = self._window.registry
        if registry is None:
            return
        registry.remove_edit(edit_id)
        self.failed.pop(edit_id, None)
        self._pending.discard(edit_id)
        self._window.registry_changed()

    def remove_all(self, rerun: bool = True) -> None:
        registry = self._window.registry
        if registry is None or not registry.edits():
            return
        for edit_id, _, _ in registry.edits():
            registry.remove_edit(edit_id)
        self.failed.clear()
        self._pending.clear()
        self._window.registry_changed(rerun)

    # ---- the list -----------------------------------------------------------------------------------------
    def rows(self) -> list[tuple[int, bool, str, str]]:
        """(edit id, on, description, spec) per row, as shown."""
        result = []
        for n in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(n)
            result.append(
                (
                    int(item.data(ON, Qt.ItemDataRole.UserRole)),
                    item.checkState(ON) == Qt.CheckState.Checked,
                    item.text(DESCRIPTION),
                    item.text(SPEC),
                )
            )
        return result

    def item_of(self, edit_id: int) -> QTreeWidgetItem | None:
        for n in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(n)
            if item.data(ON, Qt.ItemDataRole.UserRole) == edit_id:
                return item
        return None

    def refresh(self) -> None:
        """Follow the registry: rows updated in place while the edits are the same (a switch), else rebuilt."""
        registry = self._window.registry
        edits = registry.edits() if registry is not None else []
        self.tree.blockSignals(True)
        if [row[0] for row in self.rows()] != [edit_id for edit_id, _, _ in edits]:
            self.tree.clear()
            for edit_id, _, _ in edits:
                item = QTreeWidgetItem()
                item.setFlags(
                    Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsUserCheckable
                )
                item.setData(ON, Qt.ItemDataRole.UserRole, edit_id)
                item.setFont(SPEC, QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
                self.tree.addTopLevelItem(item)
                remove = QToolButton()
                remove.setObjectName("closePanel")
                remove.setText("✕")
                remove.setToolTip("Remove this intervention and its hook")
                # Later, not inside the click: removing rebuilds the list, and with it this button.
                remove.clicked.connect(lambda *_, i=edit_id: QTimer.singleShot(0, lambda: self.remove_edit(i)))
                self.tree.setItemWidget(item, REMOVE, remove)
        for n, (edit_id, edit, info) in enumerate(edits):
            self._fill(self.tree.topLevelItem(n), edit_id, edit, info)
        self.tree.blockSignals(False)
        self.clear_button.setEnabled(bool(edits))
        self.edits_changed.emit()

    def _fill(self, item: QTreeWidgetItem, edit_id: int, edit: Intervention, info: HookInfo) -> None:
        item.setCheckState(ON, Qt.CheckState.Checked if edit.enabled else Qt.CheckState.Unchecked)
        failure = self.failed.get(edit_id)
        item.setText(DESCRIPTION, edit.describe() + (" — failed" if failure else ""))
        item.setText(SPEC, edit.spec)
        tip = f"{edit.describe()}\nHook: {info.method} on {edit.path}\nCommand line: --edit {edit.spec}"
        color = None
        if failure:
            tip += f"\n\nFailed in a run and switched off:\n{failure}"
            color = FAILED_COLOR
        elif not edit.enabled:
            color = OFF_COLOR
        for column in (DESCRIPTION, SPEC):
            item.setData(column, Qt.ItemDataRole.ForegroundRole, QBrush(color) if color is not None else None)
            item.setToolTip(column, tip)
        item.setToolTip(ON, "On: the hook is registered. Off: its hook is removed (the edit stays listed).")

    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if column != ON:
            return
        edit_id = item.data(ON, Qt.ItemDataRole.UserRole)
        if edit_id is not None:
            self.set_enabled(int(edit_id), item.checkState(ON) == Qt.CheckState.Checked)

    # ---- runs ---------------------------------------------------------------------------------------------
    def _on_model_ready(self) -> None:
        self.failed.clear()
        self._pending.clear()
        self.refresh()

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        self._pending.clear()  # every edit on in that run worked
        result = outcome.result
        try:
            changes = prediction_changes(result) if result.baseline_scores is not None else []
        except HookscopeError:
            changes = []
        self._window.predictions.show_changes(changes)

    def _on_run_failed(self, message: str, error: object) -> None:
        """Switch off the edit that made the run fail (named in the message, else the ones just added), and run
        again without it; the error is on screen already."""
        registry = self._window.registry
        if registry is None:
            return
        enabled = [(i, e) for i, e, _ in registry.edits() if e.enabled]
        suspects = [
            i
            for i, e in enabled
            if e.spec in message
            or re.search(rf"\b{re.escape(e.path)}\b", message)
            or (e.other_image and os.path.basename(e.other_image) in message)
        ]
        if not suspects and not isinstance(error, (ImageError, DeviceError)):
            suspects = [i for i, _ in enabled if i in self._pending]
        self._pending.clear()
        if not suspects:
            return
        for edit_id in suspects:
            try:
                registry.set_edit_enabled(edit_id, False)
            except HookscopeError:
                registry.remove_edit(edit_id)
            self.failed[edit_id] = message
        self._window.registry_changed()

    # ---- menus and the dialog -----------------------------------------------------------------------------
    def open_add_dialog(
        self, kind: str = "zero", path: str = "", channels: tuple[int, ...] = (), factor: float | None = None
    ) -> EditDialog | None:
        """The Add dialog, prefilled; accepting it adds the edit (non-blocking: ``open()``)."""
        registry = self._window.registry
        if registry is None:
            self._window.show_error("No model is loaded yet.")
            return None
        if self.dialog is not None:
            self.dialog.close()
        other = ""
        image_b = self._window.compare.image_b
        if kind == "mix" and image_b is not None and image_b.path:
            other = image_b.path
        dialog = EditDialog(
            registry.paths, self._window, kind=kind, path=path, channels=channels, factor=factor, other_image=other
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._on_dialog_accepted(dialog))
        dialog.destroyed.connect(lambda *_: setattr(self, "dialog", None))
        self.dialog = dialog
        dialog.open()
        return dialog

    def _on_dialog_accepted(self, dialog: EditDialog) -> None:
        try:
            edit = dialog.value()
        except HookscopeError as error:
            self._window.show_error(str(error))
            return
        self.add_edit(edit)

    def tile_menu(self, picture: PanelPicture, channel: int) -> QMenu:
        """The context menu of one channel tile: switch it off, keep only it, scale it; Grad-CAM of the module."""
        path = picture.path
        menu = QMenu(self._window)
        menu.addSection(f"{picture.key} · channel {channel}")
        output_channels = picture.kind != "pre" and not picture.leaf and len(picture.shape) >= 2
        if output_channels:
            off = menu.addAction(f"Switch off channel {channel}")
            off.setToolTip(f"A forward hook on {path} that returns its output with channel {channel} set to 0")
            off.triggered.connect(lambda *_: self.add_edit(Intervention("zero", path, channels=(channel,))))
            keep = menu.addAction(f"Keep only channel {channel}")
            keep.triggered.connect(lambda *_: self.add_edit(Intervention("keep", path, channels=(channel,))))
            scale = menu.addAction(f"Scale channel {channel}…")
            scale.triggered.connect(lambda *_: self.open_add_dialog("scale", path, (channel,)))
        elif picture.kind == "pre":
            scale_input = menu.addAction(f"Scale the input of {path}…")
            scale_input.triggered.connect(lambda *_: self.open_add_dialog("scale-input", path))
        menu.addSeparator()
        self._add_grad_cam_action(menu, path)
        return menu

    def popup_tile_menu(self, picture: PanelPicture, channel: int, position: QPoint) -> None:
        menu = self.tile_menu(picture, channel)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(position)

    def add_module_actions(self, menu: QMenu, path: str) -> list:
        """The module context menu's intervention entries (and Grad-CAM where the module's output is spatial)."""
        menu.addSection("Interventions")
        actions = []
        for label, kind in MODULE_ACTIONS:
            action = menu.addAction(label)
            action.triggered.connect(lambda *_, k=kind: self.open_add_dialog(k, path))
            actions.append(action)
        self._add_grad_cam_action(menu, path)
        return actions

    def _add_grad_cam_action(self, menu: QMenu, path: str) -> None:
        grad_cam = self._window.grad_cam
        if grad_cam.applies_to(path) is not False:
            action = menu.addAction(f"Grad-CAM of {path or 'the model'}")
            action.setToolTip("Where in the image this module's activations push the target class")
            action.triggered.connect(lambda *_: grad_cam.show_module(path))
