"""What the window opens and saves besides images: model files, sessions, exports; and the missing-weights
download and the input settings. ``install_file_features`` adds them to a window (File menu entries, the banner's
Download row, the requirements line under the input image); ``open_dropped_files`` routes dropped files."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction

from app.ui.features.input_settings import InputSettings
from app.ui.features.open_model import ModelFiles, is_model_file
from app.ui.features.session_files import Sessions, is_session_file
from app.ui.features.weights_download import WeightsDownload

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow


def install_file_features(window: MainWindow) -> None:
    """Create the window's ``model_files``, ``weights_download``, ``input_settings`` and ``sessions`` and put their
    entries into the File menu, after the recent images."""
    window.model_files = ModelFiles(window)
    window.weights_download = WeightsDownload(window)
    window.input_settings = InputSettings(window)
    window.sessions = Sessions(window)

    recent_images = window.recent_menu.menuAction()
    menus = [action.menu() for action in window.menuBar().actions() if action.menu() is not None]
    file_menu = next((menu for menu in menus if recent_images in menu.actions()), menus[0])
    actions = file_menu.actions()
    after = actions[actions.index(recent_images) + 1] if recent_images in actions[:-1] else None

    def add(text: str, slot, shortcut: str | None = None) -> QAction:
        action = QAction(text, window)
        if shortcut:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        file_menu.insertAction(after, action)
        return action

    file_menu.insertSeparator(after)
    window.open_model_action = add("Open model…", window.model_files.open_dialog, "Ctrl+Shift+O")
    file_menu.insertMenu(after, window.model_files.recent_menu)
    file_menu.insertSeparator(after)
    window.open_session_action = add("Open session…", window.sessions.open_dialog)
    window.save_session_action = add("Save session…", window.sessions.save_dialog, "Ctrl+S")
    window.export_run_action = add("Export run…", window.sessions.export_run_dialog, "Ctrl+E")


def open_dropped_files(window: MainWindow, paths: list[str]) -> bool:
    """Open dropped model files as a model and session files as a session; True when nothing is left for the
    image list (the caller opens ``paths`` as images otherwise). Images dropped with them still open."""
    models = [p for p in paths if is_model_file(p)]
    sessions = [p for p in paths if is_session_file(p)]
    if not models and not sessions:
        return False
    images = [p for p in paths if p not in models and p not in sessions and os.path.isfile(p)]
    if sessions:
        window.sessions.open(sessions[0])
    elif models:
        window.model_files.open(models[0])
    skipped = len(models) + len(sessions) - 1
    if skipped:
        window.statusBar().showMessage(f"Opened {os.path.basename((sessions or models)[0])}; "
                                       f"drop one model or session file at a time ({skipped} more left out).", 8000)
    if images and not sessions:
        window.open_paths(images)
    return True
