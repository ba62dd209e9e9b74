"""The ``hookscope`` command line (the console script ``hookscope = "hookscope.cli:main"``).

``dispatch``: the window's parser, the subcommand table and ``main``; ``common``: the options, argument types and
model loading every subcommand shares; ``progress``: progress lines and download bars on stderr; one module per
subcommand (``export``, ``scan``, ``live``, ``bench``, ``download``, ``teach`` for visualize and lessons).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``hookscope`` command (``hookscope.cli.dispatch.main``); ``argv`` None: this process's command line.

    The command line's modules are imported here, not when this package is, so that Ctrl-C while they load (the
    first fraction of a second) is the command's one line and exit 130 too, never a traceback."""
    try:
        from hookscope.cli.dispatch import main as command
    except KeyboardInterrupt:
        print("hookscope: interrupted", file=sys.stderr, flush=True)
        if argv is None:
            os._exit(130)  # a module left half-imported: nothing of the interpreter's teardown is worth running
        return 130
    return command(argv)


__all__ = ["main"]
