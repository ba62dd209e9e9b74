"""Dream a channel: the image a channel responds to most, optimised in the background (``hookscope.core.teaching.visualize``).

"Visualize channel k" in a channel tile's menu (and "Visualize a channel of …" in the module menu, and Hooks ▸
Visualize a channel…) fills the dock's fields; Run starts the optimisation as an exclusive task
(``Workspace.submit``), so it never runs at the same time as a workspace run on the same model (a run asked for
meanwhile waits for it, and a visualisation asked for during a run waits for the run). Its forward hook is registered on the
live module by the engine and removed when it ends; while it runs the workspace lists it among its external hooks
(the hook inspector shows them). The image is shown every few steps; Cancel stops it at the next step (the image
so far stays); Save… writes a PNG; Use as image A runs it through the workspace like any other image.
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QImage, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.engine.hooks import FORWARD, HookInfo
from hookscope.core.pictures.panels import PanelPicture
from hookscope.core.teaching.visualize import Objective, Visualization, VisualizeSettings, visualize
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.dialogs.folders import last_folder, remember_folder
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.requests import ImageSource, LoadOutcome
from hookscope.ui.state.tasks import Task
from hookscope.ui.state.workspace import Workspace, error_text

FEATURE_ID = "visualize"
DOCK_ID = "visualize"
WHOLE_LAYER = -1  # the channel box's special value
PROMPT = "Right-click a channel tile and choose Visualize channel, or pick a module and a channel here."
SAVE_FOLDER = "visualizations"  # where the last visualization was saved
VIEW_MIN = 96  # the image's least side in the dock; it grows to fill the room the dock has


class FittedImage(QLabel):
    """An image scaled to the room it is given (aspect kept): never asks for more than the dock has, so the dock
    never scrolls to show it (a fixed 256 px image scrolled in a 230 px column)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source = QPixmap()
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(VIEW_MIN, VIEW_MIN)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)

    def set_image(self, pixmap: QPixmap) -> None:
        self.source = pixmap
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        if self.source.isNull():
            self.clear()
            return
        room = self.contentsRect().size()
        self.setPixmap(
            self.source.scaled(room, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
        )


class VisualizeFeature(QObject):
    """The dock: module, channel and options, Run / Cancel, progress, the image as it improves, Save and Use."""

    id = FEATURE_ID
    progressed = Signal(int, float, object)  # step, objective, uint8 image (emitted by the worker thread)
    finished = Signal(str)  # "done", "cancelled" or "failed", once a run has ended and the dock shows it

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__(workspace)
        self.workspace = workspace
        self.host = host
        self.result: Visualization | None = None
        self.image: np.ndarray | None = None  # what the dock shows: the latest image (uint8 H x W x 3)
        self._task: Task | None = None  # the optimisation, waiting for the runs or running
        self._cancel = False
        self._hook: HookInfo | None = None
        self._objective: Objective | None = None
        self._settings: VisualizeSettings | None = None
        self._build()
        self.dock = host.add_dock(
            # With the side views under the cards: the fields on the left, the image beside them as large as the
            # height allows.
            DockSpec(DOCK_ID, "Visualize", area="bottom", visible=False),
            self.widget,
        )
        host.add_tile_menu(self.tile_entries)
        host.add_module_menu(self.module_entries)
        # A button in the Channel view for the channel it shows (activations only, as the tile menu's entry).
        self._shown: tuple[str, int] | None = None
        self.channel_button = QPushButton("Visualize this channel")
        self.channel_button.setToolTip("Optimise an image that excites the channel shown")
        self.channel_button.setEnabled(False)
        self.channel_button.clicked.connect(self.visualize_shown)
        host.add_channel_row(self.channel_button)
        host.add_channel_listener(self._on_channel_shown)
        host.add_actions(
            [
                ActionSpec(
                    "visualize.show",
                    "Visualize a channel…",
                    "Hooks",
                    self.show,
                    group=70,
                    tooltip="Optimise an image that excites one channel of a module (feature visualization)",
                ),
            ]
        )
        self.progressed.connect(self._on_progress)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.on_shutdown(self.shutdown)
        self._fill_modules()

    # ---- the dock ------------------------------------------------------------------------------------------------
    # long because: builds the dialog's widgets, layout and connections in the order they appear on screen
    def _build(self) -> None:
        self.widget = QWidget()
        self.title = QLabel(PROMPT)
        self.title.setObjectName("panelTitle")
        self.title.setWordWrap(True)
        self.module_box = QComboBox()
        self.module_box.setEditable(True)
        self.module_box.setMinimumContentsLength(16)
        self.module_box.setToolTip("The module whose output is read by the optimisation's forward hook")
        self.channel_box = QSpinBox()
        self.channel_box.setRange(WHOLE_LAYER, 1_000_000)
        self.channel_box.setSpecialValueText("whole layer")
        self.channel_box.setValue(0)
        self.steps_box = QSpinBox()
        self.steps_box.setRange(1, 10_000)
        self.steps_box.setValue(256)
        self.size_box = QSpinBox()
        self.size_box.setRange(32, 1024)
        self.size_box.setValue(224)
        self.size_box.setSuffix(" px")
        self.seed_box = QSpinBox()
        self.seed_box.setRange(0, 2**31 - 1)
        self.negative_box = QCheckBox("Minimise (negative)")
        self.negative_box.setToolTip("Find what the channel responds to least instead")
        # Two fields a row: the form fits the side views' tab stack (about 250 px high at 1024x700) unscrolled.
        form = QFormLayout()
        form.addRow("Module", self.module_box)
        form.addRow("Channel", self.channel_box)
        steps_size = QHBoxLayout()
        steps_size.addWidget(self.steps_box, 1)
        steps_size.addWidget(QLabel("Size"))
        steps_size.addWidget(self.size_box, 1)
        form.addRow("Steps", steps_size)
        seed_sign = QHBoxLayout()
        seed_sign.addWidget(self.seed_box, 1)
        seed_sign.addWidget(self.negative_box)
        form.addRow("Seed", seed_sign)
        self.run_button = QPushButton("Run")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setFormat("%v / %m steps")
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.progress, 1)
        self.view = FittedImage()
        self.note = QLabel("")
        self.note.setObjectName("muted")
        self.note.setWordWrap(True)
        self.save_button = QPushButton("Save…")
        self.save_button.setToolTip("Save the image as a PNG file")
        self.save_button.clicked.connect(self.save_dialog)
        self.use_button = QPushButton("Use as image A")
        self.use_button.setToolTip("Run the image through the model as the input image")
        self.use_button.clicked.connect(self.use_as_image_a)
        for button in (self.save_button, self.use_button):
            button.setEnabled(False)
        results = QHBoxLayout()
        results.addWidget(self.save_button)
        results.addWidget(self.use_button)
        results.addStretch(1)
        controls = QVBoxLayout()
        controls.setContentsMargins(0, 0, 0, 0)
        controls.setSpacing(4)
        controls.addWidget(self.title)
        controls.addLayout(form)
        controls.addLayout(buttons)
        controls.addLayout(results)
        controls.addStretch(1)
        picture = QVBoxLayout()  # the image and what it is, beside the fields
        picture.setContentsMargins(0, 0, 0, 0)
        picture.addWidget(self.view, 1)
        picture.addWidget(self.note)
        layout = QHBoxLayout(self.widget)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(controls, 3)
        layout.addLayout(picture, 2)

    def _fill_modules(self) -> None:
        current = self.module_box.currentText()
        self.module_box.clear()
        self.module_box.addItems([node.path for node in self.workspace.nodes if node.path])
        if current:
            self.module_box.setCurrentText(current)

    # ---- menus ---------------------------------------------------------------------------------------------------
    def tile_entries(self, menu: QMenu, picture: PanelPicture, channel: int) -> None:
        if picture.is_gradient:
            return  # a gradient tile's channel is the module's channel too, but the entry belongs to activations
        menu.addSeparator()
        action = menu.addAction(f"Visualize channel {channel}")
        action.setToolTip(f"Optimise an image that excites channel {channel} of {picture.path}")
        action.triggered.connect(lambda *_: self.visualize(picture.path, channel))

    def _on_channel_shown(self, picture: PanelPicture, channel: int) -> None:
        self._shown = None if picture.is_gradient else (picture.path, channel)
        self.channel_button.setEnabled(self._shown is not None)

    def visualize_shown(self) -> bool:
        """Visualize the channel the Channel view shows."""
        return self._shown is not None and self.visualize(*self._shown)

    def module_entries(self, menu: QMenu, path: str) -> None:
        if path:
            menu.addSeparator()
            menu.addAction(f"Visualize a channel of {path}…").triggered.connect(lambda *_: self.show(path))

    def show(self, path: str | None = None) -> None:
        """Show the dock (with ``path`` in its module box) without starting anything."""
        if path:
            self.module_box.setCurrentText(path)
        self.host.show_dock(DOCK_ID)

    def visualize(self, path: str, channel: int | None) -> bool:
        """Fill in ``path`` and ``channel`` (None: the whole layer) and start."""
        self.module_box.setCurrentText(path)
        self.channel_box.setValue(WHOLE_LAYER if channel is None else channel)
        self.host.show_dock(DOCK_ID)
        return self.start()

    # ---- running -------------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None

    def objective(self) -> Objective:
        channel = self.channel_box.value()
        return Objective(
            self.module_box.currentText().strip(),
            None if channel == WHOLE_LAYER else channel,
            negative=self.negative_box.isChecked(),
        )

    def settings(self) -> VisualizeSettings:
        return VisualizeSettings(
            steps=self.steps_box.value(), size=self.size_box.value(), seed=self.seed_box.value(), progress_every=4
        )

    def start(self) -> bool:
        """Start (or, while a workspace run is in flight, queue) a visualisation of the dock's objective."""
        if self.running:
            self.host.show_status("A visualization is already running: cancel it first.", 4000)
            return False
        registry = self.workspace.registry
        if self.workspace.loaded is None or registry is None:
            self.host.show_error("No model is loaded yet.", dialog=False)
            return False
        objective = self.objective()
        if objective.layer not in registry.paths:
            self.host.show_error(f"The model has no module named '{objective.layer}'.", dialog=False)
            return False
        self._objective, self._settings = objective, self.settings()
        self._cancel = False
        self.result = None
        self.progress.setRange(0, self._settings.steps)
        self.progress.setValue(0)
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.note.setText("")
        self.title.setText(f"{self._describe(objective)}: waiting for the run in progress…")
        self._submit()
        return True

    def _submit(self) -> None:
        """An exclusive task: it starts once no run is in flight, and a run asked for later waits for it."""
        loaded = self.workspace.loaded
        objective, settings = self._objective, self._settings
        assert loaded is not None and objective is not None and settings is not None
        work = partial(
            visualize,
            loaded.module,
            objective,
            loaded.preprocess,
            settings,
            cancelled=lambda: self._cancel,
            progress=self.progressed.emit,
        )
        task = self._task = self.workspace.submit("visualize", work, exclusive=True)
        task.started.connect(partial(self._on_started, task))
        task.finished.connect(partial(self._on_returned, task))
        task.failed.connect(partial(self._on_failed, task))

    def _on_started(self, task: Task) -> None:
        """The optimisation runs: its hook is on the live module until it ends."""
        objective = self._objective
        if task is not self._task or objective is None:
            return
        self._hook = HookInfo(
            objective.layer,
            "forward",
            FORWARD,
            label=self._describe(objective),
            note="Feature visualization: reads this module's output while it optimises an image; removed when it ends.",
        )
        self.workspace.add_external_hook(self._hook)  # the hook inspector lists it while the job runs
        edits = len(self.workspace.registry.enabled_edits()) if self.workspace.registry is not None else 0
        if edits:
            self.note.setText(
                f"{edits} intervention{'s are' if edits != 1 else ' is'} on and act{'s' if edits == 1 else ''} "
                "on this optimisation too."
            )
        self.title.setText(f"{self._describe(objective)}: optimising…")

    def cancel(self) -> None:
        task = self._task
        if task is not None:
            self._cancel = True
            self.cancel_button.setEnabled(False)
            if task.waiting:  # still waiting for a workspace run: nothing started
                task.cancel()
                self._task = None
                self._end("cancelled", f"{self._describe(self._objective)}: cancelled before it started.")
            else:
                self.title.setText(f"{self._describe(self._objective)}: cancelling…")

    def _on_progress(self, step: int, value: float, image: object) -> None:
        if self._task is None or not isinstance(image, np.ndarray):
            return
        self.progress.setValue(step)
        self.title.setText(f"{self._describe(self._objective)}: step {step}, objective {value:.4g}")
        self._show_image(image)

    def _on_returned(self, task: Task, outcome: object) -> None:
        if task is not self._task or not isinstance(outcome, Visualization):
            return
        self._task = None
        self.result = outcome
        self._show_image(outcome.image)
        self.progress.setValue(outcome.steps_done)
        self.note.setText(
            f"Objective {outcome.objective_start:.4g} → {outcome.objective_end:.4g} (mean activation on the plain "
            f"image). {outcome.step_ms:.0f} ms per step; a bare forward+backward of the model "
            f"{outcome.bare_ms:.0f} ms (ratio {outcome.ratio:.2f})."
        )
        state = f"cancelled after {outcome.steps_done} steps" if outcome.cancelled else "done"
        self._end("cancelled" if outcome.cancelled else "done", f"{self._describe(outcome.objective)}: {state}")

    def _on_failed(self, task: Task, error: object) -> None:
        if task is not self._task:
            return
        self._task = None
        message = error_text(error) if isinstance(error, BaseException) else str(error)
        self.host.show_error(message, dialog=False)
        self._end("failed", f"{self._describe(self._objective)}: {message}")

    def _end(self, state: str, title: str) -> None:
        if self._hook is not None:
            self.workspace.remove_external_hook(self._hook)
            self._hook = None
        self.title.setText(title)
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        has_image = self.image is not None
        self.save_button.setEnabled(has_image)
        self.use_button.setEnabled(has_image)
        self.host.show_status(title, 6000)
        self.finished.emit(state)

    @staticmethod
    def _describe(objective: Objective | None) -> str:
        if objective is None:
            return "Visualization"
        what = "whole layer" if objective.channel is None else f"channel {objective.channel}"
        return f"{objective.layer} {what}{' (minimised)' if objective.negative else ''}"

    def _show_image(self, image: np.ndarray) -> None:
        self.image = np.ascontiguousarray(image)
        height, width = self.image.shape[:2]
        qimage = QImage(self.image.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()
        self.view.set_image(QPixmap.fromImage(qimage))

    # ---- the result ------------------------------------------------------------------------------------------------
    def picture(self) -> Image.Image | None:
        return Image.fromarray(self.image) if self.image is not None else None

    def save_to(self, path: str) -> bool:
        picture = self.picture()
        if picture is None:
            return False
        try:
            picture.save(path, format="PNG")
        except (OSError, ValueError) as error:
            self.host.show_error(f"Cannot save '{path}': {error}")
            return False
        self.host.show_status(f"Saved {path}", 5000)
        return True

    def save_dialog(self) -> None:
        if self.image is None:
            return
        objective = self._objective
        name = (
            "visualization.png"
            if objective is None
            else f"{objective.layer or 'model'}-{'layer' if objective.channel is None else objective.channel}.png"
        )
        start = last_folder(SAVE_FOLDER, self.host.remembers)
        path, _ = QFileDialog.getSaveFileName(
            self.host.dialog_parent(), "Save the visualization", os.path.join(start, name), "PNG image (*.png)"
        )
        if path:
            remember_folder(SAVE_FOLDER, path, self.host.remembers)
            self.save_to(path if path.lower().endswith(".png") else path + ".png")

    def use_as_image_a(self) -> bool:
        """Run the image through the workspace as image A (a run follows, as for any image)."""
        picture = self.picture()
        if picture is None:
            return False
        self.workspace.request_image(ImageSource(f"visualization of {self._describe(self._objective)}", image=picture))
        return True

    # ---- the workspace ---------------------------------------------------------------------------------------------
    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self._fill_modules()
        task = self._task
        if task is not None and task.waiting:  # asked for while a model loaded: it runs on the model now in use
            task.cancel()
            registry, objective = self.workspace.registry, self._objective
            if objective is not None and registry is not None and objective.layer in registry.paths:
                self._submit()
            else:
                self._task = None
                message = f"The model has no module named '{objective.layer if objective else ''}'."
                self.host.show_error(message, dialog=False)
                self._end("failed", f"{self._describe(objective)}: {message}")

    def shutdown(self) -> None:
        """The closing window calls this (``Workspace.on_shutdown``) before it cancels and waits for the tasks: the
        optimisation stops at its next step."""
        self._cancel = True
