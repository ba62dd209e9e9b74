"""MkDocs hook: the two parts of the guide that are not written by hand.

- ``reference/cli.md``: the command-line reference, rendered from the very argparse parsers that ``hookscope``
  parses its arguments with (the ``hookscope.cli`` package), so ``--help`` and the guide cannot drift.
- ``screenshots/*``: the pictures (and clips) in ``resources/screenshots/``, which the README shows too: not copied.

``tests/core/test_docs.py`` loads this file to check that every subcommand and option is in the reference.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "resources" / "screenshots"
REFERENCE = "reference/cli.md"
SCREENSHOT_TYPES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".mp4", ".webm")


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """``{"": the window's parser, "export": ..., ...}``: every parser ``hookscope`` dispatches to."""
    from hookscope.cli import bench, dispatch, download, export, live, scan, teach

    parsers = {"": dispatch.build_window_parser(), "export": export.build_export_parser(),
               "bench": bench.build_bench_parser(), "download": download.build_download_parser(),
               "visualize": teach.build_visualize_parser(), "lessons": teach.build_lessons_parser(),
               "scan": scan.build_scan_parser(), "live": live.build_live_parser()}  # fmt: skip
    missing = set(dispatch.SUBCOMMANDS) - set(parsers)
    if missing:  # a subcommand added to the CLI must be added here, or the reference would silently lack it
        raise RuntimeError(f"docs/hooks/guide_files.py does not know the subcommand(s) {sorted(missing)}")
    return parsers


def _help_text(parser: argparse.ArgumentParser) -> str:
    # A fixed width, so the reference does not depend on the terminal it was built in.
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    """One row per argument: as ``--help`` writes it (``--by {max,mean}``, ``--ray [ADDRESS]``), its default, its
    help text."""
    formatter = parser._get_formatter()  # argparse keeps no public list of its arguments, nor of their spelling
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        spelled = formatter._format_action_invocation(action)
        names = ", ".join(f"`{part}`" for part in spelled.split(", ")) if action.option_strings else f"`{spelled}`"
        default = action.default
        hidden = default is None or default is False or default == argparse.SUPPRESS
        shown = "" if hidden or isinstance(action, argparse._VersionAction) else (
            ",".join(map(str, default)) if isinstance(default, list) else str(default))  # fmt: skip
        what = (action.help or "").replace("%(default)s", str(default))
        if action.required:
            what += " **Required.**"
        rows.append(f"| {_escape(names)} | {_escape(f'`{shown}`' if shown else '')} | {_escape(what)} |")
    return rows


def hook_words_table() -> list[str]:
    """The hook words, from the one table every name of a kind is read from (``hookscope.core.common.vocabulary``):
    the words ``--hooks`` takes (the window's and every subcommand's), the tree's column, the panel's title and
    what an export writes."""
    from hookscope.core.common.vocabulary import TERMS
    from hookscope.core.teaching.snippets import kind_hook

    rows = [
        "## Hook words",
        "",
        "What `--hooks` takes, in the window (`hookscope --tick PATH --hooks WORDS`) and in `export`, `live` and",
        "`bench` alike, what the window and the manifest call each, and what an export writes for it. Before these",
        "words, the kinds in the last column were the words; they are still taken, with a warning line.",
        "",
        "| word | tree column | panel title | export files | PyTorch hook | engine kind (the old word) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for terms in TERMS:
        column = terms.column or "(none: shown as Grad)"
        files = f"`{terms.archive}`, `png/{terms.files}/`"
        hook = _escape(kind_hook(terms.kind).split(":")[0])
        rows.append(f"| `{terms.word}` | {column} | {terms.title} | {files} | {hook} | `{terms.kind}` |")
    return [*rows, ""]


def render_reference() -> str:
    """The whole reference page, as Markdown."""
    out = [
        "# Command-line reference",
        "",
        "Generated from the argparse parsers of `hookscope` when the guide is built, so it says exactly what",
        "`hookscope --help` and `hookscope SUBCOMMAND --help` say. The guide's pages explain what each command is",
        "for: [the window](../window.md), [export](../sessions-exports.md), [edits](../edits.md),",
        "[your own model](../own-model.md), [scan](../scan.md), [visualize](../dream.md),",
        "[lessons](../lessons.md), [live](../live.md), [bench](../performance.md).",
        "",
        "Errors exit non-zero with one readable line on stderr (exit 2: an error you can fix; 1: a bug in",
        "Hookscope); `--debug` shows the traceback.",
        "",
    ]
    out += hook_words_table()
    for name, parser in command_parsers().items():
        title = f"hookscope {name}".strip()
        out += [f"## `{title}`", ""]
        out += ["```text", _help_text(parser).rstrip(), "```", ""]
        out += _options_table(parser) + [""]
    return "\n".join(out)


def on_files(files, config):
    """Add the generated reference and the screenshots to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, REFERENCE, content=render_reference()))
    for image in sorted(p for p in SCREENSHOTS.iterdir() if p.suffix.lower() in SCREENSHOT_TYPES):
        files.append(File.generated(config, f"screenshots/{image.name}", abs_src_path=str(image)))
    return files
