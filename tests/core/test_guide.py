"""Where Help > User guide finds the guide: the bundle's built copy, a checkout's built site, else its Markdown."""

from __future__ import annotations

from pathlib import Path

from hookscope.core.common.resources import resource_dir
from hookscope.core.teaching.guide import find_guide


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "resources").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "mkdocs.yml").write_text("site_name: x\n")
    (root / "docs" / "index.md").write_text("# Hookscope\n")
    (root / "README.md").write_text("# Hookscope\n")
    return root


def test_the_bundles_shipped_copy_comes_first(tmp_path):
    resources = tmp_path / "bundle" / "resources"
    (resources / "guide").mkdir(parents=True)
    (resources / "guide" / "index.html").write_text("<html></html>")
    guide = find_guide(resources)
    assert guide is not None and guide.built and guide.path == resources / "guide" / "index.html"
    assert str(guide.path) in guide.note


def test_a_checkout_opens_its_built_site(tmp_path):
    root = _checkout(tmp_path)
    (root / "site").mkdir()
    (root / "site" / "index.html").write_text("<html></html>")
    guide = find_guide(root / "resources")
    assert guide is not None and guide.built and guide.path == root / "site" / "index.html"


def test_an_unbuilt_checkout_opens_the_guides_markdown_and_says_how_to_build_it(tmp_path):
    root = _checkout(tmp_path)
    guide = find_guide(root / "resources")
    assert guide is not None and not guide.built and guide.path == root / "docs" / "index.md"
    assert "mkdocs build" in guide.note
    (root / "docs" / "index.md").unlink()
    assert find_guide(root / "resources").path == root / "README.md"


def test_an_installation_without_the_guide_has_none(tmp_path):
    resources = tmp_path / "site-packages" / "hookscope" / "resources"  # a wheel: no mkdocs.yml above it
    resources.mkdir(parents=True)
    assert find_guide(resources) is None


def test_this_checkout_finds_a_guide():
    guide = find_guide()
    root = resource_dir().parent
    assert guide is not None
    assert guide.path in (root / "site" / "index.html", root / "docs" / "index.md")
