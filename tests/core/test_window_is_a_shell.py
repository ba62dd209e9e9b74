"""The house rules that keep the window a shell and targets typed (issue 45), read from the sources.

The main window places the views and features and holds the docks, menus, drops and layout; the views subscribe to
the workspace themselves (``hookscope.ui.views``), so the window stays small. A gradient target is an ``Objective``
from where its words come in (the command line's argument type, a saved session, the Python API, all in or through
``hookscope.core``) to where it is run: no module of the window or the command line builds or reads target text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app" / "hookscope"
MAIN_WINDOW_MOST_LINES = 600
# Where target words come in outside the engine, and are handed straight to its parser.
PARSES_TARGET_WORDS = {"cli/common.py": "the command line's --target argument type"}
TARGET_WORDS = re.compile(r"(class|box|similar|text):\S*")
TARGET_PREFIXES = ("class:", "box:", "similar:", "text:")


def test_the_main_window_is_a_shell_of_at_most_600_lines() -> None:
    lines = len((APP / "ui" / "main_window.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAIN_WINDOW_MOST_LINES, (
        f"ui/main_window.py has {lines} lines: move what a view shows into hookscope.ui.views (a view subscribes to "
        "the workspace itself) or a feature, not into the shell"
    )


def _target_text_uses(path: Path) -> list[str]:
    """Where ``path`` parses, builds or compares target words: calls of the parser, f-strings and literals in
    ``--target``'s forms, ``startswith`` on their prefixes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "parse_target":
                found.append(f"line {node.lineno}: parse_target(...)")
            if name == "startswith":
                words = [a.value for a in ast.walk(node) if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if any(w.startswith(TARGET_PREFIXES) for w in words):
                    found.append(f"line {node.lineno}: startswith({', '.join(map(repr, words))})")
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith(TARGET_PREFIXES):
                found.append(f"line {node.lineno}: f-string {first.value!r}…")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TARGET_WORDS.fullmatch(node.value):
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


def test_no_module_outside_the_engine_parses_or_builds_target_text() -> None:
    offenders = {}
    for front in ("ui", "cli"):
        for path in sorted((APP / front).rglob("*.py")):
            relative = path.relative_to(APP).as_posix()
            uses = _target_text_uses(path)
            if relative in PARSES_TARGET_WORDS:
                uses = [use for use in uses if "parse_target" not in use]
            if uses:
                offenders[relative] = uses
    assert offenders == {}, (
        "target text handled outside hookscope.core (keep an Objective; parse words only where they come in): "
        f"{offenders}"
    )


def test_the_rule_finds_what_it_looks_for(tmp_path) -> None:
    """The check itself can fail: each way of handling target text it knows is found in a module that does it."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from hookscope.core.engine.target_words import parse_target\n"
        "def f(space, c, t):\n"
        "    space.set_target(f'class:{c}@1,2,3,4')\n"
        "    space.set_target('box:2')\n"
        "    if str(t).startswith(('similar:', 'text:')):\n"
        "        return parse_target(t)\n",
        encoding="utf-8",
    )
    assert {use.split(":")[0] for use in _target_text_uses(sample)} == {"line 3", "line 4", "line 5", "line 6"}
