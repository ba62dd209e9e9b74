"""Servers on 127.0.0.1 for download tests: real sockets, started and stopped around one test."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[socketserver.BaseServer]:
    """Serve ``server`` (bound to 127.0.0.1, port 0) on a daemon thread; ``server.base`` is its http:// address."""
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def files_in(folder: Path) -> list[str]:
    """The names in ``folder`` (none when it does not exist): what a download left behind."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []
