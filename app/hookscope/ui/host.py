"""What a feature may ask of the window it plugs into: the ``Host`` protocol.

A feature is built from the ``Workspace`` (the state it reads and changes) and a ``Host`` (where it shows itself).
It never imports the main window, never looks for a menu by its label, and never reaches into another feature:
it contributes docks, actions, context-menu entries, rows under the input image or above the panels, and drop
handlers, and it listens to the workspace's signals. Its background work goes through ``Workspace.submit`` and what
must stop when the window closes through ``Workspace.on_shutdown``. A test builds a feature from a workspace over a
tiny model and a fake host, without a window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from PySide6.QtWidgets import QDockWidget, QMenu, QWidget

from hookscope.core.pictures.panels import PanelPicture
from hookscope.ui.actions.specs import ActionSpec

ModuleMenuEntries = Callable[[QMenu, str], None]  # adds entries for the module at a path
TileMenuEntries = Callable[[QMenu, PanelPicture, int], None]  # adds entries for one channel tile
DropHandler = Callable[[list[str]], list[str]]  # opens the paths it knows, returns the rest
ChannelListener = Callable[[PanelPicture, int], None]  # told which channel the Channel view shows


@dataclass(frozen=True)
class DockSpec:
    """Where a feature's dock goes: ``area`` is "left", "right" or "bottom"; ``tab_with`` names a dock to share
    a tab stack with, ``below`` one to split under. Hidden docks are listed in the View menu."""

    id: str
    title: str
    area: str = "right"
    tab_with: str | None = None
    below: str | None = None
    visible: bool = True
    raised: bool = False  # the front tab of its stack
    scroll: bool = True  # in a scroll area: a short dock scrolls, its contents never squeeze into overlap


@runtime_checkable
class Host(Protocol):
    """The window as a feature sees it. Checked: the main window and the tests' fake host are instances of it
    (``isinstance``, tests/ui/test_window_shell.py), so neither can drift from what features call."""

    show_dialogs: bool  # False in tests and screenshots: errors go to the status bar only
    remembers: bool  # whether recent files and folders are kept in the user's settings

    def add_dock(self, spec: DockSpec, widget: QWidget) -> QDockWidget: ...

    def remove_dock(self, dock_id: str) -> None: ...  # a dock added for a while (a popped-out panel)

    def show_dock(self, dock_id: str) -> None: ...

    def add_actions(self, specs: Iterable[ActionSpec]) -> None: ...

    def add_module_menu(self, entries: ModuleMenuEntries) -> None: ...

    def add_tile_menu(self, entries: TileMenuEntries) -> None: ...

    def add_input_row(self, widget: QWidget) -> None: ...

    def add_notice_row(self, widget: QWidget) -> None: ...

    def add_drop_handler(self, handler: DropHandler) -> None: ...

    def add_channel_listener(self, listener: ChannelListener) -> None: ...

    def add_channel_row(self, widget: QWidget) -> None: ...

    def show_error(self, message: str, dialog: bool = True) -> None: ...

    def show_status(self, message: str, msecs: int = 5000) -> None: ...

    def dialog_parent(self) -> QWidget: ...
