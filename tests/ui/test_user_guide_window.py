"""Help > User guide shows the guide inside the window: its Markdown pages, which every installation ships (a checkout's
docs/, a pip install's hookscope/guide/, the bundle's), rendered with their pictures, links between pages, anchors,
back and forward. Issue 44 item 4: F1 used to hand ``index.md`` to the desktop, which had no program for Markdown
(Qt reported success) or showed it raw. The real screen is checked by test_window_polish_screen.py."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QImage, QKeySequence, QTextDocument

from hookscope.core.teaching.guide import CLI_REFERENCE, guide_pages, page_text, slug
from hookscope.ui.widgets.guide_browser import GuideWindow

ROOT = Path(__file__).resolve().parents[2]


def _guide(window) -> GuideWindow:
    return window.findChild(GuideWindow, "userGuide")


def test_f1_shows_the_guides_first_page_in_a_window_of_its_own(make_window, qtbot):
    window = make_window()
    action = window.menus.actions["help.guide"]
    assert action.shortcut() == QKeySequence(QKeySequence.StandardKey.HelpContents)
    action.trigger()
    guide = _guide(window)
    assert guide is not None and guide.isVisible()
    assert guide.page.source().toLocalFile() == str(ROOT / "docs" / "index.md")
    text = guide.page.toPlainText()
    assert text.startswith("Hookscope\nLook inside a PyTorch network.")  # rendered: no "# " nor "**" left
    assert "**" not in text and "](" not in text
    assert "User guide" in window.statusBar().currentMessage()
    action.trigger()  # F1 again raises the same window
    assert window.findChildren(GuideWindow) == [guide]


def test_the_screenshot_of_the_first_page_is_the_shipped_picture(make_window, qtbot):
    window = make_window()
    window.menus.actions["help.guide"].trigger()
    page = _guide(window).page
    shot = (ROOT / "resources" / "screenshots" / "default.png").as_uri()
    image = page.document().resource(QTextDocument.ResourceType.ImageResource, QUrl(shot))
    assert isinstance(image, QImage) and not image.isNull()
    assert image.width() <= page.viewport().width()  # scaled to the page, not a sideways scroll
    original = QImage(str(ROOT / "resources" / "screenshots" / "default.png"))
    assert abs(image.height() / image.width() - original.height() / original.width()) < 0.01


def test_links_between_pages_anchors_back_and_forward(make_window, qtbot):
    window = make_window()
    window.menus.actions["help.guide"].trigger()
    guide = _guide(window)
    page = guide.page
    page.setSource(QUrl("getting-started.md"))  # as a click on the first page's link resolves it
    assert page.source().toLocalFile() == str(ROOT / "docs" / "getting-started.md")
    assert guide.back.isEnabled() and guide.windowTitle() == "Getting started · user guide"
    page.setSource(QUrl("window.md#targets"))
    assert page.source().fileName() == "window.md"
    top = page.cursorForPosition(page.viewport().rect().topLeft()).block()
    assert page.verticalScrollBar().value() > 0, "the link's anchor did not scroll to its heading"
    assert top.text().startswith("Targets") or top.previous().text().startswith("Targets"), top.text()
    guide.back.click()
    assert page.source().fileName() == "getting-started.md"
    assert guide.forward.isEnabled()
    guide.forward.click()
    assert page.source().fileName() == "window.md"
    guide.contents.click()
    assert page.source().fileName() == "index.md"


def test_the_generated_pages_stand_in_without_a_generator(qtbot):
    pages = guide_pages()
    assert pages is not None
    cli = page_text(pages / CLI_REFERENCE, pages)  # no generator given (a page read outside the window)
    assert "hookscope export --help" in cli
    api = page_text(pages / "reference" / "api.md", pages, describe=lambda name, members: f"DOC OF {name} {members}")
    assert "DOC OF hookscope.capture None" in api and ":::" not in api and "options:" not in api
    assert "DOC OF hookscope.HookscopeError ()" in api and "DOC OF hookscope.Prediction None" in api
    assert "DOC OF hookscope.CapturedRecord ('name', 'word', 'hook', 'tensor', 'title', 'picture')" in api
    assert slug("The run as a standalone script: `--script OUT.py`") == "the-run-as-a-standalone-script-script-outpy"


def _open_page(window, name: str):
    window.menus.actions["help.guide"].trigger()
    page = _guide(window).page
    page.setSource(QUrl(name))  # as a click on a link to it resolves it
    assert page.source().fileName() == Path(name).name
    return page


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_the_windows_command_line_reference_is_every_parsers_help(make_window, qtbot):
    """Issue 44: the page was a stand-in ("run --help"). It is now made from the parsers themselves when it is
    opened: each subcommand's ``--help`` text, and every option of it, read from the parser objects."""
    from hookscope.cli.dispatch import SUBCOMMANDS, command_parsers, provide_guide_pages

    provide_guide_pages()  # as `hookscope` and hookscope.Viewer do before the window opens
    text = _open_page(make_window(), "reference/cli.md").toPlainText()
    parsers = command_parsers()
    assert set(parsers) == {"", *SUBCOMMANDS}
    headings = [f"hookscope {name}".strip() for name in parsers]
    places = [text.index(f"\n{heading}\n") for heading in headings]  # each subcommand's section, in order
    assert places == sorted(places)
    sections = dict(zip(headings, [text[a:b] for a, b in zip(places, [*places[1:], len(text)])], strict=True))
    checked = 0
    for name, parser in parsers.items():
        section = sections[f"hookscope {name}".strip()]
        usage = parser.format_usage().split()[1:4]  # the usage line's first words, as --help prints them
        assert " ".join(usage) in " ".join(section.split()), (name, usage)
        for action in parser._actions:
            for option in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section), (name, option)
                checked += 1
            if action.help and action.help != argparse.SUPPRESS:
                words = action.help.replace("%(default)s", str(action.default))
                assert _squeezed(words) in _squeezed(section), (name, action.dest)
    assert checked > 80


