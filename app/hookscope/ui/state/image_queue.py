"""The list of images the user can step through, and the recent-files list. No Qt here."""

from __future__ import annotations

import os
from collections.abc import Iterable

RECENT_LIMIT = 10


class ImageQueue:
    """Files dropped or opened together: the first is shown, the rest wait to be stepped through."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.index: int | None = None

    def replace(self, paths: Iterable[str | os.PathLike]) -> str | None:
        """Start a new list; returns the path to show first (None for an empty list)."""
        self.paths = [os.fspath(p) for p in paths]
        self.index = 0 if self.paths else None
        return self.current

    @property
    def current(self) -> str | None:
        return self.paths[self.index] if self.index is not None else None

    def select(self, index: int) -> str | None:
        if 0 <= index < len(self.paths):
            self.index = index
        return self.current

    def step(self, delta: int) -> str | None:
        """The next (``delta`` = 1) or previous (-1) file, wrapping around; None when the list is empty."""
        if not self.paths:
            return None
        start = self.index if self.index is not None else -1 if delta > 0 else 0
        self.index = (start + delta) % len(self.paths)
        return self.current

    def __len__(self) -> int:
        return len(self.paths)


def push_recent(recent: Iterable[str], path: str, limit: int = RECENT_LIMIT) -> list[str]:
    """``path`` first, without duplicates, at most ``limit`` entries."""
    path = os.path.abspath(path)
    return [path] + [p for p in recent if p != path][: limit - 1]
