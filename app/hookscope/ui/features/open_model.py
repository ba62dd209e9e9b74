"""Opening a model from a file: File > Open model…, dropped model files, File > Recent models.

What the file is decides what is asked (see ``app/hookscope/core/models/files.py``): a state_dict needs the architecture it
belongs to (``ArchitectureDialog``: a searchable chooser with a non-strict option), a pickled model or a Python
factory runs code and so needs the user's explicit trust (``trust_dialog``: the file and the Python objects it
would import, Cancel being the default), TorchScript and files that are none of these are refused with the reason.
Every question goes through one ``ask_*`` method, so tests answer it without a modal dialog.

Loading is ``hookscope.core.models.source.open_model`` on the workspace's worker (``Workspace.load_model_with``), like any
model switch: the ticks carry over where their paths exist, and a failure keeps the previous model.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMenu

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.catalogue import default_categories
from hookscope.core.models.files import MODEL_FILE_SUFFIXES, ArchitectureRequired, TrustRequired, split_factory
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.models.source import ModelSource, open_model
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.dialogs.architecture_dialog import ArchitectureFit, architectures_that_fit, ask_architecture
from hookscope.ui.dialogs.trust_dialog import ask_trust
from hookscope.ui.host import Host
from hookscope.ui.state.requests import LoadOutcome
from hookscope.ui.state.settings import app_settings, read_list
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.words import window_words

RECENT_MODELS_KEY = "recent_models"
MODEL_FOLDER_KEY = "model_folder"  # the folder of the last model file opened with the dialog
RECENT_LIMIT = 10
MODEL_FILE_FILTER = "Model files (" + " ".join(f"*{s}" for s in MODEL_FILE_SUFFIXES) + ");;All files (*)"


def is_model_file(path: str | os.PathLike) -> bool:
    """Whether a dropped file is opened as a model (rather than as an image)."""
    file, _ = split_factory(path)
    return file.suffix.lower() in MODEL_FILE_SUFFIXES


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


def output_count(loaded: LoadedModel) -> int | None:
    """How many classes the model's last layer gives: the length of its last parameter (the classifier's bias, or
    its weight's rows), None for a model without parameters."""
    parameters = list(loaded.module.parameters())
    last = parameters[-1] if parameters else None
    return int(last.shape[0]) if last is not None and last.ndim >= 1 else None


def keep_class_names(loaded: LoadedModel) -> None:
    """A state_dict for a catalogue architecture keeps the architecture's class names when its last layer still
    gives as many classes (weights fine-tuned on ImageNet, a checkpoint of the same model); a new head of another
    size keeps "class N". The engine leaves them out, as a file's classes are not known in general."""
    if loaded.categories or loaded.source != "state_dict":
        return
    names = default_categories(loaded.name) if not loaded.name.startswith("timm/") else None
    if names and output_count(loaded) == len(names):
        loaded.categories = list(names)


def recent_label(entry: dict) -> str:
    """A recent-models entry as the menu shows it: ``cats.pth as resnet18``, ``model.py:build``, ``resnet50``."""
    if not entry.get("spec"):
        return str(entry.get("name", ""))
    file, factory = split_factory(str(entry["spec"]))
    label = file.name + (f":{factory}" if factory else "")
    if entry.get("arch"):
        label += f" as {entry['arch']}" + ("" if entry.get("strict", True) else " (non-strict)")
    return label


