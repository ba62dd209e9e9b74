"""Sessions and the whole-run export (``SessionFilesFeature``, id "sessions"): File > Open session…, Save
session…, Export run…, and session files dropped on the window.

Saving captures what the workspace holds: the model (catalogue name, or model file and the SHA-256 taken when it
was opened), weights, device, preprocessing, ticked (module, hook kind) pairs, edits, image A (and B), the image
list, the gradient target, and every panel's colormap, scaling, channel order and A / B / A − B view
(``app/hookscope/core/outputs/session.py`` writes and reads the file). Opening loads the session's model through the workspace's
one worker path (a pickled or Python model file asks for trust again: a session never carries it), then restores
ticks, edits, device, target, panel settings and images through workspace methods, and runs once. A moved or
changed file is one line in one dialog and in the status bar; the rest is restored.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.vocabulary import SHOWN_AS
from hookscope.core.engine.devices import available_devices
from hookscope.core.engine.tree import ModelSurvey
from hookscope.core.models.files import TrustRequired
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.outputs.export import write_run
from hookscope.core.outputs.session import (
    KNOWN_KINDS,
    SESSION_SUFFIX,
    Session,
    apply_session_edits,
    edit_specs,
    load_session,
    panels_ui,
    save_session,
    session_from,
    session_panel_settings,
    session_survey,
)
from hookscope.core.pictures.panels import KIND_ORDER
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.dialogs.session_problems import show_session_problems
from hookscope.ui.dialogs.trust_dialog import ask_trust
from hookscope.ui.host import Host
from hookscope.ui.state.requests import ImageSource, LoadOutcome
from hookscope.ui.state.settings import app_settings
from hookscope.ui.state.tasks import Task
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.words import window_words

SESSION_FOLDER_KEY = "session_folder"
SESSION_FILTER = f"Hookscope session (*{SESSION_SUFFIX} *.json);;All files (*)"
# The tree's In, Act, Grad and Grad in columns tick "pre", "forward", "tensor" and "grad_input". The Grad column was
# a full backward hook ("backward") until it became a tensor hook on the output ("tensor"). Both record the gradient
# of the module's output (they differ only under a scale-grad edit on the same module, which the tensor hook sees),
# so a session saved with a "backward" tick, by an older window or by `hookscope export --hooks grad_out`, opens with
# the Grad column ticked and that panel's settings carried over, without a problem line (the vocabulary's SHOWN_AS).
WINDOW_KIND_OF = SHOWN_AS
KEPT_MODEL = "The model on screen was kept."


def window_panels(panels: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """A session's panel settings keyed by the window's kinds: a "backward" panel's settings go to the Grad column's
    "tensor" panel (``WINDOW_KIND_OF``), unless the session has settings of its own for that one."""
    moved = {(path, WINDOW_KIND_OF[kind]): s for (path, kind), s in panels.items() if kind in WINDOW_KIND_OF}
    kept = {pair: s for pair, s in panels.items() if pair[1] not in WINDOW_KIND_OF}
    return {**moved, **kept}


def is_session_file(path: str | os.PathLike) -> bool:
    return os.fspath(path).lower().endswith(".json")


class SessionFilesFeature(QObject):
    """Saving and restoring sessions, and the whole-run export, for one workspace."""

    id = "sessions"
    restored = Signal(list)  # the problem lines of a session just restored (empty when everything was found)
    exported = Signal(str)  # the folder a whole-run export finished writing
    export_failed = Signal(str)

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__(workspace)
        self.workspace = workspace
        self.host = host
        self.last_problems: list[str] = []
        self._pending: dict[str, Any] | None = None  # a session waiting for its model to load
        self._export: Task | None = None  # a whole-run export being written
        self._problem_box: QMessageBox | None = None
        host.add_actions(
            [
                ActionSpec(
                    "file.open_session",
                    "Open session…",
                    "File",
                    self.open_dialog,
                    group=40,
                    order=10,
                    tooltip="Restore a saved session: model, ticks, edits, images and panel settings",
                ),
                ActionSpec(
                    "file.save_session",
                    "Save session…",
                    "File",
                    self.save_dialog,
                    group=40,
                    order=20,
                    shortcut="Ctrl+S",
                    tooltip="Save what is on screen as a session file (JSON)",
                ),
                ActionSpec(
                    "file.export_run",
                    "Export run…",
                    "File",
                    self.export_run_dialog,
                    group=40,
                    order=30,
                    shortcut="Ctrl+E",
                    tooltip="Write the run on screen into a folder, as `hookscope export` does (arrays, PNGs)",
                ),
            ]
        )
        host.add_drop_handler(self.open_dropped)
        workspace.model_changed.connect(self._on_model_changed)

    # ---- questions (tests replace these) --------------------------------------------------------------------
    def _folder(self) -> str:
        folder = app_settings().value(SESSION_FOLDER_KEY, "") if self.host.remembers else ""
        return str(folder) if folder and os.path.isdir(str(folder)) else os.path.expanduser("~")

    def _remember_folder(self, path: str | os.PathLike) -> None:
        if self.host.remembers:
            app_settings().setValue(SESSION_FOLDER_KEY, os.path.dirname(os.path.abspath(path)))

    def ask_save_path(self) -> str | None:
        loaded = self.workspace.loaded
        name = (loaded.name.replace(":", "_").replace("/", "_") if loaded else "session") + SESSION_SUFFIX
        path, _ = QFileDialog.getSaveFileName(
            self.host.dialog_parent(), "Save session", os.path.join(self._folder(), name), SESSION_FILTER
        )
        return path or None

    def ask_open_path(self) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self.host.dialog_parent(), "Open session", self._folder(), SESSION_FILTER)
        return path or None

    def ask_export_folder(self) -> str | None:
        folder = QFileDialog.getExistingDirectory(self.host.dialog_parent(), "Export run into folder", self._folder())
        return folder or None

    def ask_trust(self, path: str, objects: tuple[str, ...]) -> bool:
        """Whether the user trusts the session's model file enough to run code from it."""
        return ask_trust(path, objects, self.host.dialog_parent())

    # ---- saving ---------------------------------------------------------------------------------------------
    def current_session(self) -> Session:
        """What the workspace holds now, as a Session (raises HookscopeError when no model is loaded)."""
        space = self.workspace
        loaded, registry = space.loaded, space.registry
        if loaded is None or registry is None:
            raise HookscopeError("No model is loaded yet: there is no session to save.")
        order = {node.path: n for n, node in enumerate(space.nodes)}
        hooks = sorted(
            space.ticked_pairs(), key=lambda pair: (order.get(pair[0], len(order)), KIND_ORDER.get(pair[1], 9), pair)
        )
        images = []
        shown = space.image.path if space.image is not None else None
        if shown:
            images.append(shown)
            if space.image_b is not None and space.image_b.path:
                images.append(space.image_b.path)
        ui = {**panels_ui(space.default_settings, space.settings), "image_list": list(space.image_list)}
        default = space.default_settings
        return session_from(
            loaded, hooks, images, device=space.device, target=space.target, edits=edit_specs(registry),
            colormap=default.colormap, scaling=default.scaling, ui=ui,
        )  # fmt: skip

    def save(self, path: str | os.PathLike) -> bool:
        try:
            session = self.current_session()
            for key, (save_part, _restore) in self.workspace.session_parts.items():  # e.g. the scan, beside it
                value = save_part(os.fspath(path))
                if value is not None:
                    session.parts[key] = value
            save_session(session, path)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return False
        self._remember_folder(path)
        note = "" if session.images else " (the image on screen has no file, so the session holds none)"
        self.host.show_status(f"Session saved to {path}{note}.", 8000)
        return True

    def save_dialog(self) -> None:
        path = self.ask_save_path()
        if path:
            if not path.lower().endswith(".json"):
                path += SESSION_SUFFIX
            self.save(path)

    # ---- opening --------------------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        path = self.ask_open_path()
        if path:
            self.open(path)

    def open_dropped(self, paths: list[str]) -> list[str]:
        """Drop handler: the first session file opens; the paths that are not sessions are left for others."""
        sessions = [path for path in paths if is_session_file(path)]
        if not sessions:
            return paths
        self.open(sessions[0])
        if len(sessions) > 1:
            self.host.show_status(
                f"Opened {os.path.basename(sessions[0])}; drop one session file at a time "
                f"({len(sessions) - 1} more left out).",
                8000,
            )
        return [path for path in paths if not is_session_file(path)]

    def open(self, path: str | os.PathLike, trust: bool = False) -> None:
        """Restore the session in ``path``: the model loads in the background, the rest follows it."""
        try:
            session, problems = load_session(path)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return
        self._remember_folder(path)
        if session.blocking_problem():
            # Without its model file the session's model cannot load: the rest goes onto the model on screen.
            self._apply_rest(session, problems + [KEPT_MODEL])
            return
        self._load(session, problems, trust)

    def _load(self, session: Session, problems: list[str], trust: bool) -> None:
        pending: dict[str, Any] = {"session": session, "problems": problems}
        source = ModelSource.from_session(session, trust=trust)

        def work() -> LoadedModel:  # on the worker thread
            loaded = open_model(source, hash_file=True)  # the hash a later save records
            # The model runs once on a blank input here, off the GUI thread, so that an edit whose channel does not
            # exist is a problem line when the edits are restored, not a failed first run.
            pending["survey"] = session_survey(loaded.module, session, loaded.preprocess)
            pending["loaded"] = loaded
            return loaded

        self._pending = pending
        self.workspace.load_model_with(
            f"the session's {session.model.get('name', 'model')}",
            work,
            failed=lambda error: self._on_load_failed(pending, error),
        )

    def _on_load_failed(self, pending: dict[str, Any], error: BaseException) -> bool:
        if pending is not self._pending:
            return False
        self._pending = None
        session, problems = pending["session"], pending["problems"]
        if isinstance(error, TrustRequired):
            QTimer.singleShot(0, lambda: self._answer_trust(session, problems, error))
            return True
        if isinstance(error, HookscopeError):
            line = f"The session's model could not be loaded: {window_words(error)}"
            QTimer.singleShot(0, lambda: self._apply_rest(session, problems + [line, KEPT_MODEL]))
            return True
        return False  # a bug: the workspace shows it, with its traceback on stderr

    def _answer_trust(self, session: Session, problems: list[str], error: TrustRequired) -> None:
        if self.ask_trust(error.path or "", error.objects):  # a TrustRequired names its file
            self._load(session, problems, trust=True)
            return
        line = (
            f"The session's model file {Path(str(error.path)).name} would run code and was not trusted, "
            "so it was not opened."
        )
        self._apply_rest(session, problems + [line, KEPT_MODEL])

    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and pending.get("loaded") is outcome.loaded:
            # After the workspace has carried the old ticks over (it does so right after this signal).
            QTimer.singleShot(
                0, lambda: self._apply_rest(pending["session"], pending["problems"], pending.get("survey"))
            )

    def _apply_rest(self, session: Session, problems: list[str], survey: ModelSurvey | None = None) -> None:
        """Everything but the model: panel settings, ticks, edits, device, target, images; then one run.

        ``survey``: the session's model surveyed in the loading worker (``session_survey``); with it (or the survey
        of the model on screen) an edit the model cannot take is a problem line, and the rest is restored.
        """
        space = self.workspace
        problems = list(problems)
        registry = space.registry
        if registry is None or space.loaded is None:
            self._report(problems + ["No model is loaded, so nothing else could be restored."])
            return
        default, panels, lines = session_panel_settings(session)
        problems += lines
        panels = window_panels(panels)
        space.apply_panel_settings(default, panels)  # first: panels made for the ticks below are drawn so

        known = set(registry.paths)
        wanted: list[tuple[str, str]] = []
        for path, kind in session.hooks:
            if path not in known:
                problems.append(f"The model has no module '{path}'; its {kind} hook was not restored.")
                continue
            kind = WINDOW_KIND_OF.get(kind, kind)
            if (path, kind) not in wanted:  # a session with both a backward and a tensor tick: one Grad tick
                wanted.append((path, kind))
        space.set_ticked(sorted(space.ticked_pairs() - set(wanted)), False)
        space.set_ticked(wanted, True)

        space.remove_all_edits(rerun=False)
        if survey is not None and registry.survey is None:
            registry.adopt_survey(survey)
        if session.edits:
            preprocess = space.loaded.preprocess
            space.restore_edits(lambda registry: problems.extend(apply_session_edits(registry, session, preprocess)[0]))
        if session.device != space.device:
            if session.device in available_devices():
                space.set_device(session.device)
            else:
                problems.append(f"Device '{session.device}' is not available here; running on {space.device}.")
        space.set_target(session.target)

        usable = session.found_images()  # not moved, and images (an unreadable one is a problem line already)
        first = session.images[0] if session.images else None
        if first is not None and first in usable:
            listed = [str(p) for p in session.ui.get("image_list", []) if os.path.isfile(str(p))]
            if first in listed:
                space.open_paths(listed)
                space.select_image(listed.index(first))
            else:
                space.open_paths([first])
        second = session.images[1] if len(session.images) > 1 and session.images[1] in usable else None
        space.set_image_b(ImageSource.from_path(second) if second is not None else None)
        for key, value in session.parts.items():  # what features saved with it (the scan); a part no feature
            part = space.session_parts.get(key)  # of this window knows is left alone
            if part is not None:
                problems += part[1](value, session.folder)
        space.run_again()
        self._report(problems)

    def _report(self, problems: list[str]) -> None:
        self.last_problems = problems
        if problems:
            count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
            self.host.show_error(f"Session restored with {count}: {problems[0]}", dialog=False)
            if self.host.show_dialogs:
                self._problem_box = show_session_problems(self._problem_box, problems, self.host.dialog_parent())
        else:
            self.host.show_status("Session restored.", 6000)
        self.restored.emit(problems)

    # ---- whole-run export -----------------------------------------------------------------------------------
    def export_run_dialog(self) -> None:
        if self.workspace.last is None:
            self.host.show_error("Nothing to export yet: no run has finished.")
            return
        folder = self.ask_export_folder()
        if folder:
            self.export_run(folder)

    def export_run(self, folder: str | os.PathLike) -> bool:
        """Write the run on screen into ``folder`` in the layout of ``hookscope export`` (in the background)."""
        space = self.workspace
        outcome, loaded = space.last, space.loaded
        if outcome is None or loaded is None:
            self.host.show_error("Nothing to export yet: no run has finished.")
            return False
        if self._export is not None:
            self.host.show_error("An export is still being written; try again when it is done.", dialog=False)
            return False
        ticked = {kind for _, kind in space.ticked_pairs()}
        kinds = tuple(kind for kind in KNOWN_KINDS if kind in ticked)
        default = space.default_settings
        image = outcome.image.path or outcome.image.name
        # the edits on, as the predictions' changes show them (the run compared itself with one without them)
        edits = [edit.spec for edit in space.registry.enabled_edits()] if space.registry is not None else []
        work = partial(
            write_run,
            outcome.result,
            loaded,
            Path(folder),
            image=image,
            kinds=kinds,
            png=True,
            colormap=default.colormap,
            scaling=default.scaling,
            edits=edits,
        )
        # Beside the runs: it reads a finished run's result, which no run changes.
        self._export = space.submit(f"export run to {folder}", work)
        self._export.finished.connect(lambda *_: self._on_exported(str(folder)))
        self._export.failed.connect(self._on_export_failed)
        self.host.show_status(f"Exporting the run to {folder}…", 0)
        return True

    def _on_exported(self, folder: str) -> None:
        self._export = None
        self.host.show_status(f"Run exported to {folder}.", 8000)
        self.exported.emit(folder)

    def _on_export_failed(self, error: object) -> None:
        self._export = None
        reason = getattr(error, "strerror", None) or str(error)
        message = f"The run could not be exported: {reason}."
        self.host.show_error(message)
        self.export_failed.emit(message)
