"""Features built from the workspace and a host: each contributes docks, actions and menu entries.

``FEATURES`` is the order the window builds them in (docks that tab with another come after it).
"""

from __future__ import annotations

from collections.abc import Callable

FEATURES: list[tuple[str, Callable]] = []
