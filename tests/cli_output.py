"""What the command line says on stderr, without its progress lines.

Long commands show progress (``app/hookscope/cli/progress.py``); with stderr not a terminal, as in these tests, that is
plain lines, each starting with its label (``export PATH: running the model``, ``boxes: 0/128 top-k entries``).
An error is still one line of its own: tests that hold a command to "one readable line" read it here."""

from __future__ import annotations

# The labels of every ProgressLine the commands make (app/hookscope/cli/*.py, app/hookscope/cli/scan.py's phases).
PROGRESS_LABELS = ("export ", "export:", "scan: ", "boxes: ", "receptive fields: ", "PNG strips: ", "page: ",
                   "visualize: ", "lessons: ")  # fmt: skip


def message_lines(err: str) -> list[str]:
    """stderr's lines that are not progress (a terminal's redrawn line keeps only what followed its last \\r)."""
    lines = [line.split("\r")[-1] for line in err.splitlines()]
    return [line for line in lines if line.strip() and not line.startswith(PROGRESS_LABELS)]
