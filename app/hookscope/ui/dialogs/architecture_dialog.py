"""Which architecture a state_dict belongs to: a searchable list of the catalogue, and a non-strict option.

A state_dict holds only tensors, not the model's code, so the user names the architecture. The architectures whose
keys and shapes all fit the file (``architectures_that_fit``, found on the worker before the question) are listed
first and selected, each saying so ("resnet18: all 122 tensors fit"); without one, the file's name is the hint
(``resnet18_finetuned.pth``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torchvision
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

from hookscope.core.models.catalogue import catalogue, load_model
from hookscope.core.models.state_dicts import read_state_dict

IGNORED_KEY = "num_batches_tracked"  # batch norm's counter: old checkpoints lack it, and loading does not need it


@dataclass(frozen=True)
class ArchitectureFit:
    """An architecture every tensor of a state_dict fits: the same keys, the same shapes."""

    name: str
    tensors: int

    @property
    def text(self) -> str:
        return f"{self.name}: all {self.tensors} tensors fit"


def _comparable(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    return {key: shape for key, shape in shapes.items() if not key.endswith(IGNORED_KEY)}


@lru_cache(maxsize=256)
def architecture_shapes(name: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The keys and shapes of an architecture's state_dict, built on the meta device (no memory, no weights); a
    builder that computes on its tensors while building (RegNet) is built on the CPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GoogLeNet's and Inception's FutureWarning about their initialisation
        module = _built_for_shapes(name)
    return tuple((key, tuple(value.shape)) for key, value in module.state_dict().items())


def _built_for_shapes(name: str) -> torch.nn.Module:
    """The architecture with random weights, on the meta device where its builder allows it."""
    if name.startswith("timm/"):
        return load_model(name, "none").module  # timm's through the catalogue's own loader
    try:
        with torch.device("meta"):
            return torchvision.models.get_model(name, weights=None)
    except NotImplementedError:  # a builder that computes on its tensors while building (RegNet)
        return load_model(name, "none").module


def _parameter_count(name: str) -> int | None:
    """The architecture's parameter count from torchvision's weights metadata (nothing is built or downloaded)."""
    try:
        return int(torchvision.models.get_model_weights(name).DEFAULT.meta["num_params"])
    except (ValueError, KeyError, AttributeError, TypeError):
        return None


def architectures_that_fit(path: str, names: list[str] | None = None) -> list[ArchitectureFit]:
    """The catalogue's architectures whose keys and shapes all fit the state_dict in ``path``, best first.

    Building 80 architectures to compare takes seconds, so only those whose parameter count (torchvision's
    metadata) matches the file's numbers of values are built: the parameters, plus at most a few percent of buffers
    (batch norm's running statistics). The architecture the file's name suggests is always tried (timm's too)."""
    state = read_state_dict(Path(path))
    shapes = _comparable({key: tuple(value.shape) for key, value in state.items()})
    values = sum(int(torch.Size(shape).numel()) for shape in shapes.values())
    names = names if names is not None else catalogue(include_timm=True)
    candidates = []
    guess = guess_architecture(path, names)
    if guess is not None:
        candidates.append(guess)
    for name in names:
        count = None if name.startswith("timm/") else _parameter_count(name)
        if count is not None and count <= values <= count * 1.03 + 1000 and name not in candidates:
            candidates.append(name)
    fits = []
    for name in candidates:
        try:
            own = _comparable(dict(architecture_shapes(name)))
        except Exception:  # noqa: BLE001  (an architecture that cannot be built here is simply not offered)
            continue
        if own == shapes:
            fits.append(ArchitectureFit(name, len(state)))
    return fits


def guess_architecture(path: str, names: list[str]) -> str | None:
    """The longest catalogue name inside the file name (``resnet18_finetuned.pth`` -> ``resnet18``), if any; the
    torchvision model before timm's of the same name (``timm/resnet50``), unless the file name says timm."""
    stem = Path(path).name.lower()
    hits = [name for name in names if name.split("/")[-1].lower() in stem]
    wants_timm = "timm" in stem
    return max(hits, key=lambda name: (len(name.split("/")[-1]), name.startswith("timm/") == wants_timm), default=None)


class ArchitectureDialog(QDialog):
    """Which architecture a state_dict belongs to: a searchable list of the catalogue, and a non-strict option."""

    def __init__(
        self, path: str, keys: int, parent: QWidget | None = None, fits: list[ArchitectureFit] | None = None
    ) -> None:
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
        self.fits = list(fits or [])
        fitting = [fit.name for fit in self.fits]
        self.fit_label = QLabel(
            "; ".join(fit.text for fit in self.fits)
            if self.fits
            else "No architecture of the catalogue fits every tensor: the closest guess is selected."
        )
        self.fit_label.setWordWrap(True)
        self.fit_label.setObjectName("muted" if not self.fits else "")
        self.list = QListWidget()
        # The architectures that fit first (saying so), then the rest of the catalogue.
        self.list.addItems([*fitting, *(name for name in names if name not in fitting)])
        for row, fit in enumerate(self.fits):
            self.list.item(row).setText(fit.name)
            self.list.item(row).setToolTip(fit.text)
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
        layout.addWidget(self.fit_label)
        layout.addWidget(self.filter)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.non_strict_box)
        layout.addWidget(self.buttons)
        guess = fitting[0] if fitting else guess_architecture(path, names)
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


def ask_architecture(
    path: str, keys: int, parent: QWidget | None = None, fits: list[ArchitectureFit] | None = None
) -> tuple[str, bool] | None:
    """(architecture, non-strict) for the state_dict in ``path``, or None when the user cancels."""
    dialog = ArchitectureDialog(path, keys, parent, fits)
    if dialog.exec() != QDialog.DialogCode.Accepted or dialog.architecture is None:
        return None
    return dialog.architecture, dialog.non_strict
