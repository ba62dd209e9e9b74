"""The toolbar's model, weights and device boxes: what is in use, in words, and why a device is not offered."""

from __future__ import annotations

import os

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget
from superqt import QSearchableComboBox

WEIGHT_CHOICES = {"default": "Pretrained weights", "none": "Random weights (seed 0)"}
HUB_PREFIX = "hf:"  # a model from the Hugging Face Hub, typed in: "hf:google/vit-base-patch16-224"


class ModelChooser(QWidget):
    """Model (searchable), weights and device; ``*_chosen`` signals carry what the user picked."""

    model_chosen = Signal(str)
    weights_chosen = Signal(str)
    device_chosen = Signal(str)

    def __init__(
        self,
        models: list[str],
        devices: list[str],
        unavailable: dict[str, str] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.model_box = QSearchableComboBox()
        self.model_box.addItems(models)
        self.model_box.setMinimumWidth(150)
        self.model_box.setMaximumWidth(240)
        self.model_box.setToolTip(
            "The model: type to search the catalogue, or type hf:ORG/NAME and press Enter for "
            "a model from the Hugging Face Hub"
        )
        self.model_box.textActivated.connect(self.model_chosen)
        # The box inserts nothing typed (it is a search), so Enter on a name it does not list emits nothing: a Hub
        # name is taken from here.
        line = self.model_box.lineEdit()
        assert line is not None  # the box is editable
        line.returnPressed.connect(self._on_return)
        self.weights_box = QComboBox()
        for key, label in WEIGHT_CHOICES.items():
            self.weights_box.addItem(label, key)
        self.weights_box.setToolTip("The weights the network runs with")
        self.weights_box.activated.connect(lambda index: self.weights_chosen.emit(self.weights_box.itemData(index)))
        self.device_box = QComboBox()
        self.device_box.addItems(devices)
        why = "\n".join((unavailable or {}).values())
        self.device_box.setToolTip("Where the network runs" + (f"\n\nNot offered here:\n{why}" if why else ""))
        self.device_box.textActivated.connect(self.device_chosen)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        for label, widget in (("Model", self.model_box), ("Weights", self.weights_box), ("Device", self.device_box)):
            layout.addWidget(QLabel(label))
            layout.addWidget(widget)

    def _on_return(self) -> None:
        text = self.model_box.currentText().strip()
        if text.startswith(HUB_PREFIX) and self.model_box.findText(text) < 0:
            self.model_chosen.emit(text)

    def show_model(self, name: str) -> None:
        if name.startswith(HUB_PREFIX) and self.model_box.findText(name) < 0:
            self.model_box.addItem(name)  # listed from now on, to come back to
        self.model_box.setCurrentText(name)

    def show_weights(self, weights: str, in_use: str = "") -> None:
        """Select ``weights`` ("default", "none" or a file path); ``in_use`` says what the network really runs
        with when it differs (the pretrained file is missing: "Random weights (seed 0)")."""
        if weights not in WEIGHT_CHOICES and self.weights_box.findData(weights) < 0:
            self.weights_box.addItem(f"File: {os.path.basename(weights)}", weights)
        index = self.weights_box.findData(weights)
        self.weights_box.setCurrentIndex(index)
        if weights == "default":
            self.weights_box.setItemText(index, in_use or WEIGHT_CHOICES["default"])

    def show_device(self, device: str) -> None:
        self.device_box.setCurrentText(device)
