"""What the model is fed, next to the input image, and the Input… dialog that changes it.

Catalogue models use their weights' own transforms; a model opened from a file starts from a guess
(``guess_preprocess``). Either way the user may set the input size, mean, std and 1 or 3 channels; the change
applies to the loaded model until another model is loaded, and the image runs again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import HookscopeError
from app.core.images import Preprocess
from app.core.model_inputs import custom_preprocess, describe_requirements, first_conv_channels

if TYPE_CHECKING:
    from app.core.models import LoadedModel
    from app.ui.main_window import MainWindow

KNOWN_TRANSFORMS = ("catalogue", "timm", "state_dict")  # sources whose preprocessing comes with the weights


def numbers_text(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


def parse_numbers(text: str) -> list[float]:
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p]
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise HookscopeError(f"'{text}' is not a list of numbers (e.g. 0.485, 0.456, 0.406).") from None


class InputDialog(QDialog):
    """Input size, crop, mean, std and channels for the loaded model."""

    def __init__(self, preprocess: Preprocess, own: Preprocess, model_channels: int | None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model input")
        self._own = own
        self._model_channels = model_channels
        self.result_preprocess: Preprocess | None = None
        self.size = QSpinBox()
        self.size.setRange(8, 4096)
        self.size.setSuffix(" px")
        self.channels = QComboBox()
        self.channels.addItem("3 (RGB)", 3)
        self.channels.addItem("1 (grayscale)", 1)
        self.crop = QDoubleSpinBox()
        self.crop.setRange(0.05, 1.0)
        self.crop.setDecimals(3)
        self.crop.setSingleStep(0.025)
        self.crop.setToolTip("The shorter side is resized to size / fraction, then the centre is cropped to size "
                             "(1.0: resize straight to size)")
        self.interpolation = QComboBox()
        self.interpolation.addItems(["bilinear", "bicubic", "nearest"])
        self.mean = QLineEdit()
        self.std = QLineEdit()
        for box in (self.mean, self.std):
            box.setPlaceholderText("one value per channel, or one for all")
        self.message = QLabel("")
        self.message.setObjectName("muted")
        self.message.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Input size", self.size)
        form.addRow("Channels", self.channels)
        form.addRow("Crop fraction", self.crop)
        form.addRow("Resize", self.interpolation)
        form.addRow("Mean", self.mean)
        form.addRow("Std", self.std)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        reset = buttons.addButton("Model's own", QDialogButtonBox.ButtonRole.ResetRole)
        reset.setToolTip("Back to the weights' own transforms (or the first guess for a model file)")
        reset.clicked.connect(lambda: self.show_values(self._own))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.channels.currentIndexChanged.connect(self._check_channels)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addWidget(buttons)
        self.show_values(preprocess)

    def show_values(self, preprocess: Preprocess) -> None:
        self.size.setValue(preprocess.crop)
        self.channels.setCurrentIndex(self.channels.findData(preprocess.channels))
        self.crop.setValue(preprocess.crop / preprocess.resize if preprocess.resize else 1.0)
        self.interpolation.setCurrentText(preprocess.interpolation)
        self.mean.setText(numbers_text(preprocess.mean))
        self.std.setText(numbers_text(preprocess.std))
        self._check_channels()

    def _check_channels(self, *_: object) -> None:
        channels = self.channels.currentData()
        if self._model_channels is not None and channels != self._model_channels:
            self.message.setText(f"The model's first convolution takes {self._model_channels} channel(s): "
                                 f"runs will fail with {channels}.")
        else:
            self.message.setText("")

    def preprocess(self) -> Preprocess:
        """The values in the form as a Preprocess; raises HookscopeError (one line) for values that cannot work."""
        channels = int(self.channels.currentData())
        mean, std = parse_numbers(self.mean.text()), parse_numbers(self.std.text())
        return custom_preprocess(size=self.size.value(), mean=mean or None, std=std or None, channels=channels,
                                 crop_fraction=self.crop.value(), interpolation=self.interpolation.currentText())

    def accept(self) -> None:
        try:
            self.result_preprocess = self.preprocess()
        except HookscopeError as error:
            self.message.setText(str(error))
            return
        super().accept()


class InputSettings(QObject):
    """The requirements line and the Input… button under the input image."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window
        self._own: dict[int, Preprocess] = {}  # id(LoadedModel) -> the preprocessing it came with
        self.requirements = QLabel("")
        self.requirements.setObjectName("muted")
        self.requirements.setWordWrap(True)
        self.requirements.setToolTip("What the model is fed: how the image is resized, centre-cropped and normalised")
        self.button = QPushButton("Input…")
        self.button.setToolTip("Input size, mean, std and channels for this model")
        self.button.clicked.connect(self.edit)
        self.button.setEnabled(False)
        row = QWidget()
        row.setObjectName("inputRequirements")
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.requirements, 1)
        layout.addWidget(self.button)
        panel_layout = window.input_panel.layout()
        panel_layout.insertWidget(panel_layout.indexOf(window.input_panel.description) + 1, row)
        self.row = row
        window.model_ready.connect(self._on_model_ready)

    def _on_model_ready(self) -> None:
        loaded = self._window.loaded
        if loaded is None:
            return
        self._own = {id(loaded): self._own.get(id(loaded), loaded.preprocess)}
        self.button.setEnabled(True)
        self._update_label(loaded)

    def _update_label(self, loaded: LoadedModel) -> None:
        own = self._own.get(id(loaded))
        if loaded.preprocess != own:
            origin = "set with Input…"
        elif loaded.source in KNOWN_TRANSFORMS:
            origin = "the weights' own transforms"
        else:
            origin = "a guess for a model file: check it with Input…"
        self.requirements.setText(f"Model input: {describe_requirements(loaded.preprocess)} ({origin})")
        self.button.setText("Input…" if loaded.source in KNOWN_TRANSFORMS else "Input… (guessed)")

    def ask_input(self, loaded: LoadedModel) -> Preprocess | None:
        """The dialog; returns the new preprocessing, or None when cancelled (tests replace this)."""
        dialog = InputDialog(loaded.preprocess, self._own.get(id(loaded), loaded.preprocess),
                             first_conv_channels(loaded.module), self._window)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        return dialog.result_preprocess

    def edit(self) -> None:
        loaded = self._window.loaded
        if loaded is None:
            return
        preprocess = self.ask_input(loaded)
        if preprocess is not None:
            self.set_preprocess(preprocess)

    def set_preprocess(self, preprocess: Preprocess) -> None:
        """Feed the loaded model with ``preprocess`` from now on, and run the image again."""
        loaded = self._window.loaded
        if loaded is None or preprocess == loaded.preprocess:
            return
        loaded.preprocess = preprocess
        self._update_label(loaded)
        self._window.statusBar().showMessage(f"Model input: {describe_requirements(preprocess)}", 6000)
        self._window.run_again()
