"""The "pretrained weights are missing" banner's Download button: a background download with a progress bar.

The download runs on a worker of its own (a superqt ``FunctionWorker``), not on the window's job runner, so runs
on the untrained model go on meanwhile. ``app.core.weights.download_weights`` does the work (verified,
all-or-nothing); progress arrives by signal from the worker thread, Cancel sets a flag it polls between chunks.
On success the model is loaded again with its weights (the ticks carry over) and runs; on failure the one
sentence from the engine is shown and the untrained model stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torchvision
from PySide6.QtCore import QObject, QThreadPool, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton
from superqt.utils import FunctionWorker, create_worker

from app.core.weights import DownloadCancelled, download_weights, is_cached

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow


def weights_size_mb(name: str) -> float | None:
    """The size torchvision announces for ``name``'s default weights file, in MB (None when unknown)."""
    try:
        size = torchvision.models.get_model_weights(name).DEFAULT.meta.get("_file_size")
    except (ValueError, KeyError, AttributeError):
        return None
    return float(size) if isinstance(size, (int, float)) else None


def transfer_text(done: int, total: int | None, speed: float) -> str:
    """``12.3 of 44.7 MB · 5.1 MB/s``"""
    amount = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
    return f"{amount} · {speed / 1e6:.1f} MB/s"


class WeightsDownload(QObject):
    """The Download row under the window's notice, and the download it starts."""

    progressed = Signal(int, object, float)  # bytes done, bytes total (None: unknown), bytes per second
    finished = Signal(str, str)  # "done", "cancelled" or "failed"; the message shown

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window
        self._worker: FunctionWorker | None = None
        self._cancel = False
        self._name = ""
        self.last_message = ""

        self.bar = QFrame()
        self.bar.setObjectName("downloadBar")
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip("Download the pretrained weights into the torch hub cache, then use them")
        self.download_button.clicked.connect(self.start)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFixedWidth(260)
        self.progress.setFormat("%p%")
        self.progress.setVisible(False)
        self.transfer = QLabel("")
        self.transfer.setObjectName("muted")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download; nothing is saved")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setVisible(False)
        row = QHBoxLayout(self.bar)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.download_button)
        row.addWidget(self.progress)
        row.addWidget(self.transfer)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        self.bar.setVisible(False)
        central = window.centralWidget()
        layout = central.layout() if central is not None else None
        if layout is not None:
            layout.insertWidget(layout.indexOf(window.notice) + 1, self.bar)

        self.progressed.connect(self._on_progress)
        window.model_ready.connect(self._on_model_ready)

    # ---- state --------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._worker is not None

    def offered_for(self) -> str | None:
        """The model whose weights the banner offers to download, or None."""
        loaded = self._window.loaded
        if loaded is None or loaded.pretrained or loaded.source != "catalogue":
            return None
        if self._window.weights_box.currentData() != "default":
            return None
        try:
            return None if is_cached(loaded.name) else loaded.name
        except Exception:  # a model name the engine does not know: nothing to offer
            return None

    def _on_model_ready(self) -> None:
        if self.running:
            return
        name = self.offered_for()
        self.bar.setVisible(name is not None)
        if name is not None:
            self._show_button(name, "Download")

    def _show_button(self, name: str, verb: str) -> None:
        size = weights_size_mb(name)
        self.download_button.setText(f"{verb} ({size:.0f} MB)" if size else verb)
        self.download_button.setVisible(True)
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)
        self.transfer.setText(f"{name}'s pretrained weights from torchvision")

    # ---- the download ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start downloading the current model's weights (no-op while one runs or when none is offered)."""
        name = self.offered_for()
        if self.running or name is None:
            return
        self._name, self._cancel = name, False
        self.download_button.setVisible(False)
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.transfer.setText("connecting…")
        worker = create_worker(download_weights, name, progress=self.progressed.emit,
                               cancelled=lambda: self._cancel, _start_thread=False, _ignore_errors=True)
        worker.returned.connect(self._on_done)
        worker.errored.connect(self._on_error)
        self._worker = worker
        QThreadPool.globalInstance().start(worker)
        self._window.statusBar().showMessage(f"Downloading {name}'s weights…", 5000)

    def cancel(self) -> None:
        if self.running:
            self._cancel = True
            self.cancel_button.setEnabled(False)
            self.transfer.setText("cancelling…")

    def _on_progress(self, done: int, total: object, speed: float) -> None:
        if not self.running:
            return
        if isinstance(total, int) and total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(min(1000, done * 1000 // total))
        else:
            self.progress.setRange(0, 0)  # no length announced: a busy bar
        self.transfer.setText(transfer_text(done, total if isinstance(total, int) else None, speed))

    def _on_done(self, path: object) -> None:
        self._worker = None
        name = self._name
        message = f"Downloaded {name}'s weights to {path}."
        self.last_message = message
        self.cancel_button.setVisible(False)
        self.transfer.setText(message)
        self._window.statusBar().showMessage(message, 8000)
        loaded = self._window.loaded
        if loaded is not None and loaded.name == name and loaded.source == "catalogue":
            self._window.set_model(name, "default")  # with its weights now; the ticks carry over, a run follows
        else:
            self.bar.setVisible(False)
        self.finished.emit("done", message)

    def _on_error(self, error: BaseException) -> None:
        self._worker = None
        cancelled = isinstance(error, DownloadCancelled)
        message = str(error) if isinstance(error, Exception) else repr(error)
        if cancelled:
            message = f"The download of {self._name}'s weights was cancelled; nothing was saved."
        elif not message.endswith("."):
            message += "."
        self.last_message = message
        self._window.show_error(message, dialog=False)
        loaded = self._window.loaded
        if not cancelled and loaded is not None and not loaded.pretrained:
            self._window.notice.setText(f"{message} Still showing the untrained {loaded.name} (random weights).")
            self._window.notice.setVisible(True)
        if self.offered_for() == self._name:
            self._show_button(self._name, "Download" if cancelled else "Try again")
            if not cancelled:
                self.transfer.setText("")
        else:
            self.bar.setVisible(False)
        self.finished.emit("cancelled" if cancelled else "failed", message)

    def stop(self) -> None:
        """Called by the closing window before it waits for its workers, so a download ends first.

        (A Python event filter on the window did this before; it ran Python on every window event and was seen
        to deadlock against a worker thread holding the GIL.)"""
        self._cancel = True
