"""Where the user guide is: the built MkDocs site shipped with the installer, or one built in a checkout.

The installer's bundle carries the site in ``resources/guide/`` (``packaging/hookscope.spec``), so *Help > User
guide* works offline; a source checkout has it in ``site/`` after ``mkdocs build``. Where neither exists (a checkout
whose guide was never built) the guide's first page in Markdown, ``docs/index.md``, or the README stands in.
"""

from __future__ import annotations

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
