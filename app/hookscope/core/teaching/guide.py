"""Where the user guide is: its Markdown pages, which every installation ships and Help > User guide shows in the
window itself (``guide_pages``, ``page_text``), and the built MkDocs site, opened in the desktop's browser only where
the pages are missing (``find_guide``).

The pages are a checkout's ``docs/`` (source and editable installs) or the package's ``guide/`` folder (``pip
install``: package data in pyproject.toml; the installer's bundle: ``packaging/hookscope.spec``). The bundle also
carries the built site in ``resources/guide/``; a source checkout has it in ``site/`` after ``mkdocs build``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hookscope.core.common.resources import resource_dir

GUIDE_FOLDER = "guide"  # resources/guide/ in a bundle: the built site
BUILD_HINT = "pip install -e '.[docs]' && mkdocs build"


@dataclass(frozen=True)
class GuideLocation:
    """A file to open in the desktop's browser or viewer, and whether it is the built guide itself."""

    path: Path
    built: bool

    @property
    def note(self) -> str:
        if self.built:
            return f"User guide: {self.path}"
        return f"The user guide is not built in this checkout ({BUILD_HINT}); opened {self.path.name} instead."


def _checkout(resources: Path) -> Path | None:
    """The source checkout ``resources`` belongs to (the folder with mkdocs.yml), if any."""
    root = resources.parent
    return root if (root / "mkdocs.yml").is_file() else None


def find_guide(resources: Path | None = None) -> GuideLocation | None:
    """The best local copy of the guide, or None when this installation has none (a plain pip install)."""
    resources = resource_dir() if resources is None else resources
    shipped = resources / GUIDE_FOLDER / "index.html"
    if shipped.is_file():
        return GuideLocation(shipped, built=True)
    root = _checkout(resources)
    if root is None:
        return None
    built = root / "site" / "index.html"
    if built.is_file():
        return GuideLocation(built, built=True)
    for source in (root / "docs" / "index.md", root / "README.md"):
        if source.is_file():
            return GuideLocation(source, built=False)
    return None


# The guide's Markdown pages, read in the window's own guide viewer (Help > User guide) wherever Hookscope is
# installed: a checkout's docs/ (source and editable installs), the package's guide/ folder (pip install: package
# data in pyproject.toml; the bundle: packaging/hookscope.spec). No browser or Markdown program is needed.
PAGES_FOLDER = "guide"  # hookscope/guide/ when installed
FIRST_PAGE = "index.md"
# Generated from the parsers (hookscope.cli.reference), by the site's build (docs/hooks/guide_files.py) and by the
# window's guide when the page is opened: no file of that name is in docs/.
CLI_REFERENCE = "reference/cli.md"
_DIRECTIVE = re.compile(r"^::: *(?P<name>[\w.]+)\n(?P<options>(?:[ \t]+.*\n|\n(?=[ \t]))*)", re.MULTILINE)
_MEMBERS = re.compile(r"^\s*members:\s*(?:\[(?P<names>[^\]]*)\]|(?P<flag>false|true))", re.MULTILINE)
_SCREENSHOT = re.compile(r"\]\((?:\.\./)*screenshots/(?P<name>[\w.-]+)\)")
# The docstrings name other objects the Sphinx way (:class:`Preprocess`); in Markdown the role would show as text.
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|obj|exc|data|const):`~?([^`]+)`")
# What a page on the command line says where no generator is at hand (``page_text`` without ``generated``).
CLI_STAND_IN = """# Command-line reference

This page is generated from `hookscope`'s own parsers. Every subcommand prints the same text itself:

```
hookscope --help
hookscope export --help
hookscope SUBCOMMAND --help
```

[Back to the guide's first page](../index.md)
"""


def guide_pages(resources: Path | None = None, package: Path | None = None) -> Path | None:
    """The folder holding the guide's Markdown (``index.md`` and the pages it links to), or None."""
    resources = resource_dir() if resources is None else resources
    package = Path(__file__).resolve().parents[2] if package is None else package  # hookscope/
    root = _checkout(resources)
    for folder in ([root / "docs"] if root is not None else []) + [package / PAGES_FOLDER]:
        if (folder / FIRST_PAGE).is_file():
            return folder
    return None


def slug(title: str) -> str:
    """A heading's anchor as the built guide writes it (Python-Markdown's toc ``slugify``): ``#the-channel-view``."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def plain_roles(text: str) -> str:
    """``:class:`Preprocess``` -> ```Preprocess```: a code span of the name, as a reader of the source sees it (the
    site's API reference through ``docs/hooks/griffe_roles.py``, the window's through ``page_text``'s describer)."""
    return _ROLE.sub(lambda match: f"`{match.group(1)}`", text)


Members = tuple[str, ...] | None  # the members a directive asks for: None for every public one, () for none


def directive_members(options: str) -> Members:
    """The ``members:`` option of a mkdocstrings directive: ``[a, b]`` those, ``false`` none, absent every one."""
    found = _MEMBERS.search(options)
    if found is None or found["flag"] == "true":
        return None
    if found["flag"] == "false":
        return ()
    return tuple(name.strip() for name in found["names"].replace("\n", " ").split(",") if name.strip())


def page_text(
    page: Path,
    pages: Path,
    resources: Path | None = None,
    describe: Callable[[str, Members], str] | None = None,
    generated: Mapping[str, Callable[[], str]] | None = None,
) -> str:
    """The Markdown of one page as the guide viewer shows it: the screenshots the site build adds
    (``screenshots/NAME.png``) point at the shipped pictures, a mkdocstrings directive (``::: hookscope.capture``)
    becomes what ``describe(name, members)`` writes of the name (its signature and docstring, and those of the
    members the directive asks for; without a describer, a line on ``help()``), and a page only the site build
    writes (``reference/cli.md``) is made by ``generated[its path under pages]``, else a page on ``--help``."""
    if not page.is_file():
        try:
            relative = page.resolve().relative_to(pages.resolve()).as_posix()
        except ValueError:
            raise FileNotFoundError(page) from None
        maker = (generated or {}).get(relative)
        if maker is not None:
            return maker()
        if relative == CLI_REFERENCE:
            return CLI_STAND_IN
        raise FileNotFoundError(page)
    text = page.read_text(encoding="utf-8")
    shots = (resource_dir() if resources is None else resources) / "screenshots"
    text = _SCREENSHOT.sub(lambda m: f"]({(shots / m['name']).as_uri()})", text)

    def directive(match: re.Match[str]) -> str:
        name = match["name"]
        body = describe(name, directive_members(match["options"])) if describe is not None else ""
        return body or f"#### `{name}`\n\nIn Python, `help({name})` prints its signature and docstring.\n\n"

    return _DIRECTIVE.sub(directive, text)
