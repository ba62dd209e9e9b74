"""The Interventions feature: edits of what flows through the network, each a hook that returns a value.

Every edit lives in the workspace's ``HookRegistry``; this feature lists them (with an on/off switch and a remove
button) in the Interventions dock, and adds them from a dialog (``dialogs/edit_dialog.py``), from the module menu
and from the channel-tile menu. Every change goes through the workspace (``add_edit``, ``set_edit_enabled``,
``remove_edit``, ``remove_all_edits``), which announces it and runs again; the predictions view shows the change of
each top-5 probability from the run's outcome.

An edit the engine refuses (a channel that does not exist, a full backward hook an in-place op would break) is an
error the workspace shows; an edit that fails in the run is switched off and marked *failed*, and the run repeats
without it, so the results on screen stay valid. The failed edit is the one the error names (its ``edit_spec``, or
for an unreadable image its ``path``: a mix edit's other image); an error that names none, and is not about an
image or the device, is blamed on the edits switched on since the last run that came back.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QFontDatabase
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.errors import DeviceError, HookscopeError, ImageError
from hookscope.core.engine.hooks import HookInfo
from hookscope.core.engine.interventions import Intervention
from hookscope.core.pictures.panels import PanelPicture
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.dialogs.edit_dialog import EditDialog
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import RunFailure, Workspace

FEATURE_ID = "interventions"
DOCK_ID = "interventions"
ADD_ACTION = "hooks.add_intervention"
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


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


class InterventionsFeature:
    """The list of edits with their switches, the Add dialog, and the menu entries that add edits."""

    id = FEATURE_ID

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.failed: dict[int, str] = {}  # edit id -> why it failed in a run (it was switched off)
        self._pending: set[int] = set()  # switched on since the last run that came back
        self._seen: dict[int, Intervention] = self._edit_map()  # the edits at the last change seen
        self.dialog: EditDialog | None = None

        self.widget = QWidget()
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
        # The description and the spec share the width (a fixed 150 px Spec scrolled a 1024 px window's dock
        # sideways and left "Inte" of the description); each row's tooltip has both in full.
        header.setSectionResizeMode(SPEC, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(REMOVE, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.itemChanged.connect(self._on_item_changed)
        self.add_button = QPushButton("Add…")
        self.add_button.setToolTip(
            "Add an intervention: switch off or scale channels, scale an input or a gradient, mix with another image"
        )
        self.add_button.clicked.connect(lambda: self.open_add_dialog())
        self.clear_button = QPushButton("Remove all")
        self.clear_button.setToolTip("Remove every intervention (their hooks go with them)")
        self.clear_button.clicked.connect(lambda: self.remove_all())
        self.hint = QLabel("Right-click a channel tile or a module in the tree to change what flows through it.")
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self.widget)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.hint)

        self.dock = host.add_dock(DockSpec(DOCK_ID, "Interventions", area="left", below="modules"), self.widget)
        host.add_actions(
            [
                ActionSpec(
                    ADD_ACTION,
                    "Add intervention…",
                    "Hooks",
                    callback=lambda: self.open_add_dialog(),
                    group=60,
                    order=10,
                    tooltip="Switch off or scale channels, scale an input or a gradient, mix with another image",
                )
            ]
        )
        host.add_module_menu(self.module_entries)
        host.add_tile_menu(self.tile_entries)

        workspace.hooks_changed.connect(self._on_hooks_changed)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.failed.connect(self._on_failed)
        self.refresh()

    # ---- the edits (through the workspace) ---------------------------------------------------------------------
    def add_edit(self, edit: Intervention) -> int | None:
        """Register ``edit`` on the live model and run again; an edit the engine refuses is an error, not a row."""
        return self.workspace.add_edit(edit)

    def set_enabled(self, edit_id: int, enabled: bool) -> bool:
        """Switch an edit on (its hook is registered again) or off (its hook is removed)."""
        self.failed.pop(edit_id, None)
        return self.workspace.set_edit_enabled(edit_id, enabled)

    def remove_edit(self, edit_id: int) -> None:
        """Remove the edit and its hook, and nothing else."""
        self.workspace.remove_edit(edit_id)

    def remove_all(self, rerun: bool = True) -> None:
        self.workspace.remove_all_edits(rerun=rerun)

    def _edits(self) -> list[tuple[int, Intervention, HookInfo]]:
        registry = self.workspace.registry
        return registry.edits() if registry is not None else []

    def _edit_map(self) -> dict[int, Intervention]:
        return {edit_id: edit for edit_id, edit, _ in self._edits()}

    # ---- the list -----------------------------------------------------------------------------------------------
    def rows(self) -> list[tuple[int, bool, str, str]]:
        """(edit id, on, description, spec) per row, as shown."""
        result = []
        for item in self._items():
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
        for item in self._items():
            if item.data(ON, Qt.ItemDataRole.UserRole) == edit_id:
                return item
        return None

    def _items(self) -> list[QTreeWidgetItem]:
        """The rows, top to bottom."""
        items = [self.tree.topLevelItem(n) for n in range(self.tree.topLevelItemCount())]
        return [item for item in items if item is not None]

    def refresh(self) -> None:
        """Follow the registry: rows updated in place while the edits are the same (a switch), else rebuilt."""
        edits = self._edits()
        ids = [edit_id for edit_id, _, _ in edits]
        self.tree.blockSignals(True)
        if [row[0] for row in self.rows()] != ids:
            self.tree.clear()
            for edit_id in ids:
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
        for item, (edit_id, edit, info) in zip(self._items(), edits):
            self._fill(item, edit_id, edit, info)
        self.tree.blockSignals(False)
        self.clear_button.setEnabled(bool(edits))

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

    # ---- the workspace's signals ----------------------------------------------------------------------------
    def _on_hooks_changed(self, _changes: object = None) -> None:
        """Follow the edits: those switched on since the last change are pending until a run comes back; a failed
        mark stays with its edit. A device move registers every edit again under a new id: an edit whose id went
        is followed to a new id with the same value."""
        previous, current = self._seen, self._edit_map()
        fresh = [edit_id for edit_id in current if edit_id not in previous]
        moved: dict[int, int] = {}
        for old, edit in previous.items():
            if old not in current:
                new = next((i for i in fresh if current[i] == edit and i not in moved.values()), None)
                if new is not None:
                    moved[old] = new
        self.failed = {moved.get(i, i): why for i, why in self.failed.items() if moved.get(i, i) in current}
        enabled = {edit_id for edit_id, edit in current.items() if edit.enabled}
        self._pending = {moved.get(i, i) for i in self._pending} & enabled
        for edit_id in enabled - set(moved.values()):
            if edit_id not in previous or not previous[edit_id].enabled:
                self._pending.add(edit_id)  # added or switched on since the last change
                self.failed.pop(edit_id, None)  # on again: it gets another chance
        self._seen = current
        self.refresh()

    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self.failed.clear()
        self._pending.clear()  # carried edits were on and worked before; ids start again with the new registry
        self._seen = self._edit_map()
        self.refresh()

    def _on_run_applied(self, _outcome: RunOutcome) -> None:
        self._pending.clear()  # every edit on in that run worked

    def _on_failed(self, failure: RunFailure) -> None:
        """Switch off the edit that made the run fail and run again without it (the error is on screen already).

        The edit is the one the error's fields name: ``edit_spec``, or for an ``ImageError`` its ``path`` (the
        other image of a mix edit). An error that names none and is not about an image or the device is blamed on
        the edits switched on since the last run that came back.
        """
        if failure.load or self.workspace.registry is None:
            return
        error = failure.error
        enabled = [(edit_id, edit) for edit_id, edit, _ in self._edits() if edit.enabled]
        spec = getattr(error, "edit_spec", None)
        if spec is not None:
            suspects = [edit_id for edit_id, edit in enabled if edit.spec == spec]
        elif isinstance(error, ImageError):  # a mix edit's other image, or image A (no edit's fault)
            unreadable = getattr(error, "path", None)
            suspects = [
                edit_id
                for edit_id, edit in enabled
                if unreadable and edit.kind == "mix" and edit.other_image and _same_file(edit.other_image, unreadable)
            ]
        elif isinstance(error, DeviceError):
            suspects = []
        else:
            suspects = [edit_id for edit_id, _ in enabled if edit_id in self._pending]
        self._pending.clear()
        if not suspects:
            return
        for edit_id in suspects:
            self.failed[edit_id] = failure.message
        for n, edit_id in enumerate(suspects, start=1):
            if not self.workspace.set_edit_enabled(edit_id, False, rerun=n == len(suspects)):
                self.workspace.remove_edit(edit_id)

    # ---- menus and the dialog -------------------------------------------------------------------------------
    def open_add_dialog(
        self, kind: str = "zero", path: str = "", channels: tuple[int, ...] = (), factor: float | None = None
    ) -> EditDialog | None:
        """The Add dialog, prefilled; accepting it adds the edit (non-blocking: ``open()``)."""
        registry = self.workspace.registry
        if registry is None:
            self.host.show_error("No model is loaded yet.")
            return None
        if self.dialog is not None:
            self.dialog.close()
        other = ""
        image_b = self.workspace.image_b
        if kind == "mix" and image_b is not None and image_b.path:
            other = image_b.path
        dialog = EditDialog(
            registry.paths,
            self.host.dialog_parent(),
            kind=kind,
            path=path,
            channels=channels,
            factor=factor,
            other_image=other,
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._on_dialog_accepted(dialog))
        dialog.destroyed.connect(lambda *_: self._forget_dialog(dialog))
        self.dialog = dialog
        dialog.open()
        return dialog

    def _forget_dialog(self, dialog: EditDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None

    def _on_dialog_accepted(self, dialog: EditDialog) -> None:
        try:
            edit = dialog.value()
        except HookscopeError as error:
            self.host.show_error(str(error))
            return
        self.add_edit(edit)

    def tile_entries(self, menu: QMenu, picture: PanelPicture, channel: int) -> None:
        """A channel tile's entries: switch it off, keep only it, scale it (or scale the input of a pre panel)."""
        path = picture.path
        if picture.kind != "pre" and not picture.leaf and len(picture.shape) >= 2:
            off = menu.addAction(f"Switch off channel {channel}")
            off.setToolTip(f"A forward hook on {path} that returns its output with channel {channel} set to 0")
            off.triggered.connect(lambda *_: self.add_edit(Intervention("zero", path, channels=(channel,))))
            keep = menu.addAction(f"Keep only channel {channel}")
            keep.setToolTip(f"A forward hook on {path} that sets every channel but {channel} to 0")
            keep.triggered.connect(lambda *_: self.add_edit(Intervention("keep", path, channels=(channel,))))
            scale = menu.addAction(f"Scale channel {channel}…")
            scale.triggered.connect(lambda *_: self.open_add_dialog("scale", path, (channel,)))
        elif picture.kind == "pre":
            scale_input = menu.addAction(f"Scale the input of {path}…")
            scale_input.triggered.connect(lambda *_: self.open_add_dialog("scale-input", path))

    def module_entries(self, menu: QMenu, path: str) -> None:
        """The module menu's intervention entries, each opening the Add dialog prefilled."""
        menu.addSection("Interventions")
        for label, kind in MODULE_ACTIONS:
            action = menu.addAction(label)
            action.triggered.connect(lambda *_, k=kind: self.open_add_dialog(k, path))
