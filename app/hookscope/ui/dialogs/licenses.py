"""Help > About Hookscope > Licences: Hookscope's licence, the third-party notices (with the LGPL terms for Qt and
how to replace its libraries) and every bundled component's own licence files, readable inside the app.

The files live in ``resources/licenses/``; a bundle adds Hookscope's ``LICENSE`` and, in ``third-party/NAME/``,
the licence files of each package it contains (copied from the packages' metadata by ``packaging/hookscope.spec``).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.resources import resource_dir

NOTICES = "THIRD-PARTY-NOTICES.md"
FIRST = (NOTICES, "LICENSE", "LGPL-3.0.txt", "GPL-3.0.txt")


def licence_files() -> list[tuple[str, Path]]:
    """(title, file) for every licence text this installation has, the notices first."""
    folder = resource_dir() / "licenses"
    found: dict[str, Path] = {}
    if folder.is_dir():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            found[path.relative_to(folder).as_posix()] = path
    checkout_licence = resource_dir().parent / "LICENSE"  # a source checkout: the repository's own LICENSE
    if "LICENSE" not in found and checkout_licence.is_file():
        found["LICENSE"] = checkout_licence
    titles = {
        "LICENSE": "Hookscope (MIT)",
        NOTICES: "Third-party notices",
        "LGPL-3.0.txt": "GNU LGPL 3.0 (Qt)",
        "GPL-3.0.txt": "GNU GPL 3.0",
    }
    ordered = [name for name in FIRST if name in found] + sorted(name for name in found if name not in FIRST)
    return [(titles.get(name, name.removeprefix("third-party/")), found[name]) for name in ordered]


class LicensesDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Licences")
        self.resize(900, 620)
        self.files = licence_files()
        self.list = QListWidget()
        for title, path in self.files:
            item = QListWidgetItem(title)
            item.setData(Qt.ItemDataRole.UserRole, str(path))
            item.setToolTip(str(path))
            self.list.addItem(item)
        self.text = QTextBrowser()
        self.text.setOpenExternalLinks(True)
        split = QSplitter()
        split.addWidget(self.list)
        split.addWidget(self.text)
        split.setSizes([260, 640])
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(split)
        layout.addWidget(buttons)
        self.list.currentRowChanged.connect(self.show_file)
        if self.files:
            self.list.setCurrentRow(0)

    def show_file(self, row: int) -> None:
        if not 0 <= row < len(self.files):
            return
        path = self.files[row][1]
        try:
            content = path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            content = f"{path} could not be read: {error}"
        if path.suffix.lower() == ".md":
            self.text.setMarkdown(content)
        else:
            self.text.setPlainText(content)


_WITHOUT_PARENT: list[LicensesDialog] = []  # kept alive while open (a parent keeps the others)


def show_licenses(parent: QWidget | None) -> LicensesDialog:
    """Non-blocking (``open``), like the About box."""
    dialog = LicensesDialog(parent)
    if parent is None:
        _WITHOUT_PARENT.append(dialog)
        dialog.finished.connect(lambda _result: _WITHOUT_PARENT.remove(dialog))
    dialog.open()
    return dialog
