"""The Add intervention dialog: kind, module (with completion), channels, factor, the other image of a mix.

It only describes an ``Intervention`` (``value()``, a one-line ``HookscopeError`` where the fields describe none);
the Interventions feature adds it to the workspace.
"""

from __future__ import annotations

import os
import re

from PySide6.QtCore import QStandardPaths, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.interventions import CHANNEL_KINDS, EDIT_KINDS, Intervention
from hookscope.core.models.images import IMAGE_SUFFIXES
from hookscope.ui.dialogs.folders import last_folder, remember_folder

OTHER_IMAGE_FOLDER = "mix_image"  # where the mix edit's image was last chosen
EDIT_LABELS: dict[str, str] = {
    "zero": "Switch off channels of the output",
    "keep": "Keep only some channels of the output",
    "scale": "Scale the output (or some channels)",
    "scale-input": "Scale the input (forward pre-hook)",
    "scale-grad": "Scale the gradient of the output (tensor hook)",
    "scale-grad-input": "Scale grad_input (full backward hook)",
    "mix": "Mix the output with its output on another image",
}
DEFAULT_FACTORS: dict[str, float] = {
    "scale": 2.0,
    "scale-input": 2.0,
    "scale-grad": 1.6,
    "scale-grad-input": 1.6,
    "mix": 0.5,
}


def pictures_folder() -> str:
    """Where a file dialog for an image starts when nothing else is known: the user's pictures, else home."""
    pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    return pictures if pictures and os.path.isdir(pictures) else os.path.expanduser("~")


def parse_channels(text: str) -> tuple[int, ...]:
    """``"3, 5 8-10"`` -> (3, 5, 8, 9, 10); a bad part raises ``HookscopeError`` in one line."""
    channels: list[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        low, dash, high = part.partition("-")
        if low.isdigit() and (not dash or high.isdigit()):
            first, last = int(low), int(high) if dash else int(low)
            if last < first:
                raise HookscopeError(f"The range '{part}' runs backwards; write it low-high, e.g. 3-7.")
            channels.extend(range(first, last + 1))
        else:
            raise HookscopeError(f"'{part}' is not a channel: channels are whole numbers from 0, e.g. 3, 5 or 8-10.")
    return tuple(channels)


class EditDialog(QDialog):
    """Add an intervention: kind, module (with completion), channels, factor, the other image of a mix."""

    def __init__(
        self,
        paths: list[str],
        parent: QWidget | None = None,
        *,
        kind: str = "zero",
        path: str = "",
        channels: tuple[int, ...] = (),
        factor: float | None = None,
        other_image: str = "",
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add an intervention")
        self.setMinimumWidth(520)
        self._paths = set(paths)
        self.kind_box = QComboBox()
        for key in EDIT_KINDS:
            self.kind_box.addItem(EDIT_LABELS[key], key)
        self.path_edit = QLineEdit(path)
        self.path_edit.setPlaceholderText("module path, e.g. layer4.1.conv2")
        completer = QCompleter(sorted(p for p in paths if p), self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.path_edit.setCompleter(completer)
        self.channels_edit = QLineEdit(", ".join(str(c) for c in channels))
        self.channels_edit.setPlaceholderText("e.g. 3, 5 or 8-10")
        self.factor_box = QDoubleSpinBox()
        self.factor_box.setDecimals(3)
        self.factor_box.setRange(-1000.0, 1000.0)
        self.factor_box.setSingleStep(0.1)
        self.other_edit = QLineEdit(other_image)
        self.other_edit.setPlaceholderText("the other image file")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        other_row = QHBoxLayout()
        other_row.setContentsMargins(0, 0, 0, 0)
        other_row.addWidget(self.other_edit, 1)
        other_row.addWidget(browse)
        self._other_widget = QWidget()
        self._other_widget.setLayout(other_row)
        self.preview = QLabel("")
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #ff9b8f;")
        self.form = QFormLayout()
        self.form.addRow("Kind", self.kind_box)
        self.form.addRow("Module", self.path_edit)
        self.form.addRow("Channels", self.channels_edit)
        self.form.addRow("Factor", self.factor_box)
        self.form.addRow("Other image", self._other_widget)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(self.form)
        layout.addWidget(self.preview)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)

        self.kind_box.currentIndexChanged.connect(self._on_kind)
        for edit in (self.path_edit, self.channels_edit, self.other_edit):
            edit.textChanged.connect(self._update)
        self.factor_box.valueChanged.connect(self._update)
        self.kind_box.setCurrentIndex(max(0, self.kind_box.findData(kind)))
        self._on_kind()
        if factor is not None:
            self.factor_box.setValue(factor)
        self._update()

    @property
    def kind(self) -> str:
        return str(self.kind_box.currentData())

    def _on_kind(self, *_: object) -> None:
        kind = self.kind
        self.form.setRowVisible(self.channels_edit, kind in (*CHANNEL_KINDS, "scale"))
        self.form.setRowVisible(self.factor_box, kind not in CHANNEL_KINDS)
        self.form.setRowVisible(self._other_widget, kind == "mix")
        if kind == "mix":
            self.factor_box.setRange(0.0, 1.0)
            self.factor_box.setToolTip("lambda: lambda × this image + (1 − lambda) × the other image")
        else:
            self.factor_box.setRange(-1000.0, 1000.0)
            self.factor_box.setToolTip("The factor to multiply by")
        if kind in DEFAULT_FACTORS:
            self.factor_box.setValue(DEFAULT_FACTORS[kind])
        self._update()

    def _browse(self) -> None:
        patterns = " ".join(f"*{suffix}" for suffix in sorted(IMAGE_SUFFIXES))
        start = os.path.dirname(self.other_edit.text()) or last_folder(OTHER_IMAGE_FOLDER, False, pictures_folder())
        path, _ = QFileDialog.getOpenFileName(self, "The other image", start, f"Images ({patterns});;All files (*)")
        if path:
            remember_folder(OTHER_IMAGE_FOLDER, path, False)  # for this session: the dialog knows no settings
            self.other_edit.setText(path)

    def value(self) -> Intervention:
        """The intervention the fields describe; ``HookscopeError`` (one line) where they describe none."""
        kind, path = self.kind, self.path_edit.text().strip()
        if path not in self._paths:
            raise HookscopeError(f"The model has no module '{path}'." if path else "Choose a module.")
        channels = parse_channels(self.channels_edit.text()) if kind in (*CHANNEL_KINDS, "scale") else ()
        if kind in CHANNEL_KINDS:
            return Intervention(kind, path, channels=channels)
        other = self.other_edit.text().strip() if kind == "mix" else None
        if kind == "mix" and other and not os.path.isfile(other):
            raise HookscopeError(f"There is no file '{other}'.")
        return Intervention(kind, path, channels=channels, factor=self.factor_box.value(), other_image=other or None)

    def _update(self, *_: object) -> None:
        try:
            edit = self.value()
        except HookscopeError as error:
            self.problem.setText(str(error))
            self.preview.setText("")
            ok = False
        else:
            self.problem.setText("")
            self.preview.setText(f"{edit.describe()}.\nCommand line: --edit {edit.spec}")
            ok = True
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)
