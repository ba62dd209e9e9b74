"""Print Hookscope's version, read where pyproject.toml says it is (standard library only, no install needed).

    python packaging/project_version.py            0.1.0
    python packaging/project_version.py --tag v0.1.0   0.1.0, or exit 1 when the tag names another version

pyproject.toml's version is dynamic ([tool.setuptools.dynamic] version = {attr = "hookscope._version.__version__"}):
this script follows that attribute to its file and reads the literal assigned there, as setuptools does, so the
release workflow, the archive names (build.sh, build-windows.ps1, hookscope.spec read the same file) and the
installed package's metadata can never disagree.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def version_file(root: Path = ROOT) -> tuple[Path, str]:
    """The file that holds the version and the name assigned there, from pyproject.toml's dynamic attribute."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]  # "hookscope._version.__version__"
    module, name = attr.rsplit(".", 1)
    package_dirs = project["tool"]["setuptools"].get("package-dir", {})
    top, *rest = module.split(".")
    base = root / package_dirs.get(top, Path(package_dirs.get("", ".")) / top)
    return base.joinpath(*rest).with_suffix(".py"), name


def read_version(root: Path = ROOT) -> str:
    path, name = version_file(root)
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    raise SystemExit(f"project_version: no literal {name} = '...' in {path}")


def main(argv: list[str]) -> int:
    version = read_version()
    if argv[:1] == ["--tag"] and len(argv) == 2:
        if argv[1] != f"v{version}":
            path, _name = version_file()
            print(
                f"project_version: the tag {argv[1]} does not name version {version} "
                f"({path.relative_to(ROOT)}): tag v{version}, or change the version first",
                file=sys.stderr,
            )
            return 1
    elif argv:
        print("usage: project_version.py [--tag vX.Y.Z]", file=sys.stderr)
        return 2
    print(version)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
