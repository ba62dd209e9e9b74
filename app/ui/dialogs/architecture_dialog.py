"""Which architecture a state_dict belongs to: a searchable list of the catalogue, and a non-strict option.

A state_dict holds only tensors, not the model's code, so the user names the architecture; the file's name is
often a hint (``resnet18_finetuned.pth``), so the best guess is selected before the user types anything.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.models import catalogue


def guess_architecture(path: str, names: list[str]) -> str | None:
    """The longest catalogue name inside the file name (``resnet18_finetuned.pth`` -> ``resnet18``), if any; the
    torchvision model before timm's of the same name (``timm/resnet50``), unless the file name says timm."""
    stem = Path(path).name.lower()
    hits = [name for name in names if name.split("/")[-1].lower() in stem]
    wants_timm = "timm" in stem
    return max(hits, key=lambda name: (len(name.split("/")[-1]), name.startswith("timm/") == wants_timm), default=None)


class ArchitectureDialog(QDialog):
    """Which architecture a state_dict belongs to: a searchable list of the catalogue, and a non-strict option."""

    def __init__(self, path: str, keys: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Which architecture are these weights for?")
        self.setObjectName("architectureDialog")
        self.resize(520, 560)
        names = catalogue(include_timm=True)
        intro = QLabel(
            f"<b>{Path(path).name}</b> holds only weights ({keys} tensors), not the model's code. "
            "Choose the architecture they belong to; Hookscope builds it and loads the weights into it."
        )
        intro.setWordWrap(True)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Type to search the catalogue (e.g. resnet)")
        self.filter.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.addItems(names)
        self.non_strict_box = QCheckBox("Non-strict load: load the tensors that fit and list the rest")
        self.non_strict_box.setToolTip(
            "Off (the default): nothing is loaded unless every key and shape fits; the mismatches are listed."
        )
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.filter.textChanged.connect(self._on_filter)
        self.list.currentTextChanged.connect(self._update_buttons)
        self.list.itemDoubleClicked.connect(lambda *_: self.accept())
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.filter)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.non_strict_box)
        layout.addWidget(self.buttons)
        guess = guess_architecture(path, names)
        if guess is not None:
            self.select(guess)
        self._update_buttons()
        self.filter.setFocus()

    @property
    def architecture(self) -> str | None:
        item = self.list.currentItem()
        return item.text() if item is not None and not item.isHidden() else None

    @property
    def non_strict(self) -> bool:
        return self.non_strict_box.isChecked()

    def select(self, name: str) -> bool:
        found = self.list.findItems(name, Qt.MatchFlag.MatchExactly)
        if not found:
            return False
        self.list.setCurrentItem(found[0])
        self.list.scrollToItem(found[0], QListWidget.ScrollHint.PositionAtCenter)
        return True

    def _on_filter(self, text: str) -> None:
        words = text.lower().split()
        first = None
        for row in range(self.list.count()):
            item = self.list.item(row)
            hidden = not all(word in item.text().lower() for word in words)
            item.setHidden(hidden)
            if not hidden and first is None:
                first = item
        current = self.list.currentItem()
        if (current is None or current.isHidden()) and first is not None:
            self.list.setCurrentItem(first)
        self._update_buttons()

    def _update_buttons(self, *_: object) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Open).setEnabled(self.architecture is not None)


def ask_architecture(path: str, keys: int, parent: QWidget | None = None) -> tuple[str, bool] | None:
    """(architecture, non-strict) for the state_dict in ``path``, or None when the user cancels."""
    dialog = ArchitectureDialog(path, keys, parent)
    if dialog.exec() != QDialog.DialogCode.Accepted or dialog.architecture is None:
        return None
    return dialog.architecture, dialog.non_strict
