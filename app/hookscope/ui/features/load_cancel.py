"""Cancel a model load: a row above the panels while a load takes long, and File > Cancel loading.

A trusted ``model.py`` whose ``build()`` never returns (or just a big model on a slow disk) must not take the window
hostage. Cancel is ``Workspace.cancel_load``: the model, hooks and results on screen stay, at once; the load's
thread finishes in the background and whatever it returns is dropped. The row appears only when a load lasts longer
than ``SHOW_AFTER_MS``, so quick model switches do not make the panels jump.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import Host
from hookscope.ui.state.workspace import Workspace

FEATURE_ID = "load_cancel"
CANCEL_ACTION = "file.cancel_load"
SHOW_AFTER_MS = 400
TICK_MS = 1000


class LoadCancelFeature:
    """The Cancel row (label, elapsed seconds, Cancel button) and the Cancel loading action."""

    id = FEATURE_ID

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self._since = 0.0
        self.row = QWidget()
        self.row.setObjectName("loadCancelRow")
        self.label = QLabel("")
        self.label.setObjectName("notice")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop waiting for this model and keep the one on screen")
        self.cancel_button.clicked.connect(self.cancel)
        layout = QHBoxLayout(self.row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.cancel_button)
        self.row.setVisible(False)
        host.add_notice_row(self.row)
        host.add_actions([
            ActionSpec(CANCEL_ACTION, "Cancel loading", "File", self.cancel, group=30, order=90,
                       tooltip="Stop loading the model being opened; the model on screen stays"),
        ])  # fmt: skip
        self._show_timer = QTimer(self.row)
        self._show_timer.setSingleShot(True)
        self._show_timer.timeout.connect(self._sync)
        self._tick = QTimer(self.row)
        self._tick.setInterval(TICK_MS)
        self._tick.timeout.connect(self._sync)
        workspace.model_loading.connect(self._on_loading)
        workspace.busy_changed.connect(lambda *_: self._sync())
        workspace.model_changed.connect(lambda *_: self._sync())
        workspace.load_cancelled.connect(lambda *_: self._sync())
        workspace.failed.connect(lambda *_: self._sync())
        workspace.on_shutdown(self.shutdown)

    @property
    def showing(self) -> bool:
        return not self.row.isHidden()

    def cancel(self) -> bool:
        """Give up on the load in flight; the model on screen stays. Returns whether one was in flight."""
        if not self.workspace.cancel_load():
            self.host.show_status("No model is being loaded.", 3000)
            return False
        self._sync()
        return True

    def _on_loading(self, _what: str) -> None:
        self._since = time.monotonic()
        self._show_timer.start(SHOW_AFTER_MS)

    def _sync(self) -> None:
        loading = self.workspace.loading
        if not loading:
            self._show_timer.stop()
            self._tick.stop()
            self.row.setVisible(False)
            return
        if self._show_timer.isActive():
            return  # a quick load may still be over before the row would show
        seconds = time.monotonic() - self._since
        what = self.workspace.loading_what or "the model"
        keeping = self.workspace.loaded.display_name if self.workspace.loaded is not None else None
        text = f"Loading {what}… ({seconds:.0f} s)"
        if keeping:
            text += f" Cancel keeps {keeping}."
        self.label.setText(text)
        self.row.setVisible(True)
        if not self._tick.isActive():
            self._tick.start()

    def shutdown(self) -> None:
        self._show_timer.stop()
        self._tick.stop()
