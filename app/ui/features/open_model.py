"""Opening a model from a file in the window: File > Open model…, dropped model files, File > Recent models.

What the file is decides what is asked (see ``app/core/model_files.py``): a state_dict needs the architecture it
belongs to (a searchable chooser with a non-strict option), a pickled model or a Python factory runs code and so
needs the user's explicit trust (a warning naming the file and the Python objects it would import, Cancel being
the default), TorchScript and files that are none of these are refused with the reason. Every question goes
through one ``ask_*`` method, so tests answer it without a modal dialog. Loading runs on the window's worker like
any model switch: the ticked modules carry over where their paths exist, and a failure keeps the previous model.
"""

from __future__ import annotations

import ast
import html
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QMenu,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import HookscopeError
from app.core.model_files import (
    MODEL_FILE_SUFFIXES,
    ArchitectureRequired,
    TrustRequired,
    open_model_file,
    split_factory,
)
from app.core.models import LoadedModel, catalogue
from app.core.session import file_sha256
from app.core.tree import module_tree
from app.ui.state.requests import LoadOutcome
from app.ui.state.settings import app_settings, read_list

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

RECENT_MODELS_KEY = "recent_models"
RECENT_LIMIT = 10
MODEL_FILE_FILTER = "Model files (" + " ".join(f"*{s}" for s in MODEL_FILE_SUFFIXES) + ");;All files (*)"
# The command line's words in engine messages, and what the window calls the same thing.
_WINDOW_WORDS = (
    (
        "a state_dict with --arch NAME, a model.py:build factory (with --weights FILE), or a pickled nn.Module with "
        "--trust",
        "a state_dict, a model.py file with a function that builds the model, or a pickled nn.Module "
        "(File > Open model…)",
    ),
    ("(--model-file model.py:build --weights FILE)", "(a model.py file with a function that builds the model)"),
    ("--model-file model.py:build --weights FILE", "a model.py file with a function that builds the model"),
    ("the state_dict with --arch NAME", "the state_dict and choose its architecture"),
    (" with --arch NAME", ""),
    ("pass --trust if you trust its author", "confirm that you trust its author"),
)


def window_words(message: str) -> str:
    """An engine message with its command-line hints (``--arch NAME``, ``--trust``) in the window's words."""
    for cli, gui in _WINDOW_WORDS:
        message = message.replace(cli, gui)
    return message


def is_model_file(path: str | os.PathLike) -> bool:
    """Whether a dropped file is opened as a model (rather than as an image)."""
    file, _ = split_factory(path)
    return file.suffix.lower() in MODEL_FILE_SUFFIXES


def execute_load_with(generation: int, work: Callable[[], LoadedModel]) -> LoadOutcome:
    """Run ``work`` (it opens a model some other way than by catalogue name) and build its module tree."""
    start = time.perf_counter()
    loaded = work()
    nodes = module_tree(loaded.module)
    return LoadOutcome(generation, loaded, nodes, (time.perf_counter() - start) * 1000)


