"""Where the project and its downloads are: written once, in pyproject.toml's [project.urls], read at run time from
the installed package's metadata by `hookscope --help` (and the About box, tests/ui/test_about_box.py); the README's
download link is that same releases page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

from hookscope import __version__
from hookscope.core.common.project import homepage, project_urls, releases_page

ROOT = Path(__file__).resolve().parents[2]


def written_urls() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]


def test_the_metadata_holds_the_addresses_pyproject_writes():
    urls = written_urls()
    assert urls["Releases"].startswith(urls["Homepage"].rstrip("/") + "/")
    assert project_urls() == urls  # stale after an edit until `pip install -e .` rewrites the metadata
    assert (homepage(), releases_page()) == (urls["Homepage"], urls["Releases"])


def test_help_shows_the_version_the_project_and_its_downloads():
    done = subprocess.run([sys.executable, "-m", "hookscope", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    urls = written_urls()
    tail = done.stdout.rstrip().splitlines()[-2:]
    assert tail == [
        f"Hookscope {__version__}: {urls['Homepage']}",
        f"Downloads (installers for Linux, Windows and macOS): {urls['Releases']}",
    ]


def test_a_package_without_metadata_has_no_address():
    assert project_urls("hookscope-no-such-distribution") == {}


def test_the_readme_links_the_releases_page_it_names():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = set(re.findall(r"\]\((https://[^)\s]+)\)", readme))
    forge = {link for link in links if link.startswith(written_urls()["Homepage"])}
    assert forge == {written_urls()["Releases"]}, "README's download link must be [project.urls]'s Releases"
    guide = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert written_urls()["Releases"] in guide
