"""Where the window keeps what it remembers between sessions (recent files, dock layout)."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths

SETTINGS_DIR_ENV = "HOOKSCOPE_SETTINGS_DIR"


def app_settings() -> QSettings:
    """The user's settings; an INI file in ``$HOOKSCOPE_SETTINGS_DIR`` when set (tests, portable installs)."""
    folder = os.environ.get(SETTINGS_DIR_ENV)
    if folder:
        return QSettings(os.path.join(folder, "hookscope.ini"), QSettings.Format.IniFormat)
    return QSettings("Hookscope", "Hookscope")


def read_list(settings: QSettings, key: str) -> list[str]:
    """QSettings returns a str for one entry, a list for several and None for none: always a list here."""
    value = settings.value(key, [])
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def settings_folder() -> Path:
    """The per-user data folder in the platform's usual place (or ``$HOOKSCOPE_SETTINGS_DIR``)."""
    folder = os.environ.get(SETTINGS_DIR_ENV)
    if folder:
        return Path(folder)
    return Path(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation))
