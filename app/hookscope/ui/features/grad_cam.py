"""The Grad-CAM feature: where in the image one module's activations push the target class, over the input image.

Grad-CAM needs the module's activations (a forward hook) and the gradient of the target with respect to them (the
Grad column's tensor hook on the output; a ``backward`` capture serves too); ``show_module`` ticks whichever is
missing through the workspace, as a click in the tree would, and says so. The map is recomputed after every run
(``run_grad_cam``), for the workspace's target class. "Grad-CAM of <module>" is offered in the module menu and the
channel-tile menu for every module whose output is spatial.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QMenu, QSizePolicy, QSlider, QVBoxLayout, QWidget

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import colormap_lut
from hookscope.core.engine.hooks import OUTPUT_GRADIENT_KINDS
from hookscope.core.pictures.cam import has_spatial_output, overlay, run_grad_cam
from hookscope.core.pictures.panels import KIND_LABELS, PanelPicture
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import Workspace

FEATURE_ID = "grad_cam"
DOCK_ID = "grad_cam"
CAM_COLORMAP = "inferno"
PROMPT = "Right-click a module (or a channel tile) and choose Grad-CAM."
# The scale, said where the map is shown (hookscope.core.pictures.cam.grad_cam: pytorch-grad-cam's min-max scaling).
SCALE_TEXT = "Scale: each map from its minimum (0) to its maximum (1), as pytorch-grad-cam does."


class GradCamFeature:
    """One module's Grad-CAM laid over the input image, with an opacity slider; refreshed after every run."""

    id = FEATURE_ID

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.path: str | None = None
        self.cam: np.ndarray | None = None  # float32 (H, W) in [0, 1], the input's size
        self._input: np.ndarray | None = None
        self._tick_note = ""

        self.widget = QWidget()
        self.title = QLabel(PROMPT)
        self.title.setObjectName("panelTitle")
        self.title.setWordWrap(True)
        self.module_box = QComboBox()
        self.module_box.setToolTip("Modules with spatial output whose activations and gradients are hooked")
        self.module_box.setMinimumContentsLength(16)
        self.module_box.textActivated.connect(self.show_module)
        self.view = pg.GraphicsLayoutWidget()
        self.view.setMinimumHeight(160)
        # Its height from the tab, not pyqtgraph's 480 px size hint (which made a 240 px tab scroll).
        self.view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self._box = self.view.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self._box.setMouseEnabled(False, False)
        self.image_item = pg.ImageItem()
        self._box.addItem(self.image_item)
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(50)
        self.opacity.setToolTip("Opacity of the Grad-CAM map over the input image")
        self.opacity.valueChanged.connect(self._redraw)
        self.note = QLabel("")
        self.note.setObjectName("muted")
        self.note.setWordWrap(True)
        self.scale_note = QLabel(SCALE_TEXT)
        self.scale_note.setObjectName("muted")
        self.scale_note.setWordWrap(True)
        self.view.setToolTip(SCALE_TEXT)
        top = QHBoxLayout()
        top.addWidget(QLabel("Module"))
        top.addWidget(self.module_box, 1)
        opacity_row = QHBoxLayout()
        opacity_row.addWidget(QLabel("Opacity"))
        opacity_row.addWidget(self.opacity, 1)
        # With the side views under the cards (a 230 px right column cut the map and scrolled both ways): the fields
        # and notes on the left, the map beside them as large as the tab's height allows.
        controls = QVBoxLayout()
        controls.setContentsMargins(0, 0, 0, 0)
        controls.addWidget(self.title)
        controls.addLayout(top)
        controls.addLayout(opacity_row)
        controls.addWidget(self.scale_note)
        controls.addWidget(self.note)
        controls.addStretch(1)
        layout = QHBoxLayout(self.widget)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(controls, 1)
        layout.addWidget(self.view, 1)

        self.dock = host.add_dock(DockSpec(DOCK_ID, "Grad-CAM", area="bottom", visible=False), self.widget)
        host.add_module_menu(self.module_entries)
        host.add_tile_menu(self.tile_entries)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.target_changed.connect(self._on_target_changed)

    # ---- menus --------------------------------------------------------------------------------------------------
    def applies_to(self, path: str) -> bool | None:
        """Whether ``path``'s output is spatial (C, H, W) in the last survey; None when not known yet."""
        registry = self.workspace.registry
        survey = registry.survey if registry is not None else None
        if survey is None:
            return None
        run = survey.run_of(path)
        if not run.ran or not run.output_shapes:
            return False
        return has_spatial_output(tuple(run.output_shapes[0]))

    def module_entries(self, menu: QMenu, path: str) -> None:
        if self.applies_to(path) is not False:
            menu.addSeparator()
            action = menu.addAction(f"Grad-CAM of {path or 'the model'}")
            action.setToolTip("Where in the image this module's activations push the target class")
            action.triggered.connect(lambda *_: self.show_module(path))

    def tile_entries(self, menu: QMenu, picture: PanelPicture, _channel: int) -> None:
        self.module_entries(menu, picture.path)

    # ---- showing a module -----------------------------------------------------------------------------------
    def show_module(self, path: str) -> bool:
        """Show the Grad-CAM of ``path``, ticking its activations and gradients if either is missing."""
        workspace = self.workspace
        registry = workspace.registry
        if registry is None:
            self.host.show_error("No model is loaded yet.")
            return False
        if path not in registry.paths:
            self.host.show_error(f"The model has no module '{path}'.")
            return False
        if self.applies_to(path) is False:
            shapes = registry.survey.run_of(path).output_shapes if registry.survey is not None else []
            shape = "×".join(map(str, shapes[0])) if shapes else "no output in the last run"
            self.host.show_error(
                f"Grad-CAM needs a module with spatial output (C, H, W); {path or 'the model'} gives {shape}."
            )
            return False
        self.path = path
        wanted = []
        if not registry.has(path, "forward"):
            wanted.append("forward")
        if not any(registry.has(path, kind) for kind in OUTPUT_GRADIENT_KINDS):
            wanted.append("tensor")  # the Grad column
        ticked = [kind for _, kind, _ in workspace.set_ticked([(path, kind) for kind in wanted], True)]
        self._tick_note = ""
        if ticked:
            what = " and ".join(KIND_LABELS[k].lower() for k in ticked)
            self._tick_note = f"Grad-CAM needs the activations and the gradients of {path}: ticked its {what}."
            self.host.show_status(f"Grad-CAM of {path}: ticked its {what}.", 6000)
        self.note.setText(self._tick_note)
        self._sync_modules()
        outcome = workspace.last
        if not ticked and outcome is not None:
            self._compute(outcome)
        else:
            self.title.setText(f"Grad-CAM of {path}: waiting for the run…")
        self.host.show_dock(DOCK_ID)
        return True

    # ---- the workspace's signals ----------------------------------------------------------------------------
    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        registry = self.workspace.registry
        if self.path is not None and (registry is None or self.path not in registry.paths):
            self.path = None
            self.cam = None
            self.image_item.clear()
            self.note.setText("")
            self.title.setText(PROMPT)
        elif self.path is not None:  # the old model's map goes; the new model's comes with its first run
            self.cam = None
            self.image_item.clear()
            self.title.setText(f"Grad-CAM of {self.path}: waiting for the run…")

    def _on_target_changed(self, _target: object) -> None:
        if self.path is not None:
            self.title.setText(f"Grad-CAM of {self.path}: waiting for the run…")

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        self._sync_modules(outcome)
        if self.path is not None:
            self._compute(outcome)

    # ---- the map --------------------------------------------------------------------------------------------
    def _compute(self, outcome: RunOutcome) -> None:
        path = self.path
        if path is None:
            return
        result = outcome.result
        try:
            cam = run_grad_cam(result, path)
        except HookscopeError as error:
            self.cam = None
            self.image_item.clear()
            self.title.setText(f"Grad-CAM of {path}: {error}")
            return
        self.cam, self._input = cam, outcome.input_display
        target = result.target
        loaded = self.workspace.loaded
        categories = loaded.categories if loaded is not None else None
        # A classifier's words name the class by index only; a segmentation model's name it already, and a
        # detector's index is a box's, not a class's.
        if (
            result.task == "classification"
            and result.target_index is not None
            and categories
            and 0 <= result.target_index < len(categories)
        ):
            target += f": {categories[result.target_index]}"
        self.title.setText(f"Grad-CAM of {path} for the {target}")
        zero = float(cam.max(initial=0.0)) == 0.0
        notes = (
            self._tick_note,
            "The map is zero everywhere: the channels' weighted sum is negative (or the same) at every position, so "
            "no place stands out."
            if zero
            else "",
        )
        self.note.setText(" ".join(t for t in notes if t))
        self._redraw()
        self._box.autoRange(padding=0.01)

    def _redraw(self, *_: object) -> None:
        if self.cam is None or self._input is None or self.cam.shape != self._input.shape[:2]:
            return
        blended = overlay(self._input, self.cam, self.opacity.value() / 100.0, colormap_lut(CAM_COLORMAP))
        self.image_item.setImage(blended, autoLevels=False, levels=(0, 255))

    def _sync_modules(self, outcome: RunOutcome | None = None) -> None:
        """The module box lists every module the last run can give a Grad-CAM for, and the current one."""
        outcome = outcome or self.workspace.last
        paths: list[str] = []
        if outcome is not None:
            result = outcome.result
            grads = {r.path for r in result.records if r.kind in OUTPUT_GRADIENT_KINDS and not r.call and not r.leaf}
            paths = [
                r.path
                for r in result.of_kind("forward")
                if not r.call and not r.leaf and r.path in grads and has_spatial_output(tuple(r.tensor.shape))
            ]
        if self.path is not None and self.path not in paths:
            paths.append(self.path)
        self.module_box.blockSignals(True)
        self.module_box.clear()
        self.module_box.addItems(list(dict.fromkeys(paths)))
        if self.path is not None:
            self.module_box.setCurrentText(self.path)
        self.module_box.blockSignals(False)