class ModelFilesFeature(QObject):
    """Opening model files (asking what a file needs) and the recent models."""

    id = "model_files"
    refused = Signal(str)  # a file was not opened: the reason (not trusted, no architecture chosen, an error)

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__()
        self.workspace = workspace
        self.host = host
        self.last_folder: str | None = None  # the dialog's folder in this session (also kept when host.remembers)
        self._opened: dict[int, dict] = {}  # id(LoadedModel) -> its recent-models entry, until it is on screen
        host.add_actions([
            ActionSpec("file.open_model", "Open model…", "File", self.open_dialog, group=30, order=10,
                       shortcut="Ctrl+Shift+O",
                       tooltip="Open a state_dict, a pickled model or a model.py file that builds the model"),
            ActionSpec("file.recent_models", "Recent models", "File", group=30, order=20,
                       populate=self.fill_recent_menu, tooltip="Models and model files opened before"),
        ])  # fmt: skip
        host.add_drop_handler(self.open_dropped)
        workspace.model_changed.connect(self._on_model_changed)

    # ---- questions (tests replace these) ------------------------------------------------------------------
    def ask_model_file(self) -> str | None:
        path, _ = QFileDialog.getOpenFileName(
            self.host.dialog_parent(), "Open model", self.start_folder(), MODEL_FILE_FILTER
        )
        return path or None

    def ask_architecture(self, path: str, keys: int, fits: list[ArchitectureFit]) -> tuple[str, bool] | None:
        """(architecture, non-strict) for a state_dict, or None when the user cancels; ``fits``: the architectures
        all of whose keys and shapes fit the file, selected first."""
        return ask_architecture(path, keys, self.host.dialog_parent(), fits)

    def ask_trust(self, path: str, objects: tuple[str, ...]) -> bool:
        """Whether the user trusts ``path`` enough to run code from it (Cancel is the default answer)."""
        return ask_trust(path, objects, self.host.dialog_parent())

    def ask_factory(self, file: Path, names: list[str]) -> str | None:
        """The function in a Python file that builds the model."""
        name, ok = QInputDialog.getItem(
            self.host.dialog_parent(),
            "Open Python model",
            f"The function in {file.name} that returns the model:",
            names or ["build"],
            0,
            True,
        )
        return name.strip() if ok and name.strip() else None

    # ---- opening ------------------------------------------------------------------------------------------
    def start_folder(self) -> str:
        """Where the Open model dialog starts: the last folder used, else the user's home."""
        folder = self.last_folder
        if folder is None and self.host.remembers:
            folder = str(app_settings().value(MODEL_FOLDER_KEY, "") or "")
        return folder if folder and os.path.isdir(folder) else os.path.expanduser("~")

    def open_dialog(self) -> None:
        path = self.ask_model_file()
        if not path:
            return
        self.last_folder = os.path.dirname(os.path.abspath(path))
        if self.host.remembers:
            app_settings().setValue(MODEL_FOLDER_KEY, self.last_folder)
        self.open(path)

    def open_dropped(self, paths: list[str]) -> list[str]:
        """The drop handler: opens the first model file; returns the paths that are not model files."""
        models = [p for p in paths if is_model_file(p)]
        if models:
            self.open(models[0])
            if len(models) > 1:
                self.host.show_status(
                    f"Opened {os.path.basename(models[0])}; drop one model file at a time "
                    f"({len(models) - 1} more left out).",
                    8000,
                )
        return [p for p in paths if p not in models]

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
        source = ModelSource(file=spec, arch=arch, trust=trust, non_strict=not strict)
        entry = {"spec": spec, "arch": arch, "strict": strict}
        opened = self._opened

        def work() -> LoadedModel:  # on the worker thread
            try:
                loaded = open_model(source, hash_file=True)
            except ArchitectureRequired as error:
                # Which architectures fit, found here rather than in the question: it builds a few (on the meta
                # device) and reads the file again.
                try:
                    error.fits = architectures_that_fit(error.path or spec)  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001  (only a hint: the question is asked without it, never lost)
                    error.fits = []  # type: ignore[attr-defined]
                raise
            keep_class_names(loaded)
            opened[id(loaded)] = entry
            return loaded

        self.workspace.load_model_with(source.label, work, failed=lambda error: self._on_failed(source, error))

    def _on_failed(self, source: ModelSource, error: BaseException) -> bool:
        """Questions a file raises are asked once the failed load is done with (not inside the worker's signal)."""
        if isinstance(error, ArchitectureRequired):
            QTimer.singleShot(0, lambda: self._answer_architecture(source, error))
            return True
        if isinstance(error, TrustRequired):
            QTimer.singleShot(0, lambda: self._answer_trust(source, error))
            return True
        if isinstance(error, HookscopeError):
            message = window_words(error)
            self.host.show_error(message)
            self.refused.emit(message)
            return True
        return False  # a bug: the workspace shows it with its traceback on stderr

    def _answer_architecture(self, source: ModelSource, error: ArchitectureRequired) -> None:
        spec = _spec(source)
        path = error.path or spec
        answer = self.ask_architecture(path, error.keys, list(getattr(error, "fits", [])))
        if answer is None:
            self._refuse(f"{Path(path).name} was not opened: no architecture was chosen.")
            return
        arch, non_strict = answer
        self.open(spec, arch, source.trust, strict=not non_strict)

    def _answer_trust(self, source: ModelSource, error: TrustRequired) -> None:
        spec = _spec(source)
        if self.ask_trust(error.path or spec, error.objects):
            self.open(spec, source.arch, trust=True, strict=source.strict)
        else:
            self._refuse(f"{split_factory(spec)[0].name} was not opened: it would run code, and it was not trusted.")

    def _refuse(self, message: str) -> None:
        self.host.show_error(message, dialog=False)
        self.refused.emit(message)

    # ---- recent models ------------------------------------------------------------------------------------
    def recent_entries(self) -> list[dict]:
        """The recent models, newest first: ``{"spec", "arch", "strict"}`` for files, ``{"name"}`` for the
        catalogue (nothing when the host does not remember)."""
        entries = []
        for text in read_list(app_settings(), RECENT_MODELS_KEY) if self.host.remembers else []:
            try:
                entry = json.loads(text)
            except ValueError:
                continue
            if isinstance(entry, dict) and (entry.get("spec") or entry.get("name")):
                entries.append(entry)
        return entries

    def open_recent(self, entry: dict) -> None:
        if entry.get("spec"):
            self.open(entry["spec"], entry.get("arch"), strict=entry.get("strict", True))
        else:
            self.workspace.set_model(str(entry["name"]))

    def fill_recent_menu(self, menu: QMenu) -> None:
        """The Recent models submenu, filled each time it opens."""
        entries = self.recent_entries()
        for entry in entries:
            action = menu.addAction(recent_label(entry))
            if entry.get("spec"):
                action.setToolTip(str(entry["spec"]))
            action.triggered.connect(lambda *_, e=entry: self.open_recent(e))
        if not entries:
            menu.addAction("No recent models").setEnabled(False)

    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        loaded = outcome.loaded
        entry = self._opened.pop(id(loaded), None)
        self._opened.clear()
        if entry is None and loaded.source in ("catalogue", "timm", "hub"):
            entry = {"name": loaded.name}
        if entry is None or not self.host.remembers:
            return
        text = json.dumps(entry, sort_keys=True)
        entries = [text] + [e for e in read_list(app_settings(), RECENT_MODELS_KEY) if e != text]
        app_settings().setValue(RECENT_MODELS_KEY, entries[:RECENT_LIMIT])


def _spec(source: ModelSource) -> str:
    """The file (or ``model.py:build``) a model file's source opens: ``open`` always gives one."""
    assert source.file is not None
    return source.file
