"""File > Save session / Open session, and File > Export run… (``app/core/session.py`` and ``export.py`` do it).

Saving captures what the window shows: the model (catalogue name, or model file and the SHA-256 taken when it
was opened), weights, device, preprocessing, ticked (module, hook kind) pairs from the registry, edits, image(s),
gradient target, and the colormap and scaling of every panel. Opening loads the model on the window's worker
(a pickled or Python model file asks for trust again: a session never carries it), then restores ticks, edits,
device, target, panel settings and image, and runs. A moved or changed file is one line in one dialog and in the
status bar; the rest is restored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox
from superqt.utils import FunctionWorker, create_worker

from app.core.devices import available_devices
from app.core.errors import HookscopeError
from app.core.export import write_run
from app.core.model_files import TrustRequired
from app.core.pictures import KIND_ORDER, PanelSettings
from app.core.session import (
    KNOWN_KINDS,
    SESSION_SUFFIX,
    Session,
    apply_session_edits,
    edit_specs,
    file_sha256,
    load_session,
    load_session_model,
    save_session,
    session_from,
)
from app.ui.features.open_model import window_words
from app.ui.state.settings import app_settings

if TYPE_CHECKING:
    from app.core.models import LoadedModel
    from app.ui.main_window import MainWindow

SESSION_FOLDER_KEY = "session_folder"
SESSION_FILTER = f"Hookscope session (*{SESSION_SUFFIX} *.json);;All files (*)"


def is_session_file(path: str | os.PathLike) -> bool:
    return os.fspath(path).lower().endswith(".json")


def image_b_part(window: object) -> Any:
    """The window's part that holds image B (``image_b`` and ``set_image_b``), when the window has one."""
    if callable(getattr(window, "set_image_b", None)) and hasattr(window, "image_b"):
        return window
    for value in vars(window).values():
        if callable(getattr(value, "set_image_b", None)) and hasattr(value, "image_b"):
            return value
    return None


def image_b_path(window: object) -> str | None:
    part = image_b_part(window)
    image = getattr(part, "image_b", None) if part is not None else None
    path = getattr(image, "path", image)
    return path if isinstance(path, str) and path else None


