"""The folders show the architecture: no file imports a file that imports it back (directly or through others),
and the engine's floors hold (import-linter's contracts, also run by the test command). And the code reads from
where it lives: each name is imported from the module that defines it, and no function passes 80 lines without its
reason written right above it."""

from __future__ import annotations

import ast
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


# ---- no function over 80 lines without a reason written beside it ---------------------------------------------------
LONG_LINES = 80
REASON = "# long because:"
APP = ROOT / "app" / "hookscope"
NOT_CHECKED_YET: tuple[str, ...] = ()  # every module is checked; nothing is added here


def long_functions_without_a_reason(source: str, name: str = "<source>") -> list[str]:
    """``name:line function (N lines)`` for each function or method of ``source`` longer than ``LONG_LINES`` lines
    (from its ``def`` to its last line) whose reason is not written beside it: a ``# long because: ...`` comment on
    the lines right above its ``def`` (or above its decorators)."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= LONG_LINES:
            continue
        above = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 2  # the line above, 0-based
        comment = []
        while above >= 0 and lines[above].strip().startswith("#"):
            comment.append(lines[above].strip())
            above -= 1
        if not any(line.startswith(REASON) and line[len(REASON) :].strip() for line in comment):
            found.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_in_app_passes_80_lines_without_a_reason_beside_it():
    found = []
    for path in sorted(APP.rglob("*.py")):
        name = path.relative_to(APP).as_posix()
        if not name.startswith(NOT_CHECKED_YET):
            found += long_functions_without_a_reason(path.read_text(encoding="utf-8"), name)
    assert found == [], f"split these, or write '{REASON} ...' right above the def:\n" + "\n".join(found)


def test_a_long_function_is_found_unless_its_reason_is_written_above_it():
    body = "".join(f"        x{i} = {i}\n" for i in range(LONG_LINES))
    plain = f"def short():\n    return 1\n\n\nclass A:\n    @staticmethod\n    def long():\n{body}"
    assert long_functions_without_a_reason(plain) == ["<source>:7 long (81 lines)"]
    reasoned = plain.replace(
        "    @staticmethod", "    # long because: one table, read top to bottom\n    @staticmethod"
    )
    assert long_functions_without_a_reason(reasoned) == []
    empty = plain.replace("    @staticmethod", "    # long because:\n    @staticmethod")
    assert long_functions_without_a_reason(empty) == ["<source>:8 long (81 lines)"]
    exactly = f"def at_the_limit():\n{body[: body.rindex('        x')]}"
    assert long_functions_without_a_reason(exactly) == []


# ---- each name imported from its home ------------------------------------------------------------------------------
# Packages whose re-exports are a public face on purpose: ``import hookscope`` (the Python API) and the command's entry
# point (pyproject's ``hookscope = "hookscope.cli:main"``).
PUBLIC_FACES = ("hookscope", "hookscope.cli")


def _module_file(module: str) -> Path | None:
    path = ROOT / "app" / Path(*module.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_into(module: str) -> tuple[set[str], dict[str, str]]:
    """(names ``module`` defines at its top level, {name: module it imports it from}) for its top-level imports,
    those under ``if TYPE_CHECKING:`` and ``try:`` included."""
    path = _module_file(module)
    tree = ast.parse(path.read_text(encoding="utf-8")) if path is not None else ast.Module(body=[], type_ignores=[])
    defined: set[str] = set()
    imported: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        for inner in ast.walk(node) if isinstance(node, ast.If | ast.Try | ast.ImportFrom) else ():
            if isinstance(inner, ast.ImportFrom) and inner.module:
                imported.update({alias.asname or alias.name: inner.module for alias in inner.names})
    return defined, imported


def imports_not_from_home(files: dict[str, str]) -> list[str]:
    """``file:line name from MODULE (defined in HOME)`` for each ``from hookscope.MODULE import name`` in ``files``
    (name -> source) where MODULE only imports ``name`` from elsewhere: a re-export hides where the code lives."""
    seen: dict[str, tuple[set[str], dict[str, str]]] = {}
    found = []
    for name, source in files.items():
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hookscope")):
                continue
            if node.module in PUBLIC_FACES:
                continue
            defined, imported = seen.setdefault(node.module, _imported_into(node.module))
            for alias in node.names:
                home = imported.get(alias.name)
                if alias.name in defined or home is None or _module_file(f"{node.module}.{alias.name}"):
                    continue
                found.append(f"{name}:{node.lineno} {alias.name} from {node.module} (defined in {home})")
    return found


def test_each_name_is_imported_from_its_home():
    files = {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for folder in ("app", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
    }
    assert imports_not_from_home(files) == []


def test_an_import_through_a_re_export_is_found():
    # hookscope.core.engine.hooks imports HookKind from the vocabulary to use it: importing it from there is found.
    found = imports_not_from_home({"x.py": "from hookscope.core.engine.hooks import HookKind, HookRegistry\n"})
    assert found == ["x.py:1 HookKind from hookscope.core.engine.hooks (defined in hookscope.core.common.vocabulary)"]