def test_the_windows_api_reference_is_every_public_names_signature(make_window, qtbot):
    """Issue 44: the page's directives showed a line on help(). Every name of ``hookscope.__all__`` is now on the
    page with the signature ``inspect.signature`` reads from the object itself and its docstring, and each member
    the page lists (``options: members: [...]``) with its own."""
    import hookscope

    text = _squeezed(_open_page(make_window(), "reference/api.md").toPlainText())
    source = (ROOT / "docs" / "reference" / "api.md").read_text()
    for name in hookscope.__all__:
        value = getattr(hookscope, name)
        assert _squeezed(f"hookscope.{name}") in text, name
        if callable(value):
            for parameter in inspect.signature(value).parameters.values():
                assert _squeezed(str(parameter)) in text, (name, str(parameter))
        doc = inspect.getdoc(value) if callable(value) else None
        if doc:
            first = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc.split("\n\n")[0])  # a role shows as code
            assert _squeezed(first.replace("``", "").replace("`", "")) in text.replace("`", ""), name
    listed = re.findall(r"^::: hookscope\.(\w+)\n\s+options:\n\s+members: \[([^\]]*)\]", source, re.MULTILINE)
    assert len(listed) >= 4
    for owner, members in listed:
        for member in (m.strip() for m in members.replace("\n", " ").split(",")):
            assert _squeezed(f"{owner}.{member}") in text, (owner, member)
            value = inspect.getattr_static(getattr(hookscope, owner), member, None)
            if inspect.isfunction(value):
                for parameter in list(inspect.signature(value).parameters.values())[1:]:
                    assert _squeezed(str(parameter)) in text, (owner, member, str(parameter))


def test_a_web_link_goes_to_the_browser_and_the_page_stays(make_window, qtbot, monkeypatch):
    from hookscope.ui.widgets import guide_browser

    opened: list[str] = []
    monkeypatch.setattr(guide_browser.QDesktopServices, "openUrl", lambda url: opened.append(url.toString()))
    window = make_window()
    window.menus.actions["help.guide"].trigger()
    page = _guide(window).page
    page.anchorClicked.emit(QUrl("https://pytorch.org/"))
    page.setSource(QUrl("https://pytorch.org/"))
    assert opened == ["https://pytorch.org/"]
    assert page.source().fileName() == "index.md"


def test_a_pip_install_carries_the_pages_and_pictures_and_finds_them(tmp_path):
    """A wheel built from this tree (as pip builds it) holds the guide; installed into a folder, Hookscope finds it
    there with no checkout in sight, and every page it links to and every picture it shows is in it."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("app", "resources", "docs"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(tmp_path.glob("hookscope-*.whl"))
    target = tmp_path / "site-packages"
    zipfile.ZipFile(wheel).extractall(target)
    probe = (
        "from pathlib import Path\n"
        "from hookscope.core.teaching.guide import guide_pages, page_text\n"
        "import re\n"
        "pages = guide_pages()\n"
        "print(pages)\n"
        "for page in sorted(pages.rglob('*.md')):\n"
        "    text = page_text(page, pages)\n"
        "    for link in re.findall(r'\\]\\(([^)#]+\\.(?:md|png))[^)]*\\)', text):\n"
        "        url = link if link.startswith('file:') else None\n"
        "        path = Path(url[7:]) if url else (page.parent / link)\n"
        "        if not link.startswith('http') and not (path.is_file() or path.resolve() == "
        "(pages / 'reference/cli.md').resolve()):\n"
        "            print('MISSING', page.name, link)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == str(target / "hookscope" / "guide")
    assert not [line for line in lines[1:] if line.startswith("MISSING")], lines[1:]


def test_the_bundle_carries_the_pages_where_the_app_looks(tmp_path):
    spec = (ROOT / "packaging" / "hookscope.spec").read_text()
    assert 'Path("hookscope/guide") / p.relative_to(ROOT / "docs").parent' in spec
    # laid out as the spec lays it out: the frozen package's folder beside the resources, no checkout around
    bundle = tmp_path / "_internal"
    (bundle / "resources").mkdir(parents=True)
    (bundle / "hookscope" / "guide").mkdir(parents=True)
    (bundle / "hookscope" / "guide" / "index.md").write_text("# Hookscope\n")
    assert guide_pages(bundle / "resources", bundle / "hookscope") == bundle / "hookscope" / "guide"


def test_a_viewer_started_from_python_gets_the_command_line_page_too(monkeypatch):
    """The window under the command line does not import it: what starts the window hands the generator in."""
    import hookscope
    from hookscope.ui.widgets import guide_reference

    monkeypatch.setattr(guide_reference, "_generators", {})
    assert "started without the command line" in guide_reference.cli_reference()
    monkeypatch.delitem(hookscope.__dict__, "Viewer", raising=False)  # the first use of hookscope.Viewer
    assert hookscope.Viewer is not None
    text = guide_reference.cli_reference()
    assert "started without the command line" not in text and "hookscope export" in text and "--hooks" in text