class Sessions(QObject):
    """Saving and restoring sessions, and the whole-run export, for one window."""

    restored = Signal(list)  # the problem lines of a session just restored (empty when everything was found)
    exported = Signal(str)  # the folder a whole-run export finished writing
    export_failed = Signal(str)

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window
        self._pending: dict[str, Any] | None = None  # a session waiting for its model to load
        self._export_worker: FunctionWorker | None = None
        self.last_problems: list[str] = []
        self._problem_box: QMessageBox | None = None
        window.model_ready.connect(self._on_model_ready)

    # ---- questions (tests replace these) ------------------------------------------------------------------
    def _folder(self) -> str:
        folder = app_settings().value(SESSION_FOLDER_KEY, "")
        return str(folder) if folder and os.path.isdir(str(folder)) else os.path.expanduser("~")

    def ask_save_path(self) -> str | None:
        loaded = self._window.loaded
        name = (loaded.name.replace(":", "_").replace("/", "_") if loaded else "session") + SESSION_SUFFIX
        path, _ = QFileDialog.getSaveFileName(self._window, "Save session", os.path.join(self._folder(), name),
                                              SESSION_FILTER)
        return path or None

    def ask_open_path(self) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self._window, "Open session", self._folder(), SESSION_FILTER)
        return path or None

    def ask_export_folder(self) -> str | None:
        folder = QFileDialog.getExistingDirectory(self._window, "Export run into folder", self._folder())
        return folder or None

    # ---- saving -------------------------------------------------------------------------------------------
    def current_session(self) -> Session:
        """What the window shows now, as a Session (raises HookscopeError when no model is loaded)."""
        window = self._window
        loaded, registry = window.loaded, window.registry
        if loaded is None or registry is None:
            raise HookscopeError("No model is loaded yet: there is no session to save.")
        order = window.tree_model.order_of
        hooks = sorted(window.ticked_pairs(), key=lambda pair: (order(pair[0]), KIND_ORDER.get(pair[1], 9)))
        images = []
        outcome = window.last_outcome
        shown = outcome.image.path if outcome is not None else None
        if shown:
            images.append(shown)
            second = image_b_path(window)
            if second:
                images.append(second)
        default, pairs = window.panel_settings()
        ui = {
            "sort": default.sort,
            "panels": [[path, kind, s.colormap, s.scaling, s.sort] for (path, kind), s in sorted(pairs.items())],
            "image_list": list(window.image_queue.paths),
        }
        sha256 = getattr(window, "model_files", None)
        sha256 = sha256.file_hashes.get(loaded.model_file) if sha256 is not None and loaded.model_file else None
        return session_from(
            loaded, hooks, images, device=window.device, target=window.target, edits=edit_specs(registry),
            colormap=default.colormap, scaling=default.scaling, ui=ui, model_sha256=sha256,
        )  # fmt: skip

    def save(self, path: str | os.PathLike) -> bool:
        try:
            session = self.current_session()
            save_session(session, path)
        except HookscopeError as error:
            self._window.show_error(str(error))
            return False
        app_settings().setValue(SESSION_FOLDER_KEY, os.path.dirname(os.path.abspath(path)))
        note = "" if session.images else " (the image on screen has no file, so the session holds none)"
        self._window.statusBar().showMessage(f"Session saved to {path}{note}.", 8000)
        return True

    def save_dialog(self) -> None:
        path = self.ask_save_path()
        if path:
            if not path.lower().endswith(".json"):
                path += SESSION_SUFFIX
            self.save(path)

    # ---- opening ------------------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        path = self.ask_open_path()
        if path:
            self.open(path)

    def open(self, path: str | os.PathLike, trust: bool = False) -> None:
        """Restore the session in ``path``: the model loads in the background, the rest follows it."""
        window = self._window
        try:
            session, problems = load_session(path)
        except HookscopeError as error:
            window.show_error(str(error))
            return
        app_settings().setValue(SESSION_FOLDER_KEY, os.path.dirname(os.path.abspath(path)))
        if session.blocking_problem():
            # Without its model file the session's model cannot load: the rest goes onto the model on screen.
            self._apply_rest(session, problems + ["The model on screen was kept."])
            return
        self._load(session, problems, trust)

    def _load(self, session: Session, problems: list[str], trust: bool) -> None:
        pending: dict[str, Any] = {"session": session, "problems": problems}
        hashes = getattr(getattr(self._window, "model_files", None), "file_hashes", None)

        def work() -> LoadedModel:  # on the worker thread
            loaded = load_session_model(session, trust=trust)
            if loaded.model_file and hashes is not None and session.model.get("path"):
                hashes[loaded.model_file] = file_sha256(session.model["path"])
            pending["loaded"] = loaded
            return loaded

        self._pending = pending
        name = session.model.get("name", "model")
        self._window.load_model_with(f"the session's {name}", work,
                                     failed=lambda error: self._on_load_failed(pending, error))

    def _on_load_failed(self, pending: dict[str, Any], error: BaseException) -> bool:
        if pending is not self._pending:
            return False
        self._pending = None
        session, problems = pending["session"], pending["problems"]
        if isinstance(error, TrustRequired):
            QTimer.singleShot(0, lambda: self._answer_trust(session, problems, error))
            return True
        if isinstance(error, HookscopeError):
            line = f"The session's model could not be loaded: {window_words(str(error))}"
            QTimer.singleShot(0, lambda: self._apply_rest(session, problems + [line, "The model on screen was kept."]))
            return True
        return False

    def _answer_trust(self, session: Session, problems: list[str], error: TrustRequired) -> None:
        files = getattr(self._window, "model_files", None)
        if files is not None and files.ask_trust(error.path, error.objects):
            self._load(session, problems, trust=True)
            return
        line = f"The session's model file {Path(error.path).name} would run code and was not trusted, so it was not opened."
        self._apply_rest(session, problems + [line, "The model on screen was kept."])

    def _on_model_ready(self) -> None:
        pending, loaded = self._pending, self._window.loaded
        if pending is None or loaded is None:
            return
        self._pending = None
        if pending.get("loaded") is loaded:
            self._apply_rest(pending["session"], pending["problems"])

    def _apply_rest(self, session: Session, problems: list[str]) -> None:
        """Everything but the model: ticks, edits, device, target, panel settings, image; then one run."""
        window = self._window
        problems = list(problems)
        registry = window.registry
        if registry is None:
            self._report(problems + ["No model is loaded, so nothing else could be restored."])
            return
        window.untick_all()
        had_edits = bool(registry.edits())
        for edit_id, _edit, _info in list(registry.edits()):
            registry.remove_edit(edit_id)
        known = set(registry.paths)
        for path, kind in session.hooks:
            if path not in known:
                problems.append(f"The model has no module '{path}'; its {kind} hook was not restored.")
            elif not window.tick(path, kind, True):
                if kind == "tensor" and window.tick(path, "backward", True):
                    problems.append(f"'{path}': the window shows tensor-hook gradients as Gradients; ticked those.")
                else:
                    problems.append(f"The {kind} hook on '{path}' could not be ticked in the window.")
        edit_lines, _others = apply_session_edits(registry, session, window.loaded.preprocess)
        problems += edit_lines
        registry_changed = getattr(window, "registry_changed", None)  # the hook inspector and edit list follow
        if (session.edits or had_edits) and callable(registry_changed):
            registry_changed()
        if session.device != window.device:
            if session.device in available_devices():
                window.set_device(session.device)
            else:
                problems.append(f"Device '{session.device}' is not available here; running on {window.device}.")
        sort = str(session.ui.get("sort", "none"))
        pairs: dict[tuple[str, str], PanelSettings] = {}
        try:
            default = PanelSettings(session.colormap, session.scaling, sort)
            for entry in session.ui.get("panels", []):
                path, kind, colormap, scaling, order = (str(v) for v in entry)
                pairs[(path, kind)] = PanelSettings(colormap, scaling, order)
        except (TypeError, ValueError):
            default = PanelSettings(session.colormap, session.scaling)
            problems.append("Some panel settings in the session were not valid; the session's colormap is used.")
        window.apply_panel_settings(default, pairs)
        window.set_target(session.target)
        first = session.images[0] if session.images else None
        if first is not None and first not in session.missing:
            listed = [str(p) for p in session.ui.get("image_list", []) if os.path.isfile(str(p))]
            window.open_paths(listed if first in listed and listed.index(first) == 0 else [first])
        compare = image_b_part(window)
        second = session.images[1] if len(session.images) > 1 and session.images[1] not in session.missing else None
        if compare is not None and (second is not None or image_b_path(window) is not None):
            compare.set_image_b(second)
        elif second is not None:
            problems.append("The session's second image (image B) is not shown: this window has no image B.")
        window.run_again()
        self._report(problems)

    def _report(self, problems: list[str]) -> None:
        self.last_problems = problems
        window = self._window
        if problems:
            count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
            window.show_error(f"Session restored with {count}: {problems[0]}", dialog=False)
            if window.show_dialogs:
                if self._problem_box is None:
                    self._problem_box = QMessageBox(QMessageBox.Icon.Warning, "Session restored, with problems", "",
                                                    parent=window)
                self._problem_box.setText("The session was restored, except for:")
                self._problem_box.setInformativeText("\n\n".join(f"• {line}" for line in problems))
                self._problem_box.open()
        else:
            window.statusBar().showMessage("Session restored.", 6000)
        self.restored.emit(problems)

    # ---- whole-run export ---------------------------------------------------------------------------------
    def export_run_dialog(self) -> None:
        if self._window.last_outcome is None:
            self._window.show_error("Nothing to export yet: no run has finished.")
            return
        folder = self.ask_export_folder()
        if folder:
            self.export_run(folder)

    def export_run(self, folder: str | os.PathLike) -> bool:
        """Write the run on screen into ``folder`` in the layout of ``hookscope export`` (in the background)."""
        window = self._window
        outcome, loaded = window.last_outcome, window.loaded
        if outcome is None or loaded is None:
            window.show_error("Nothing to export yet: no run has finished.")
            return False
        if self._export_worker is not None:
            window.show_error("An export is still being written; try again when it is done.", dialog=False)
            return False
        ticked = {kind for _, kind in window.ticked_pairs()}
        kinds = tuple(kind for kind in KNOWN_KINDS if kind in ticked)
        default, _pairs = window.panel_settings()
        image = outcome.image.path or outcome.image.name
        worker = create_worker(write_run, outcome.result, loaded, Path(folder), image=image, kinds=kinds, png=True,
                               colormap=default.colormap, scaling=default.scaling,
                               _start_thread=False, _ignore_errors=True)
        worker.returned.connect(lambda *_: self._on_exported(str(folder)))
        worker.errored.connect(self._on_export_failed)
        self._export_worker = worker
        QThreadPool.globalInstance().start(worker)
        window.statusBar().showMessage(f"Exporting the run to {folder}…")
        return True

    def _on_exported(self, folder: str) -> None:
        self._export_worker = None
        self._window.statusBar().showMessage(f"Run exported to {folder}.", 8000)
        self.exported.emit(folder)

    def _on_export_failed(self, error: BaseException) -> None:
        self._export_worker = None
        reason = getattr(error, "strerror", None) or str(error)
        message = f"The run could not be exported: {reason}."
        self._window.show_error(message)
        self.export_failed.emit(message)