def factory_names(file: Path) -> list[str]:
    """Functions and classes defined at the top of a Python file, read with ``ast`` (nothing in it runs)."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    ]


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


def trust_box(path: str, objects: tuple[str, ...], parent: QWidget | None = None) -> QMessageBox:
    """The warning before code from a file runs: what the file is, what it would import; Cancel is the default."""
    file, factory = split_factory(path)
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("Run code from this file?")
    box.setTextFormat(Qt.TextFormat.RichText)
    name = html.escape(file.name)
    if factory is not None:
        box.setText(f"Opening <b>{name}</b> imports it and calls <code>{html.escape(factory)}()</code>: "
                    "the Python code in the file runs on this computer.")
    else:
        box.setText(f"<b>{name}</b> holds a pickled Python model. Opening it unpickles it, which can run any "
                    "code the file names on this computer.")
    parts = [f"<p>{html.escape(str(file))}</p>"]
    if objects:
        listed = "<br>".join(html.escape(o) for o in objects[:12])
        more = f"<br>… and {len(objects) - 12} more" if len(objects) > 12 else ""
        parts.append(f"<p>The file would import these Python objects:<br><code>{listed}{more}</code></p>")
    parts.append("<p>Open it only if you trust the person who made it.</p>")
    box.setInformativeText("".join(parts))
    box.trust_button = box.addButton("I trust this file", QMessageBox.ButtonRole.AcceptRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    return box


class ModelFiles(QObject):
    """The window's model files: opening one (asking what the file needs), and remembering recent models."""

    refused = Signal(str)  # a file was not opened: the reason (not trusted, no architecture chosen, an error)

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window
        self.file_hashes: dict[str, str] = {}  # model file (or model.py:build) -> SHA-256 when it was opened
        self._opened: dict[int, dict] = {}  # id(LoadedModel) -> its recent-models entry
        self.recent_menu = QMenu("Recent models", window)
        self.open_action = None
        window.model_ready.connect(self._on_model_ready)
        self.rebuild_recent_menu()

    # ---- questions (tests replace these) ------------------------------------------------------------------
    def ask_model_file(self) -> str | None:
        files = self._recent_files()
        start = str(split_factory(files[0]["spec"])[0].parent) if files else os.path.expanduser("~")
        path, _ = QFileDialog.getOpenFileName(self._window, "Open model", start, MODEL_FILE_FILTER)
        return path or None

    def ask_architecture(self, path: str, keys: int) -> tuple[str, bool] | None:
        """(architecture, non-strict) for a state_dict, or None when the user cancels."""
        dialog = ArchitectureDialog(path, keys, self._window)
        if dialog.exec() != QDialog.DialogCode.Accepted or dialog.architecture is None:
            return None
        return dialog.architecture, dialog.non_strict

    def ask_trust(self, path: str, objects: tuple[str, ...]) -> bool:
        """Whether the user trusts ``path`` enough to run code from it (Cancel is the default answer)."""
        box = trust_box(path, objects, self._window)
        box.exec()
        return box.clickedButton() is box.trust_button

    def ask_factory(self, file: Path, names: list[str]) -> str | None:
        """The function in a Python file that builds the model."""
        if not names:
            names = ["build"]
        name, ok = QInputDialog.getItem(self._window, "Open Python model",
                                        f"The function in {file.name} that returns the model:", names, 0, True)
        return name.strip() if ok and name.strip() else None

    # ---- opening ------------------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        path = self.ask_model_file()
        if path:
            self.open(path)

    def open(self, spec: str | os.PathLike, arch: str | None = None, trust: bool = False, strict: bool = True) -> None:
        """Open ``spec`` (a weights or model file, or ``model.py:build``) in the background; asks what it needs."""
        spec = os.fspath(spec)
        file, factory = split_factory(spec)
        if file.suffix.lower() == ".py" and factory is None:
            names = factory_names(file)
            factory = "build" if "build" in names else (names[0] if len(names) == 1 else self.ask_factory(file, names))
            if not factory:
                self._refuse(f"{file.name} was not opened: no function to build the model was chosen.")
                return
            spec = f"{file}:{factory}"
        entry = {"spec": spec, "arch": arch, "strict": strict}
        hashes, opened = self.file_hashes, self._opened

        def work() -> LoadedModel:  # on the worker thread
            loaded = open_model_file(spec, arch=arch, trust=trust, strict=strict)
            hashes[loaded.model_file] = file_sha256(file)
            opened[id(loaded)] = entry
            return loaded

        self._window.load_model_with(
            file.name if factory is None else f"{file.name}:{factory}",
            work,
            failed=lambda error: self._on_failed(spec, arch, trust, strict, error),
        )

    def _on_failed(self, spec: str, arch: str | None, trust: bool, strict: bool, error: BaseException) -> bool:
        """Questions a file raises are asked once the failed load is done with (not inside the worker's signal)."""
        if isinstance(error, ArchitectureRequired):
            QTimer.singleShot(0, lambda: self._answer_architecture(spec, trust, error))
            return True
        if isinstance(error, TrustRequired):
            QTimer.singleShot(0, lambda: self._answer_trust(spec, arch, strict, error))
            return True
        if isinstance(error, HookscopeError):
            self._window.show_error(window_words(str(error)))
            self.refused.emit(str(error))
            return True
        return False  # a bug: the window shows it with its traceback on stderr

    def _answer_architecture(self, spec: str, trust: bool, error: ArchitectureRequired) -> None:
        answer = self.ask_architecture(error.path, error.keys)
        if answer is None:
            self._refuse(f"{Path(error.path).name} was not opened: no architecture was chosen.")
            return
        arch, non_strict = answer
        self.open(spec, arch, trust, strict=not non_strict)

    def _answer_trust(self, spec: str, arch: str | None, strict: bool, error: TrustRequired) -> None:
        if self.ask_trust(error.path, error.objects):
            self.open(spec, arch, trust=True, strict=strict)
        else:
            self._refuse(f"{split_factory(spec)[0].name} was not opened: it would run code, and it was not trusted.")

    def _refuse(self, message: str) -> None:
        self._window.show_error(message, dialog=False)
        self.refused.emit(message)

    # ---- recent models ------------------------------------------------------------------------------------
    def recent_entries(self) -> list[dict]:
        entries = []
        for text in read_list(app_settings(), RECENT_MODELS_KEY) if self._window.remembers else []:
            try:
                entry = json.loads(text)
            except ValueError:
                continue
            if isinstance(entry, dict) and (entry.get("spec") or entry.get("name")):
                entries.append(entry)
        return entries

    def _recent_files(self) -> list[dict]:
        return [entry for entry in self.recent_entries() if entry.get("spec")]

    def _on_model_ready(self) -> None:
        loaded = self._window.loaded
        if loaded is None:
            return
        entry = self._opened.pop(id(loaded), None)
        self._opened.clear()
        if entry is None and loaded.source in ("catalogue", "timm"):
            entry = {"name": loaded.name}
        if entry is None or not self._window.remembers:
            return
        text = json.dumps(entry, sort_keys=True)
        entries = [text] + [e for e in read_list(app_settings(), RECENT_MODELS_KEY) if e != text]
        app_settings().setValue(RECENT_MODELS_KEY, entries[:RECENT_LIMIT])
        self.rebuild_recent_menu()

    def rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        entries = self.recent_entries()
        for entry in entries:
            if entry.get("spec"):
                spec = str(entry["spec"])
                label = split_factory(spec)[0].name + (f":{split_factory(spec)[1]}" if split_factory(spec)[1] else "")
                if entry.get("arch"):
                    label += f" as {entry['arch']}" + ("" if entry.get("strict", True) else " (non-strict)")
                action = self.recent_menu.addAction(label)
                action.setToolTip(spec)
                action.triggered.connect(lambda *_, e=entry: self.open(e["spec"], e.get("arch"),
                                                                        strict=e.get("strict", True)))
            else:
                action = self.recent_menu.addAction(str(entry["name"]))
                action.triggered.connect(lambda *_, n=str(entry["name"]): self._window.set_model(n))
        self.recent_menu.setEnabled(bool(entries))
