"""Where a file dialog starts: the folder last used for the same kind of file.

Each kind (visualizations saved, folders scanned, the other image of a mix edit) has its own key: the folder is
kept for the session, and in the user's settings when the window remembers. The first time, the caller's fallback
(the user's Pictures folder, or home)."""

from __future__ import annotations

import os

from hookscope.ui.state.settings import app_settings

_SESSION: dict[str, str] = {}  # this session's folders, kept also when nothing is written to the settings


def last_folder(key: str, remembers: bool, fallback: str | None = None) -> str:
    """The folder last used for ``key`` if it still exists, else ``fallback`` (home when not given)."""
    folder = _SESSION.get(key)
    if folder is None and remembers:
        saved = app_settings().value(f"folders/{key}", "")
        folder = str(saved) if saved else None
    if folder and os.path.isdir(folder):
        return folder
    return fallback if fallback and os.path.isdir(fallback) else os.path.expanduser("~")


def remember_folder(key: str, path: str | os.PathLike, remembers: bool) -> None:
    """Keep the folder of ``path`` (or ``path`` itself, a folder) as where the next ``key`` dialog starts."""
    path = os.path.abspath(os.fspath(path))
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    _SESSION[key] = folder
    if remembers:
        app_settings().setValue(f"folders/{key}", folder)
