"""The Input… dialog: input size, channels, crop, resize and normalisation for the loaded model.

It starts from the preprocessing in use; "Model's own" goes back to the weights' transforms (or the first guess
for a model file). Values that cannot work are refused in the dialog with one line, before anything runs.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.images import Preprocess
from hookscope.core.models.inputs import custom_preprocess


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

    def __init__(
        self, preprocess: Preprocess, own: Preprocess, model_channels: int | None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model input")
        self._own = own
        self._model_channels = model_channels
        self.result_preprocess: Preprocess | None = None
        self.size_box = QSpinBox()
        self.size_box.setRange(8, 4096)
        self.size_box.setSuffix(" px")
        self.channels = QComboBox()
        self.channels.addItem("3 (RGB)", 3)
        self.channels.addItem("1 (grayscale)", 1)
        self.crop = QDoubleSpinBox()
        self.crop.setRange(0.05, 1.0)
        self.crop.setDecimals(3)
        self.crop.setSingleStep(0.025)
        self.crop.setToolTip(
            "The shorter side is resized to size / fraction, then the centre is cropped to size "
            "(1.0: resize straight to size)"
        )
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
        form.addRow("Input size", self.size_box)
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
        self.size_box.setValue(preprocess.crop)
        self.channels.setCurrentIndex(self.channels.findData(preprocess.channels))
        self.crop.setValue(preprocess.crop / preprocess.resize if preprocess.resize else 1.0)
        self.interpolation.setCurrentText(preprocess.interpolation)
        self.mean.setText(numbers_text(preprocess.mean))
        self.std.setText(numbers_text(preprocess.std))
        self._check_channels()

    def _check_channels(self, *_: object) -> None:
        channels = self.channels.currentData()
        if self._model_channels is not None and channels != self._model_channels:
            self.message.setText(
                f"The model's first convolution takes {self._model_channels} channel(s): "
                f"runs will fail with {channels}."
            )
        else:
            self.message.setText("")

    def preprocess(self) -> Preprocess:
        """The values in the form as a Preprocess; raises HookscopeError (one line) for values that cannot work."""
        channels = int(self.channels.currentData())
        mean, std = parse_numbers(self.mean.text()), parse_numbers(self.std.text())
        return custom_preprocess(
            size=self.size_box.value(),
            mean=mean or None,
            std=std or None,
            channels=channels,
            crop_fraction=self.crop.value(),
            interpolation=self.interpolation.currentText(),
        )

    def accept(self) -> None:
        try:
            self.result_preprocess = self.preprocess()
        except HookscopeError as error:
            self.message.setText(str(error))
            return
        super().accept()


def ask_input(
    preprocess: Preprocess, own: Preprocess, model_channels: int | None, parent: QWidget | None = None
) -> Preprocess | None:
    """The preprocessing the user sets in the dialog, or None when cancelled."""
    dialog = InputDialog(preprocess, own, model_channels, parent)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return None
    return dialog.result_preprocess
