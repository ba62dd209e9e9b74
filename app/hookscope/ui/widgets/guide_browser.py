"""The user guide inside the window (Help > User guide): the guide's Markdown pages, shipped with every installation
(core/teaching/guide.py finds them), rendered by Qt with their pictures, links between pages, anchors, back and
forward; the pages the site's build generates (the command-line and Python API references) are generated here too,
when opened (guide_reference.py). Nothing outside Hookscope is asked: a desktop with no program for Markdown (Qt's
openUrl still answers success there) or no browser at all shows the guide the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QImage, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTextBrowser, QVBoxLayout, QWidget

from hookscope.core.teaching.guide import FIRST_PAGE, page_text, slug
from hookscope.ui.widgets.guide_reference import API_REFERENCE, GENERATED, complete_api_page, describe

TITLE = "Hookscope user guide"
IMAGE_MARGIN = 40  # px left beside a picture scaled to the page's width (the document's margins, a scroll bar)
# A heading that is all code (## `hookscope export`, ### `hookscope.capture`): Qt's Markdown draws it in the code
# font at the text's size, under the headings around it; without the backticks it reads as the heading it is.
_CODE_HEADING = re.compile(r"^(#{1,6} +)`([^`]+)`[ \t]*$", re.MULTILINE)


class GuidePage(QTextBrowser):
    """One page at a time: Markdown pages come through ``page_text`` and pictures are scaled to the page's width."""

    def __init__(self, pages: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pages = pages
        self.setOpenLinks(True)
        self.setOpenExternalLinks(False)  # web links go to the desktop's browser below; the guide's own stay here
        self.anchorClicked.connect(self._external)
        self.sourceChanged.connect(self._anchor_headings)

    def _external(self, url: QUrl) -> None:
        if url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    def doSetSource(  # noqa: N802 (Qt's name)
        self, source: QUrl | str, /, type: QTextDocument.ResourceType = QTextDocument.ResourceType.UnknownResource
    ) -> None:
        name = QUrl(source)
        if name.scheme() in ("http", "https", "mailto"):
            return  # opened outside by _external; the page stays
        if name.isRelative() and self.source().isValid():
            name = self.source().resolved(name)  # a page's own link, as its file (history and title use the file)
        if name.isLocalFile() and name.toLocalFile().endswith(".md"):
            type = QTextDocument.ResourceType.MarkdownResource
        super().doSetSource(name, type)

    def loadResource(self, type: int, source: QUrl | str) -> Any:  # noqa: N802 (Qt's name)
        name = QUrl(source)
        if name.isLocalFile():
            path = Path(name.toLocalFile())
            if path.suffix == ".md":
                try:
                    text = page_text(path, self.pages, describe=describe, generated=GENERATED)
                    api = path.resolve() == (self.pages / API_REFERENCE).resolve()
                    text = complete_api_page(text) if api else text
                    return _CODE_HEADING.sub(r"\1\2", text)
                except (OSError, UnicodeDecodeError) as error:
                    return f"# Page not found\n\n`{path.name}` is not part of this guide ({error.__class__.__name__})."
            if type == QTextDocument.ResourceType.ImageResource:
                image = QImage(str(path))
                room = max(200, self.viewport().width() - IMAGE_MARGIN)
                if not image.isNull() and image.width() > room:
                    image = image.scaledToWidth(room, Qt.TransformationMode.SmoothTransformation)
                return image
        return super().loadResource(type, name)

    def _anchor_headings(self, url: QUrl) -> None:
        """Give every heading the anchor the built guide gives it (Qt's Markdown gives none), so that links like
        ``window.md#targets`` land on their heading; then go there."""
        block = self.document().begin()
        while block.isValid():
            if block.blockFormat().headingLevel():
                cursor = QTextCursor(block)
                cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                mark = QTextCharFormat()
                mark.setAnchor(True)
                mark.setAnchorNames([slug(block.text())])
                cursor.mergeCharFormat(mark)
            block = block.next()
        if url.fragment():
            self.scrollToAnchor(url.fragment())
        else:
            self.verticalScrollBar().setValue(0)


class GuideWindow(QWidget):
    """A window of its own beside the main one: Back, Forward, Contents and the page."""

    def __init__(self, pages: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("userGuide")
        self.setWindowTitle(TITLE)
        self.page = GuidePage(pages, self)
        self.back = QPushButton("◀ Back")
        self.forward = QPushButton("Forward ▶")
        self.contents = QPushButton("Contents")
        self.where = QLabel("")
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.back.clicked.connect(self.page.backward)
        self.forward.clicked.connect(self.page.forward)
        self.contents.clicked.connect(self.page.home)
        self.page.backwardAvailable.connect(self.back.setEnabled)
        self.page.forwardAvailable.connect(self.forward.setEnabled)
        self.page.sourceChanged.connect(self._title)
        bar = QHBoxLayout()
        for button in (self.back, self.forward, self.contents):
            bar.addWidget(button)
        bar.addWidget(self.where, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.page, 1)
        self.back.setEnabled(False)
        self.forward.setEnabled(False)
        self.page.setSource(QUrl.fromLocalFile(str(pages / FIRST_PAGE)))
        if parent is not None:
            parent.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """The guide goes with its main window (a window of its own would otherwise outlive the closed app)."""
        if watched is self.parent() and event.type() in (QEvent.Type.Close, QEvent.Type.Hide):
            self.close()
        return False

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(900, 700)

    def _title(self, url: QUrl) -> None:
        title = self.page.documentTitle() or Path(url.toLocalFile()).stem
        block = self.page.document().begin()
        while block.isValid() and not block.blockFormat().headingLevel():
            block = block.next()
        if block.isValid():
            title = block.text()
        self.where.setText(title)
        # Qt adds "— Hookscope"; the guide's first page, itself titled "Hookscope", is "User guide" (not the name twice)
        self.setWindowTitle("User guide" if title == "Hookscope" else f"{title} · user guide")


def show_guide(pages: Path, parent: QWidget) -> GuideWindow:
    """The guide's window, made once per main window and raised again on the next F1."""
    window = parent.findChild(GuideWindow, "userGuide")
    if window is None:
        window = GuideWindow(pages, parent)
        screen = parent.screen().availableGeometry()
        window.resize(min(900, screen.width() - 40), min(760, screen.height() - 60))
    window.show()
    window.raise_()
    window.activateWindow()
    return window
