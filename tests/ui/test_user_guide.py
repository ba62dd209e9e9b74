"""Where the guide's Markdown pages are missing (an older bundle), Help > User guide opens the built site in the
desktop's browser; the window's own guide viewer, which every installation now uses, is tested in
test_user_guide_window.py."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMessageBox, QWidget

from hookscope.core.teaching.guide import GuideLocation
from hookscope.ui.actions import builtin


class Opened:
    """Stands in for QDesktopServices: records the URLs asked for, answers as a desktop would."""

    def __init__(self, answer: bool = True) -> None:
        self.urls: list[str] = []
        self.answer = answer

    def openUrl(self, url) -> bool:  # noqa: N802 (Qt's name)
        self.urls.append(url.toString())
        return self.answer


class Shell(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []
        self.statuses: list[str] = []

    def show_error(self, message: str, dialog: bool = True) -> None:
        self.errors.append(message)

    def show_status(self, message: str, msecs: int = 5000) -> None:
        self.statuses.append(message)

    def dialog_parent(self) -> QWidget:
        return self


def _built_site(tmp_path: Path) -> Path:
    index = tmp_path / "resources" / "guide" / "index.html"
    index.parent.mkdir(parents=True)
    index.write_text("<html><title>Hookscope user guide</title></html>")
    return index


def test_the_help_menu_opens_the_local_guide_in_the_browser(make_window, tmp_path, monkeypatch):
    index = _built_site(tmp_path)
    opened = Opened()
    monkeypatch.setattr(builtin, "QDesktopServices", opened)
    monkeypatch.setattr(builtin, "guide_pages", lambda: None)
    monkeypatch.setattr(builtin, "find_guide", lambda: GuideLocation(index, built=True))
    window = make_window()
    action = window.menus.actions["help.guide"]
    help_menu = window.menus.menu("Help")
    assert help_menu.actions()[0] is action and action.text() == "User guide"
    assert action.shortcut() == QKeySequence(QKeySequence.StandardKey.HelpContents)
    action.trigger()
    assert opened.urls == [index.as_uri()]
    assert str(index) in window.statusBar().currentMessage()


def test_without_a_local_guide_it_says_where_the_guide_is(qtbot, monkeypatch):
    shell = Shell()
    qtbot.addWidget(shell)
    opened = Opened()
    monkeypatch.setattr(builtin, "QDesktopServices", opened)
    monkeypatch.setattr(builtin, "guide_pages", lambda: None)
    monkeypatch.setattr(builtin, "find_guide", lambda: None)
    builtin.open_user_guide(shell)
    box = next(w for w in shell.findChildren(QMessageBox))
    assert "not part of this installation" in box.text() and "mkdocs build" in box.text()
    assert opened.urls == []


def test_a_desktop_that_cannot_open_it_is_an_error_message(qtbot, tmp_path, monkeypatch):
    shell = Shell()
    qtbot.addWidget(shell)
    index = _built_site(tmp_path)
    monkeypatch.setattr(builtin, "QDesktopServices", Opened(answer=False))
    monkeypatch.setattr(builtin, "guide_pages", lambda: None)
    monkeypatch.setattr(builtin, "find_guide", lambda: GuideLocation(index, built=True))
    builtin.open_user_guide(shell)
    assert shell.errors and str(index) in shell.errors[0] and not shell.statuses


def test_a_checkout_without_a_built_guide_opens_its_markdown_and_says_so(qtbot, tmp_path, monkeypatch):
    shell = Shell()
    qtbot.addWidget(shell)
    page = tmp_path / "docs" / "index.md"
    page.parent.mkdir()
    page.write_text("# Hookscope\n")
    opened = Opened()
    monkeypatch.setattr(builtin, "QDesktopServices", opened)
    monkeypatch.setattr(builtin, "guide_pages", lambda: None)
    monkeypatch.setattr(builtin, "find_guide", lambda: GuideLocation(page, built=False))
    builtin.open_user_guide(shell)
    assert opened.urls == [page.as_uri()]
    assert "mkdocs build" in shell.statuses[0]
