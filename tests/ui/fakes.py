"""A fake ``Host`` for building one feature from a workspace without a window (as napari tests views on models)."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtWidgets import QDockWidget, QMenu, QVBoxLayout, QWidget

from hookscope.core.pictures.panels import PanelPicture
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import ChannelListener, DockSpec, DropHandler, ModuleMenuEntries, TileMenuEntries


class FakeHost:
    """Records what a feature contributes; errors and status messages are kept as lists to assert on."""

    def __init__(self) -> None:
        self.show_dialogs = False
        self.remembers = False
        self.parent = QWidget()
        self.parent.setLayout(QVBoxLayout())
        self.docks: dict[str, QDockWidget] = {}
        self.actions: dict[str, ActionSpec] = {}
        self.module_menus: list[ModuleMenuEntries] = []
        self.tile_menus: list[TileMenuEntries] = []
        self.input_rows: list[QWidget] = []
        self.notice_rows: list[QWidget] = []
        self.drop_handlers: list[DropHandler] = []
        self.channel_listeners: list[ChannelListener] = []
        self.channel_rows: list[QWidget] = []
        self.errors: list[str] = []
        self.statuses: list[str] = []

    def add_dock(self, spec: DockSpec, widget: QWidget) -> QDockWidget:
        dock = QDockWidget(spec.title, self.parent)
        dock.setObjectName(spec.id)
        dock.setWidget(widget)
        self.docks[spec.id] = dock
        return dock

    def remove_dock(self, dock_id: str) -> None:
        dock = self.docks.pop(dock_id, None)
        if dock is not None:
            dock.hide()
            dock.deleteLater()

    def show_dock(self, dock_id: str) -> None:
        self.docks[dock_id].setVisible(True)

    def add_actions(self, specs: Iterable[ActionSpec]) -> None:
        for spec in specs:
            assert spec.id not in self.actions, f"two actions with the id {spec.id}"
            self.actions[spec.id] = spec

    def trigger(self, action_id: str) -> object:
        spec = self.actions[action_id]
        assert spec.callback is not None, f"{action_id} has no callback"
        return spec.callback()

    def add_module_menu(self, entries: ModuleMenuEntries) -> None:
        self.module_menus.append(entries)

    def module_menu(self, path: str) -> QMenu:
        menu = QMenu(self.parent)
        for entries in self.module_menus:
            entries(menu, path)
        return menu

    def add_tile_menu(self, entries: TileMenuEntries) -> None:
        self.tile_menus.append(entries)

    def tile_menu(self, picture: PanelPicture, channel: int) -> QMenu:
        menu = QMenu(self.parent)
        for entries in self.tile_menus:
            entries(menu, picture, channel)
        return menu

    def add_input_row(self, widget: QWidget) -> None:
        self.input_rows.append(widget)
        self.parent.layout().addWidget(widget)

    def add_notice_row(self, widget: QWidget) -> None:
        self.notice_rows.append(widget)
        self.parent.layout().addWidget(widget)

    def add_drop_handler(self, handler: DropHandler) -> None:
        self.drop_handlers.append(handler)

    def add_channel_listener(self, listener: ChannelListener) -> None:
        self.channel_listeners.append(listener)

    def add_channel_row(self, widget: QWidget) -> None:
        self.channel_rows.append(widget)
        self.parent.layout().addWidget(widget)

    def open_channel(self, picture: PanelPicture, channel: int) -> None:
        """As a click on a tile does in the window: every listener hears which channel is shown."""
        for listener in self.channel_listeners:
            listener(picture, channel)

    def show_error(self, message: str, dialog: bool = True) -> None:
        self.errors.append(message)

    def show_status(self, message: str, msecs: int = 5000) -> None:
        self.statuses.append(message)

    def dialog_parent(self) -> QWidget:
        return self.parent
