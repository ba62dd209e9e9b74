"""SIGTERM handled like Ctrl-C: raised where the program is, so that its cleanups run.

By default SIGTERM (``kill PID``, a service manager stopping a job, a closing terminal's session) ends a Python
process on the spot: no ``finally`` runs, and a half-written file stays (a download's ``.part`` file in the torch
hub cache). Inside ``sigterm_raises()`` SIGTERM raises :class:`Terminated` in the main thread instead, a
``KeyboardInterrupt``, so every cleanup written for Ctrl-C runs for it too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGTERM_EXIT = 128 + 15  # the status a shell reports for a process ended by SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (see :func:`sigterm_raises`)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`; the previous handler is restored after it.

    Only the main thread may install signal handlers; elsewhere (or where SIGTERM does not exist) this does nothing.
    """
    term = getattr(signal, "SIGTERM", None)
    if term is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(term, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(term, previous)
