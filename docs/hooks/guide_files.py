"""MkDocs hook: the two parts of the guide that are not written by hand.

- ``reference/cli.md``: the command-line reference, rendered from the very argparse parsers that ``hookscope``
  parses its arguments with, by ``hookscope.cli.reference`` (which the window's own guide renders it with too), so
  ``--help``, the site and the window cannot drift.
- ``screenshots/*``: the pictures (and clips) in ``resources/screenshots/``, which the README shows too: not copied.

``tests/core/test_docs.py`` loads this file to check that every subcommand and option is in the reference.
"""

from __future__ import annotations

from pathlib import Path

from hookscope.cli.dispatch import command_parsers
from hookscope.cli.reference import (  # noqa: F401  (tests/core/test_docs.py reads them here)
    _escape,
    _help_text,
    _options_table,
    hook_words_table,
)
from hookscope.cli.reference import render_reference as _render


def render_reference() -> str:
    """The page of every parser ``hookscope`` dispatches to."""
    return _render(command_parsers())


ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "resources" / "screenshots"
REFERENCE = "reference/cli.md"
SCREENSHOT_TYPES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".mp4", ".webm")


def on_files(files, config):
    """Add the generated reference and the screenshots to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, REFERENCE, content=render_reference()))
    for image in sorted(p for p in SCREENSHOTS.iterdir() if p.suffix.lower() in SCREENSHOT_TYPES):
        files.append(File.generated(config, f"screenshots/{image.name}", abs_src_path=str(image)))
    return files
