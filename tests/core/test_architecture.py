"""The folders show the architecture: no file imports a file that imports it back (directly or through others),
and the engine's floors hold (import-linter's contracts, also run by the test command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def _cycles(graph: grimp.ImportGraph, root: str) -> list[tuple[str, ...]]:
    """Each (module, imported, ..., module): a module, one it imports directly, and the chain back to it."""
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported.startswith(root) and imported != module:
                back = graph.find_shortest_chain(importer=imported, imported=module)
                if back:
                    found.append((module, *back))
    return found


def test_no_module_in_app_is_in_an_import_circle():
    graph = grimp.build_graph("hookscope", include_external_packages=False)
    assert len(graph.modules) > 100  # the whole app was read, not an empty package
    assert _cycles(graph, "hookscope") == []


def test_a_circle_is_found_when_there_is_one(tmp_path, monkeypatch):
    # The check itself can fail: two files of a throwaway package import each other.
    package = tmp_path / "circle_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circle_pkg import b\n")
    (package / "b.py").write_text("from circle_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("circle_pkg", cache_dir=None)
    assert ("circle_pkg.a", "circle_pkg.b", "circle_pkg.a") in _cycles(graph, "circle_pkg")


def test_the_import_contracts_hold():
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout
    assert "The engine's floors" in done.stdout
