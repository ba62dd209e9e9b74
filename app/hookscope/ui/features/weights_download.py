"""The notice above the panels, and the Download button when the loaded model's pretrained weights are missing.

One plain sentence says what is shown ("Showing ResNet-18 with random weights: its pretrained weights are not on
this computer.") next to **Download (45 MB)**; where the weights are kept, and the environment variables that move
the cache or the download, are behind a Details toggle. Any other notice of the loaded model (a non-strict load,
timm's missing weights) takes the same row, without a button.

The download runs as a task beside the runs (``Workspace.submit``, not exclusive: it touches no model), so runs on
the untrained model go on meanwhile. ``hookscope.core.models.weights.download_weights`` does the work (verified,
all-or-nothing); progress arrives by signal from the worker thread, Cancel sets a flag it polls between chunks.
On success the model loads again with its weights (``Workspace.set_model(name, "default")``: the ticks carry
over, a run follows); on failure the engine's sentence is shown in Details and the untrained model stays.

timm's weights come from the Hugging Face Hub (``hub_models.fetch_timm_weights``): the same button and progress, but
a cancelled download keeps the part that came, for the next one to resume.

A model from the Hugging Face Hub typed into the model box (``open_hub``) loads on the workspace's worker, as any
model switch, after its files are fetched into the Hub cache: the same row shows the download's progress, and its
Cancel (or the window's Cancel of the load) stops it at the next chunk, the part that came kept for the next try.
"""

from __future__ import annotations

import re
from functools import partial
from typing import TypeGuard

import torchvision
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QToolButton, QVBoxLayout

from hookscope.core.common.errors import DownloadCancelled
from hookscope.core.models import hub as hub_models
from hookscope.core.models.catalogue import default_weights_file
from hookscope.core.models.loaded import TIMM_PREFIX, LoadedModel
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.models.weights import WEIGHTS_URL_ENV, checkpoints_dir, download_weights, is_cached
from hookscope.ui.host import Host
from hookscope.ui.state.requests import LoadOutcome
from hookscope.ui.state.tasks import Task
from hookscope.ui.state.workspace import RunFailure, Workspace

# Catalogue names in the words of the papers: "resnet18" -> "ResNet-18", "squeezenet1_1" -> "SqueezeNet 1.1".
_FAMILIES = {
    "alexnet": "AlexNet", "convnext": "ConvNeXt", "densenet": "DenseNet", "efficientnet": "EfficientNet",
    "googlenet": "GoogLeNet", "inception": "Inception", "maxvit": "MaxViT", "mnasnet": "MNASNet",
    "mobilenet": "MobileNet", "regnet": "RegNet", "resnet": "ResNet", "resnext": "ResNeXt", "shufflenet": "ShuffleNet",
    "squeezenet": "SqueezeNet", "swin": "Swin", "vgg": "VGG", "vit": "ViT", "wide_resnet": "Wide ResNet",
}  # fmt: skip
_VERSIONED = ("squeezenet", "mnasnet")  # the number is a version or a width: "SqueezeNet 1.1", "MNASNet 0.75"
_WORDS = ("small", "large", "tiny", "base")


def model_title(name: str) -> str:
    """``name`` as people write it ("ResNet-18", "ViT-B/16", "MobileNet V3 Small"); other names unchanged."""
    match = re.fullmatch(r"(wide_resnet|[a-z]+)(\d+)?(?:_([a-z0-9_]+))?", name)
    if match is None or match.group(1) not in _FAMILIES:
        return name
    stem, number, rest = match.groups()
    parts = rest.split("_") if rest else []
    if stem == "vit" and len(parts) == 2:
        return f"ViT-{parts[0].upper()}/{parts[1]}"
    merged: list[str] = []
    for part in parts:  # "x1", "0" -> "x1.0"; "1", "6gf" -> "1.6gf"
        if merged and merged[-1][-1:].isdigit() and part[:1].isdigit():
            merged[-1] += "." + part
        else:
            merged.append(part)
    title = _FAMILIES[stem]
    if number and stem in _VERSIONED:
        title += f" {number}" + (f".{merged.pop(0)}" if merged and merged[0].isdigit() else "")
    elif number:
        title += f"-{number}" + (f"-{merged.pop()}" if merged and merged[-1].isdigit() else "")
    words = [
        w.title() if w in _WORDS else w.upper() if re.fullmatch(r"[a-z]{1,2}\d?|v\d|[\d.]+[mg]f", w) else w
        for w in merged
    ]
    return " ".join([title, *words])


def weights_size_mb(name: str) -> float | None:
    """The size torchvision announces for ``name``'s default weights file, in MB (None when unknown)."""
    try:
        size = torchvision.models.get_model_weights(name).DEFAULT.meta.get("_file_size")
    except (ValueError, KeyError, AttributeError, TypeError):
        return None
    return float(size) if isinstance(size, (int, float)) else None


def transfer_text(done: int, total: int | None, speed: float) -> str:
    """``12.3 of 44.7 MB · 5.1 MB/s``"""
    amount = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
    return f"{amount} · {speed / 1e6:.1f} MB/s"


