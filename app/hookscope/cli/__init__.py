"""The ``hookscope`` command line (the console script ``hookscope = "hookscope.cli:main"``).

``dispatch``: the window's parser, the subcommand table and ``main``; ``common``: the options, argument types and
model loading every subcommand shares; ``progress``: progress lines and download bars on stderr; one module per
subcommand (``export``, ``scan``, ``live``, ``bench``, ``download``, ``teach`` for visualize and lessons).
"""

from hookscope.cli.dispatch import main

__all__ = ["main"]
