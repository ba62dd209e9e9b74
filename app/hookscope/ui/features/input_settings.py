"""What the model is fed, under the input image, and the Input… button that changes it.

Catalogue models use their weights' own transforms; a model opened from a file starts from a guess
(``guess_preprocess``). Either way the user may set the input size, mean, std and 1 or 3 channels
(``app/hookscope/ui/dialogs/input_dialog.py``); the change goes through ``Workspace.set_preprocess``, holds for the loaded
model until another model loads, and the image runs again.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from hookscope.core.models.images import Preprocess
from hookscope.core.models.inputs import describe_requirements, first_conv_channels
from hookscope.core.models.loaded import LoadedModel
from hookscope.ui.dialogs.input_dialog import ask_input
from hookscope.ui.host import Host
from hookscope.ui.state.requests import LoadOutcome
from hookscope.ui.state.workspace import Workspace

# sources whose preprocessing comes with the weights (a Hub model's: its repo's image processor)
KNOWN_TRANSFORMS = ("catalogue", "timm", "state_dict", "hub")


class InputSettingsFeature:
    """The requirements line and the Input… button under the input image."""

    id = "input_settings"

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.own: Preprocess | None = None  # what the loaded model came with ("Model's own" in the dialog)
        self.requirements = QLabel("")
        self.requirements.setObjectName("muted")
        self.requirements.setWordWrap(True)
        self.requirements.setToolTip("What the model is fed: how the image is resized, centre-cropped and normalised")
        self.button = QPushButton("Input…")
        self.button.setToolTip("Input size, mean, std and channels for this model")
        self.button.clicked.connect(self.edit)
        self.button.setEnabled(False)
        self.row = QWidget()
        self.row.setObjectName("inputRequirements")
        # The sentence over the whole width (a narrow dock wraps it), the button under it: side by side, a 240 px
        # dock left the sentence a column one word wide.
        layout = QVBoxLayout(self.row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.requirements)
        buttons = QHBoxLayout()
        buttons.addWidget(self.button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        host.add_input_row(self.row)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.preprocess_changed.connect(self._on_preprocess_changed)
        if workspace.loaded is not None:
            self._show_model(workspace.loaded)

    # ---- the workspace's signals ---------------------------------------------------------------------------
    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        self._show_model(outcome.loaded)

    def _on_preprocess_changed(self, preprocess: Preprocess) -> None:
        if self.workspace.loaded is not None:
            self._update_label(self.workspace.loaded)
        self.host.show_status(f"Model input: {describe_requirements(preprocess)}", 6000)

    def _show_model(self, loaded: LoadedModel) -> None:
        self.own = loaded.preprocess
        self.button.setEnabled(True)
        self._update_label(loaded)

    def _update_label(self, loaded: LoadedModel) -> None:
        if loaded.preprocess != self.own:
            origin = "set with Input…"
        elif loaded.source == "hub":
            origin = "the repo's image processor"
        elif loaded.source in KNOWN_TRANSFORMS:
            origin = "the weights' own transforms"
        elif loaded.preprocess_origin:  # a model held in Python, its preprocessing given
            origin = loaded.preprocess_origin
        else:
            origin = "a guess for a model file: check it with Input…"
        self.requirements.setText(f"Model input: {describe_requirements(loaded.preprocess)} ({origin})")
        known = loaded.source in KNOWN_TRANSFORMS or bool(loaded.preprocess_origin)
        self.button.setText("Input…" if known else "Input… (guessed)")

    # ---- the dialog ----------------------------------------------------------------------------------------
    def ask_input(self, loaded: LoadedModel) -> Preprocess | None:
        """The dialog; returns the new preprocessing, or None when cancelled (tests replace this)."""
        own = self.own if self.own is not None else loaded.preprocess
        return ask_input(loaded.preprocess, own, first_conv_channels(loaded.module), self.host.dialog_parent())

    def edit(self) -> None:
        """The Input… button: ask, then feed the model what was set (the image runs again)."""
        loaded = self.workspace.loaded
        if loaded is None:
            return
        preprocess = self.ask_input(loaded)
        if preprocess is not None:
            self.workspace.set_preprocess(preprocess)