def missing_weights(loaded: LoadedModel | None, asked: str) -> TypeGuard[LoadedModel]:
    """Whether ``loaded`` runs with random weights although its pretrained ones were asked for (``asked``)."""
    return (
        loaded is not None and asked == "default" and loaded.source in ("catalogue", "timm") and not loaded.pretrained
    )


def cache_details(name: str) -> str:
    """Where torchvision keeps ``name``'s weights, and the environment variables that move the cache or the
    download (the Details of the notice)."""
    file = default_weights_file(name)
    where = f"torchvision keeps {name}'s pretrained weights as {file.name} in {checkpoints_dir()}." if file else ""
    return (
        f"{where} Set TORCH_HOME to use another cache folder, or {WEIGHTS_URL_ENV} to download from a mirror; "
        "a copy of the file put into that folder is used too."
    ).strip()


class WeightsDownloadFeature(QObject):
    """The notice row above the panels: one sentence, the Download button with its progress, and Details."""

    id = "weights_download"
    progressed = Signal(
        object, object, float
    )  # bytes done, bytes total (None: unknown), bytes per second (object: over 2 GB)
    finished = Signal(str, str)  # "done", "cancelled" or "failed"; the message shown

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__()
        self.workspace = workspace
        self.host = host
        self._task: Task | None = None  # the download in progress
        self._cancel = False
        self._name = ""
        self.last_message = ""
        self._hub_load = ""  # the hf: name whose files are being fetched for a load, while it is
        self._hub_cancel = False

        self.row = QFrame()
        self.row.setObjectName("notice")
        self.sentence = QLabel("")
        self.sentence.setObjectName("noticeText")
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip("Download the pretrained weights into the torch hub cache, then use them")
        self.download_button.clicked.connect(self.start)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFixedWidth(200)
        self.progress.setFormat("%p%")
        self.transfer = QLabel("")
        self.transfer.setObjectName("muted")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download; nothing is saved")
        self.cancel_button.clicked.connect(self.cancel)
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setToolTip("Where the weights are kept, and how to change it")
        self.details = QLabel("")
        self.details.setObjectName("muted")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button.toggled.connect(self.details.setVisible)
        line = QHBoxLayout()
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(self.sentence, 1)
        for widget in (self.download_button, self.progress, self.transfer, self.cancel_button, self.details_button):
            line.addWidget(widget)
        layout = QVBoxLayout(self.row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(line)
        layout.addWidget(self.details)
        self._show_idle()
        host.add_notice_row(self.row)

        self.progressed.connect(self._on_progress)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.failed.connect(self._on_failed)
        workspace.load_cancelled.connect(self._on_load_cancelled)
        workspace.hub_model_asked.connect(self.open_hub)
        workspace.on_shutdown(self.shutdown)
        self._show_notice()

    # ---- state --------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None

    def offered_for(self) -> str | None:
        """The model whose weights the Download button offers, or None."""
        loaded = self.workspace.loaded
        if not missing_weights(loaded, self.workspace.weights):
            return None
        if loaded.source == "timm":  # timm's weights on the Hugging Face Hub: fetched into its cache
            arch = loaded.name.removeprefix(TIMM_PREFIX)
            try:
                return loaded.name if hub_models.timm_hub_file(arch) is not None else None
            except Exception:  # noqa: BLE001  (an arch timm does not know: nothing to offer)
                return None
        if loaded.source != "catalogue":
            return None
        try:
            return None if is_cached(loaded.name) else loaded.name
        except Exception:  # a model name the engine does not know: nothing to offer
            return None

    # ---- the workspace's signals ---------------------------------------------------------------------------
    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        self._hub_load = ""
        if not self.running:
            self._show_notice()

    def _on_failed(self, failure: RunFailure) -> None:
        if failure.load:
            self._hub_load = ""
        if failure.load and not self.running:
            self._show_notice()  # the previous model stays: so does its notice

    def _show_notice(self) -> None:
        """The row for the loaded model: the missing weights (with Download), another notice, or nothing."""
        loaded = self.workspace.loaded
        self._show_idle()
        if missing_weights(loaded, self.workspace.weights):
            title = model_title(loaded.name.removeprefix(TIMM_PREFIX))
            self.sentence.setText(
                f"Showing {title} with random weights: its pretrained weights are not on this computer."
            )
            name = self.offered_for()
            if name is not None and name.startswith(TIMM_PREFIX):
                self._show_button(name, "Download")
                self._set_details(
                    f"timm's pretrained weights come from the Hugging Face Hub into its cache "
                    f"({hub_models.hub_cache()}); HF_HOME moves it, HF_ENDPOINT names a mirror."
                )
            elif name is not None:
                self._show_button(name, "Download")
                self._set_details(cache_details(name))
            else:  # timm fills its own cache; the engine's notice says where
                self._set_details(loaded.notice)
            self.row.setVisible(True)
        elif loaded is not None and loaded.notice:
            self.sentence.setText(loaded.notice)
            self.row.setVisible(True)
        else:
            self.row.setVisible(False)

    def _show_idle(self) -> None:
        for widget in (self.download_button, self.progress, self.transfer, self.cancel_button):
            widget.setVisible(False)
        self._set_details("")

    def _set_details(self, text: str) -> None:
        self.details.setText(text)
        self.details_button.setVisible(bool(text))
        self.details.setVisible(bool(text) and self.details_button.isChecked())

    def _show_button(self, name: str, verb: str) -> None:
        size = weights_size_mb(name)
        self.download_button.setText(f"{verb} ({size:.0f} MB)" if size else verb)
        self.download_button.setVisible(True)
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)
        self.transfer.setVisible(False)

    # ---- the download ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start downloading the loaded model's weights (no-op while one runs or when none is offered)."""
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
        self.transfer.setVisible(True)
        if name.startswith(TIMM_PREFIX):
            work = partial(hub_models.fetch_timm_weights, name.removeprefix(TIMM_PREFIX),
                           progress=self.progressed.emit, cancelled=lambda: self._cancel)  # fmt: skip
        else:
            work = partial(download_weights, name, progress=self.progressed.emit, cancelled=lambda: self._cancel)
        self._task = self.workspace.submit(f"download {name}", work)
        self._task.finished.connect(self._on_done)
        self._task.failed.connect(self._on_error)
        self.host.show_status(f"Downloading {name}'s weights…", 5000)

    # ---- a model from the Hugging Face Hub ----------------------------------------------------------------------
    def open_hub(self, name: str) -> None:
        """Load ``hf:ORG/NAME`` on the workspace's worker, its files fetched first with progress in this row."""
        if name == self._hub_load:  # already on its way (Enter in the box comes as two signals)
            return
        weights = self.workspace.weights if self.workspace.weights in ("default", "none") else "default"
        self.workspace.set_weights(weights, reload=False)  # the Hub model's load below uses them
        self._hub_load, self._hub_cancel = name, False
        self._show_idle()
        self.sentence.setText(f"Opening {name} from the Hugging Face Hub…")
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.transfer.setText("connecting…")
        self.transfer.setVisible(True)
        self.row.setVisible(True)
        progressed, cancel = self.progressed.emit, lambda: self._hub_cancel

        def work() -> LoadedModel:  # on the workspace's worker
            hub_models.fetch_model(name, weights, progress=progressed, cancelled=cancel)
            return open_model(ModelSource(name, weights))

        self.workspace.load_model_with(name, work)

    def _on_load_cancelled(self, _what: str) -> None:
        if self._hub_load:
            self._hub_cancel = True  # the fetch stops at its next chunk; what came stays for the next try
            self._hub_load = ""
            self._show_notice()

    def cancel(self) -> None:
        if self._hub_load:
            self._hub_cancel = True
            self.workspace.cancel_load()
            return
        if self.running:
            self._cancel = True
            self.cancel_button.setEnabled(False)
            self.transfer.setText("cancelling…")

    def _on_progress(self, done: int, total: object, speed: float) -> None:
        if not self.running and not self._hub_load:
            return
        if isinstance(total, int) and total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(min(1000, done * 1000 // total))
        else:
            self.progress.setRange(0, 0)  # no length announced: a busy bar
        self.transfer.setText(transfer_text(done, total if isinstance(total, int) else None, speed))

    def _on_done(self, path: object) -> None:
        self._task = None
        name = self._name
        message = f"Downloaded {name}'s weights to {path}."
        self.last_message = message
        self.cancel_button.setVisible(False)
        self.transfer.setText("done: loading them…")
        self.host.show_status(message, 8000)
        loaded = self.workspace.loaded
        if loaded is not None and loaded.name == name and loaded.source in ("catalogue", "timm"):
            self.workspace.set_model(name, "default")  # with its weights now; the ticks carry over, a run follows
        else:
            self._show_notice()
        self.finished.emit("done", message)

    def _on_error(self, error: object) -> None:
        self._task = None
        cancelled = isinstance(error, DownloadCancelled)
        message = str(error) if isinstance(error, Exception) else repr(error)
        if cancelled and self._name.startswith(TIMM_PREFIX):  # from the Hub: the part that came is kept
            message = f"The download of {self._name}'s weights was cancelled; the next download resumes it."
        elif cancelled:
            message = f"The download of {self._name}'s weights was cancelled; nothing was saved."
        elif not message.endswith("."):
            message += "."
        self.last_message = message
        self.host.show_error(message, dialog=False)
        self._show_notice()
        if not cancelled and self.offered_for() == self._name:
            title = model_title(self._name)
            self.sentence.setText(
                f"The download of {title}'s weights failed: still showing {title} with random weights."
            )
            self._show_button(self._name, "Try again")
            self._set_details(message)
            self.details_button.setChecked(True)  # why it failed (offline, a wrong mirror) is the next question
        self.finished.emit("cancelled" if cancelled else "failed", message)

    def shutdown(self) -> None:
        """The closing window calls this (``Workspace.on_shutdown``) before it waits for the tasks, so a download
        ends first (it stops at its next chunk; nothing is saved)."""
        self._cancel = True
        self._hub_cancel = True
