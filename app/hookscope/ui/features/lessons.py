"""The Lessons feature (Help > Learn the hooks): PyTorch's four hooks taught on the model in the window.

A dock lists the lessons of ``hookscope.core.teaching.lessons``; selecting one shows what its hook receives, what returning a
value does and its pitfall. **Set up and run** registers the lesson on the live model: where the lesson is one of
Hookscope's own ticks or edits, through the workspace (``set_ticked``, ``add_edit``), so that the hook inspector
lists them and the panels show them; then the lesson runs in the background and the numbers before and after come
back side by side, with the plain PyTorch that does the same (copyable). Leaving the lesson (selecting another,
closing the dock, switching models) removes every tick and edit it added (``remove_edit``, an untick); the hooks the
lesson's run registers by itself come off at the end of that run.

The lesson's run is an exclusive task (``Workspace.submit``): it shares the model and its hook registry with the
window's runs, so it never runs at the same time as one (it waits for the run in flight, and a run asked for
meanwhile waits for it), and the window's own edits are suspended for its duration, so that its numbers are the
lesson's alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial

import torch
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.resources import resource
from hookscope.core.engine.hooks import HookInfo, HookRegistry
from hookscope.core.models.images import Preprocess, read_image
from hookscope.core.pictures.panels import KIND_LABELS
from hookscope.core.teaching.lessons import LESSONS, lesson
from hookscope.core.teaching.lessons.base import AppSetup, Lesson, LessonResult
from hookscope.core.teaching.lessons.networks import model_code_for
from hookscope.core.teaching.lessons.plan import Picks, plan
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.tasks import Task
from hookscope.ui.state.workspace import Workspace, hook_kind
from hookscope.ui.widgets.code_view import code_view, notice_label

FEATURE_ID = "lessons"
DOCK_ID = "lessons"
SHOW_ACTION = "help.lessons"
LIST_MIN_WIDTH = 220  # px: the lessons' titles readable beside the lesson
DEFAULT_IMAGE_B = "coffee.png"  # image B of the mixup lesson when the window has none
HOOK_NAMES = {
    "forward": "forward hook",
    "pre": "forward pre-hook",
    "backward": "full backward hook",
    "grad_input": "full backward hook",  # grad_input: only a full backward hook gives it
    "tensor": "tensor hook",
    "all": "every hook",
}


def run_lesson(
    chosen: Lesson,
    module: torch.nn.Module | None,
    image: torch.Tensor | None,
    picks: Picks | None,
    other_path: str | None,
    preprocess: Preprocess | None,
    model_code: str | None,
    registry: HookRegistry | None,
) -> LessonResult:
    """The lesson's run, in the worker: image B read there, the window's edits suspended for its duration."""
    other = None
    if other_path is not None and preprocess is not None:
        other = preprocess.to_tensor(read_image(other_path))
    with registry.edits_suspended() if registry is not None else nullcontext():
        return chosen.run(
            module,
            image,
            picks=picks,
            other=other,
            model_code=model_code,
            other_text=os.path.basename(other_path) if other_path else None,
        )


class _CloseWatcher(QObject):
    """Calls ``closed`` when the widget it watches gets a close event."""

    def __init__(self, closed: Callable[[], object], parent: QObject) -> None:
        super().__init__(parent)
        self._closed = closed

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802  (Qt's name)
        if event.type() == QEvent.Type.Close:
            self._closed()
        return False


class LessonsFeature:
    """A list of lessons, the chosen one's text, Set up and run, the numbers side by side, and its code."""

    id = FEATURE_ID

    # long because: builds the dock's widgets, layout and connections in the order they appear on screen
    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.current: Lesson | None = None
        self.result: LessonResult | None = None
        self.ticked: list[tuple[str, str]] = []  # ticks this lesson added (not those the user had already)
        self.edit_ids: list[int] = []  # edits this lesson added
        self._registry: HookRegistry | None = None  # the registry they went into
        self._pending: Task | None = None  # submitted, waiting for the runs
        self._job: Task | None = None  # submitted, result still wanted
        self._running: Task | None = None  # started and not finished (wanted or not)
        self._described = ""  # what Set up and run registered, in words
        self._listed: list[HookInfo] = []  # the hooks the run registers by itself, listed while it goes

        self.widget = QWidget()
        self.list = QListWidget()
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        for item in LESSONS:
            self.list.addItem(f"{item.title}  ({HOOK_NAMES[item.hook]})")
        self.list.currentRowChanged.connect(self._on_row_changed)
        self.title = QLabel("Choose a lesson.")
        self.title.setObjectName("panelTitle")
        self.title.setWordWrap(True)
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.run_button = QPushButton("Set up and run")
        self.run_button.setToolTip("Register the lesson's hooks on the model in the window, run, show the numbers")
        self.run_button.clicked.connect(self.set_up_and_run)
        self.run_button.setEnabled(False)
        self.leave_button = QPushButton("Leave lesson")
        self.leave_button.setToolTip("Remove every tick and edit the lesson added")
        self.leave_button.clicked.connect(self.leave)
        self.leave_button.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.leave_button)
        buttons.addStretch(1)
        self.status = QLabel("")
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(("", "before", "after"))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.table.horizontalHeader()
        for column in range(3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        # column titles such as "register_full_backward_hook" wrap instead of being cut off
        header.setDefaultAlignment(
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag(int(Qt.TextFlag.TextWordWrap))
        )
        self._fit_table()
        self.claim = QLabel("")
        self.claim.setWordWrap(True)
        self.note = notice_label()
        self.code = code_view("The plain PyTorch of the lesson appears here.", wrap=False)
        self.copy_button = QPushButton("Copy code")
        self.copy_button.setToolTip("Copy the lesson's plain PyTorch (runnable on its own)")
        self.copy_button.clicked.connect(self.copy_snippet)
        self.copy_button.setEnabled(False)

        # The list beside the lesson, each scrolling on its own (the dock is wide and short: under the cards, 250 px
        # tall in a 1366x768 window). One column that the dock scrolled as a whole put the lesson below the fold
        # under the list, and the list, the code and the dock each had a scroll bar of their own.
        self.code.setMinimumHeight(120)
        self.code.textChanged.connect(self._fit_code)
        copy_row = QHBoxLayout()
        copy_row.addWidget(self.copy_button)
        copy_row.addStretch(1)
        lesson = QWidget()
        layout = QVBoxLayout(lesson)
        layout.setContentsMargins(4, 0, 4, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.text)
        layout.addLayout(buttons)
        for widget in (self.status, self.table, self.claim, self.note, self.code):
            layout.addWidget(widget)
        layout.addLayout(copy_row)
        layout.addStretch(1)
        self.lesson_area = QScrollArea()
        self.lesson_area.setWidgetResizable(True)
        self.lesson_area.setFrameShape(QScrollArea.Shape.NoFrame)
        self.lesson_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.lesson_area.setWidget(lesson)
        self.list.setMinimumWidth(LIST_MIN_WIDTH)
        # titles end in "…" where the list is narrow (the whole title in the tooltip), never a sideways scroll
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        for row in range(self.list.count()):
            self.list.item(row).setToolTip(self.list.item(row).text())
        self.splitter = QSplitter(Qt.Orientation.Horizontal, self.widget)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.list)
        self.splitter.addWidget(self.lesson_area)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        outer = QVBoxLayout(self.widget)
        outer.setContentsMargins(4, 4, 4, 4)
        outer.addWidget(self.splitter)

        self.dock = host.add_dock(
            # With the side views under the cards: as wide as the card area (>= 480 px in a 1024 px window), where
            # the right column left the text 230 px. Not in the dock's own scroll area: the two halves scroll.
            DockSpec(DOCK_ID, "Learn the hooks", area="bottom", visible=False, scroll=False),
            self.widget,
        )
        # Closing the dock (its ✕, or View > Learn the hooks) leaves the lesson; floating it, or another tab in front
        # of it, does not (both hide it for a moment, or from sight, without closing it).
        self._close_watcher = _CloseWatcher(self.leave, self.widget)
        self.dock.installEventFilter(self._close_watcher)
        self.dock.toggleViewAction().triggered.connect(self._on_view_toggled)
        host.add_actions(
            [
                ActionSpec(
                    SHOW_ACTION,
                    "Learn the hooks",
                    "Help",
                    callback=self.show,
                    group=10,
                    order=20,
                    tooltip="The four hooks, one lesson at a time, on the model in the window",
                )
            ]
        )
        workspace.model_loading.connect(self._on_model_loading)
        workspace.model_changed.connect(self._on_model_changed)

    # ---- showing ------------------------------------------------------------------------------------------------
    def show(self) -> None:
        self.host.show_dock(DOCK_ID)
        self.dock.raise_()
        if self.list.currentRow() < 0:
            self.list.setCurrentRow(0)

    def select(self, lesson_id: str) -> None:
        """Choose a lesson (leaving the one before)."""
        self.list.setCurrentRow([item.id for item in LESSONS].index(lesson(lesson_id).id))

    def _on_row_changed(self, row: int) -> None:
        chosen = LESSONS[row] if 0 <= row < len(LESSONS) else None
        if chosen is self.current:
            return
        self.leave()
        self.current = chosen
        self.result = None
        self._clear_numbers()
        if chosen is None:
            self.title.setText("Choose a lesson.")
            self.text.setText("")
            self.run_button.setEnabled(False)
            return
        self.title.setText(chosen.title)
        self.text.setText(chosen.text)
        self.run_button.setEnabled(True)
        self.status.setText(self._where(chosen))
        self.code.setPlainText(self._preview(chosen))
        self.copy_button.setEnabled(bool(self.code.toPlainText()))

    def _where(self, chosen: Lesson) -> str:
        if chosen.tiny:
            return "Runs on a tiny built-in network (y = 2 x), for exact small numbers; your model is not touched."
        loaded = self.workspace.loaded
        return f"Runs on {loaded.name if loaded is not None else 'the model in the window'} and the image on screen."

    def _picks(self) -> Picks | None:
        """The modules the lessons use, from the survey of the window's last run (None before the first run)."""
        registry, loaded = self.workspace.registry, self.workspace.loaded
        if registry is None or loaded is None or registry.survey is None:
            return None
        return plan(loaded.module, registry.survey)

    def _preview(self, chosen: Lesson) -> str:
        """The lesson's code before it runs; it needs the last run's survey (no model runs on the GUI thread)."""
        picks, loaded, last = self._picks(), self.workspace.loaded, self.workspace.last
        if chosen.tiny:
            return chosen.snippet()
        if picks is None or loaded is None or last is None or getattr(picks, chosen.needs) is None:
            return ""  # the built-in network would have to be surveyed: a model run, not for the GUI thread
        try:
            return chosen.snippet(loaded.module, last.result.input, picks=picks, model_code=model_code_for(loaded))
        except Exception:  # noqa: BLE001  (a preview is a nicety: the run shows the code too)
            return ""

    def _clear_numbers(self) -> None:
        self.table.setRowCount(0)
        self.table.setHorizontalHeaderLabels(("", "before", "after"))
        self._fit_table()
        self.claim.setText("")
        self.note.setText("")
        self.note.setVisible(False)
        self.code.setPlainText("")
        self.copy_button.setEnabled(False)

    # ---- set up and run -------------------------------------------------------------------------------------------
    def set_up_and_run(self) -> bool:
        """Register the lesson on the live model (ticks and edits through the workspace) and run it in the
        background. False (with the reason shown) when there is nothing to run on yet."""
        chosen, workspace = self.current, self.workspace
        if chosen is None:
            return False
        loaded, registry, last = workspace.loaded, workspace.registry, workspace.last
        if not chosen.tiny and (loaded is None or registry is None or last is None):
            self.host.show_error("Open a model and an image first: the lesson runs on them.", False)
            return False
        self._remove_setup()
        self._job = None  # an earlier run of the lesson still going: its numbers are no longer wanted
        picks = self._picks() if not chosen.tiny else None
        other_path = self._image_b_path() if chosen.id == "forward-mixup" else None
        setup = chosen.setup(picks, other_path or "") if picks is not None else AppSetup()
        described = self._apply(setup)
        self.leave_button.setEnabled(True)
        if chosen.tiny:  # the tiny network is the lesson's own: nothing of the window's is involved
            work = partial(run_lesson, chosen, None, None, None, None, None, None, None)
        else:
            assert loaded is not None and last is not None  # refused above otherwise
            work = partial(
                run_lesson,
                chosen,
                loaded.module,
                last.result.input,
                picks,
                other_path,
                loaded.preprocess,
                model_code_for(loaded),
                registry,
            )
        own = chosen.own_hooks(picks) if picks is not None else ()
        self._clear_numbers()
        self._described = described
        self.status.setText(f"Running… {described}")
        self.run_button.setEnabled(False)
        if self._pending is not None:  # an earlier run still waiting: its numbers are no longer wanted
            self._pending.cancel()
        task = self._pending = self._job = workspace.submit(f"lesson {chosen.id}", work, exclusive=True)
        task.started.connect(partial(self._on_started, task, own))
        task.finished.connect(partial(self._on_returned, task))
        task.failed.connect(partial(self._on_failed, task))
        task.ended.connect(partial(self._run_ended, task))
        return True

    def _image_b_path(self) -> str:
        b = self.workspace.image_b
        if b is not None and b.path and os.path.isfile(b.path):
            return b.path
        return str(resource(DEFAULT_IMAGE_B))

    def _apply(self, setup: AppSetup) -> str:
        """Register the lesson's ticks and edits through the workspace; say what was registered."""
        workspace = self.workspace
        self._registry = workspace.registry
        changes = workspace.set_ticked(list(setup.ticks), True)
        self.ticked = [(path, kind) for path, kind, _ in changes]
        for edit in setup.edits:
            edit_id = workspace.add_edit(edit)
            if edit_id is not None:
                self.edit_ids.append(edit_id)
        parts = [f"{KIND_LABELS.get(kind, kind)} tick on {path}" for path, kind in self.ticked]
        parts += [edit.describe() for edit in setup.edits]
        if not parts:
            return "Its hooks are registered for the run only, and removed at its end."
        return "Registered on the model (see the hook inspector): " + "; ".join(parts) + "."

    def _on_started(self, task: Task, own: tuple[HookInfo, ...]) -> None:
        if task is self._pending:
            self._pending = None
        self._running = task
        # the hooks the run registers by itself, listed in the hook inspector while it runs
        self._listed = list(own)
        for info in self._listed:
            self.workspace.add_external_hook(info)

    def _run_ended(self, task: Task) -> None:
        if task is self._pending:  # cancelled before it started
            self._pending = None
        if task is self._running:
            self._running = None
            for info in self._listed:
                self.workspace.remove_external_hook(info)
            self._listed = []

    def _on_returned(self, task: Task, outcome: object) -> None:
        self._run_ended(task)
        if task is not self._job or not isinstance(outcome, LessonResult):
            return
        self._job = None
        self.result = outcome
        self.run_button.setEnabled(True)
        self._show_result(outcome)

    def _on_failed(self, task: Task, error: object) -> None:
        self._run_ended(task)
        if task is not self._job:
            return
        self._job = None
        self.run_button.setEnabled(True)
        message = str(error) if isinstance(error, BaseException) else repr(error)
        self.claim.setText(f"✗ The lesson could not run: {message}")
        self.host.show_error(f"The lesson could not run: {message}", False)

    def _show_result(self, result: LessonResult) -> None:
        self.table.setRowCount(len(result.rows))
        # a zero-width space after each "_" lets register_full_backward_hook wrap in a narrow column
        self.table.setHorizontalHeaderLabels(("", *(c.replace("_", "_\u200b") for c in result.columns)))
        for row, line in enumerate(result.rows):
            for column, text in enumerate((line.label, line.left, line.right)):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(row, column, item)
        self._fit_table()
        mark = "✓ Reproduced:" if result.ok else "✗ Not reproduced:"
        self.claim.setText(f"{mark} {result.claim}")
        shown = " ".join(text for line in result.rows for text in (line.left, line.right))
        notes = [result.note, *(w for w in result.warnings if w.split(". ")[0] not in shown)]
        self.note.setText(" ".join(n for n in notes if n))
        self.note.setVisible(any(notes))
        self.code.setPlainText(result.snippet)
        self.copy_button.setEnabled(True)
        used = ", ".join(f"{role}: {path}" for role, path in result.paths.items())
        self.status.setText(self._described + (f" Modules used: {used}." if used else ""))

    def _fit_code(self) -> None:
        """The code box as tall as its code: the lesson's side is the one thing that scrolls (a 220 px box of its
        own scrolled inside it)."""
        lines = max(1, self.code.document().blockCount())
        bar = self.code.horizontalScrollBar().sizeHint().height()
        frame = 2 * self.code.frameWidth() + 2 * int(self.code.document().documentMargin())
        self.code.setMinimumHeight(max(120, lines * self.code.fontMetrics().lineSpacing() + bar + frame))

    def _fit_table(self) -> None:
        """As tall as its rows: the dock scrolls, the table never does."""
        self.table.resizeRowsToContents()
        header = self.table.horizontalHeader()
        header.setMinimumHeight(2 * self.table.fontMetrics().height() + 8)
        rows = sum(self.table.rowHeight(row) for row in range(self.table.rowCount()))
        self.table.setFixedHeight(header.minimumHeight() + rows + 2 * self.table.frameWidth() + 2)

    def copy_snippet(self) -> str:
        text = self.code.toPlainText()
        if text:
            QApplication.clipboard().setText(text)
            self.host.show_status("Copied the lesson's code.", 3000)
        return text

    # ---- leaving ------------------------------------------------------------------------------------------------
    def leave(self) -> int:
        """Remove every tick and edit the lesson added; returns how many of them are still there (always 0)."""
        if self._pending is not None:
            self._pending.cancel()  # never starts
        self._pending = None
        self._job = None  # a run still going removes its own hooks at its end; its numbers are no longer wanted
        left = self._remove_setup()
        self.leave_button.setEnabled(False)
        if self.current is not None:
            self.run_button.setEnabled(True)
        return left

    def _remove_setup(self) -> int:
        workspace, registry = self.workspace, self._registry
        if registry is not None and registry is workspace.registry:
            if self.ticked:
                workspace.set_ticked(self.ticked, False)
            for edit_id in self.edit_ids:
                workspace.remove_edit(edit_id)
        left = self.handles_left()
        self.ticked, self.edit_ids, self._registry = [], [], None
        if left:
            self.host.show_error(f"{left} hook(s) of the lesson could not be removed.", False)
        return left

    def handles_left(self) -> int:
        """The lesson's ticks and edits still registered."""
        registry = self._registry
        if registry is None:
            return 0
        edits = {edit_id for edit_id, _, _ in registry.edits()}
        ticked = sum(registry.has(path, hook_kind(kind)) for path, kind in self.ticked)
        return ticked + sum(e in edits for e in self.edit_ids)

    @property
    def running(self) -> bool:
        """Whether the lesson's run is waiting or going (wanted or not)."""
        return self._pending is not None or self._running is not None

    # ---- the window's signals -------------------------------------------------------------------------------------
    def _on_view_toggled(self, shown: bool) -> None:
        if not shown:
            self.leave()

    def _on_model_loading(self, _description: str) -> None:
        # Before the new model comes: otherwise the workspace would carry the lesson's edits over to it.
        self.leave()

    def _on_model_changed(self, _outcome: object) -> None:
        self.leave()
        if self.current is not None:
            self._clear_numbers()
            self.status.setText(self._where(self.current))
            self.code.setPlainText(self._preview(self.current))
            self.copy_button.setEnabled(bool(self.code.toPlainText()))
