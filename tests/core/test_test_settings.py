"""The suite's own settings name tests that exist: a moved or renamed test would otherwise leave its slow cases in the
default run unseen (the hostile tests were regrouped and FIRST_CASES_ONLY kept naming the old file)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _first_cases_only() -> dict[str, int]:
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FIRST_CASES_ONLY" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("tests/conftest.py defines no FIRST_CASES_ONLY")


def test_every_test_first_cases_only_names_exists() -> None:
    missing = []
    for node_id in _first_cases_only():
        path, _, name = node_id.partition("::")
        source = ROOT / path
        defined = source.is_file() and any(
            isinstance(node, ast.FunctionDef) and node.name == name
            for node in ast.parse(source.read_text(encoding="utf-8")).body
        )
        if not defined:
            missing.append(node_id)
    assert missing == [], f"FIRST_CASES_ONLY names tests that do not exist: {missing}"


def test_no_two_test_files_share_a_name() -> None:
    """tests/ has no packages: pytest imports each file by its bare name, and a second file of the same name in
    another folder stops the whole run at collection ("import file mismatch")."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name in seen and path.name != "conftest.py":
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert clashes == [], f"files of the same name: {clashes}"
