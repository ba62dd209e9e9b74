"""The command-line reference: every parser ``hookscope`` dispatches to, its ``--help`` text verbatim and a table of
its options, as one Markdown page. One generator for both places that show it: the built guide (``reference/cli.md``,
added by the MkDocs hook ``docs/hooks/guide_files.py``) and the window's own guide (Help > User guide, which asks
for this page by name when it is opened: ``hookscope.ui.widgets.guide_browser``), so ``--help``, the site and the
window cannot say different things."""

from __future__ import annotations

import argparse
import os


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
        if action.help == argparse.SUPPRESS:  # an old name, still taken (with a warning line), left out of --help
            new = "--" + action.dest.replace("_", "-")
            what = f"the old name of `{new}`: still taken, with a warning line; not in `--help`"
        else:
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


def render_reference(parsers: dict[str, argparse.ArgumentParser]) -> str:
    """The whole reference page, as Markdown, of ``parsers`` (``dispatch.command_parsers()``: every parser
    ``hookscope`` dispatches to)."""
    out = [
        "# Command-line reference",
        "",
        "Generated from the argparse parsers of `hookscope` (when the guide is built, and in the window's guide",
        "when the page is opened), so it says exactly what `hookscope --help` and `hookscope SUBCOMMAND --help`",
        "say. The guide's pages explain what each command is",
        "for: [the window](../window.md), [export](../sessions-exports.md), [edits](../edits.md),",
        "[your own model](../own-model.md), [scan](../scan.md), [visualize](../dream.md),",
        "[lessons](../lessons.md), [live](../live.md), [bench](../performance.md).",
        "",
        "Errors exit non-zero with one readable line on stderr (exit 2: an error you can fix; 1: a bug in",
        "Hookscope); `--debug` shows the traceback.",
        "",
    ]
    out += hook_words_table()
    for name, parser in parsers.items():
        title = f"hookscope {name}".strip()
        out += [f"## `{title}`", ""]
        out += ["```text", _help_text(parser).rstrip(), "```", ""]
        out += _options_table(parser) + [""]
    return "\n".join(out)
