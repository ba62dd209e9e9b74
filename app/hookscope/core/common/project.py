"""Where Hookscope lives: its address on the forge and its releases page (the downloads).

The addresses are written in one place, ``[project.urls]`` in pyproject.toml, and read here from the installed
package's metadata (an installed or editable package has it; the installer bundles ship it too, see
packaging/hookscope.spec), so ``hookscope --help``, the About box and the docs' download links cannot drift apart.
Without metadata (code run from a bare checkout that was never installed) there is no address to show: ``None``.
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "hookscope"


def project_urls(distribution: str = DISTRIBUTION) -> dict[str, str]:
    """``[project.urls]`` as the metadata keeps it (``Project-URL: Label, address`` lines), by label."""
    try:
        entries = metadata.metadata(distribution).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return {}
    urls = {}
    for entry in entries:
        label, _, address = entry.partition(",")
        if address.strip():
            urls[label.strip()] = address.strip()
    return urls


def homepage() -> str | None:
    return project_urls().get("Homepage")


def releases_page() -> str | None:
    """The page the installers are published on (a draft until a release is made: see docs/installers.md)."""
    return project_urls().get("Releases")
