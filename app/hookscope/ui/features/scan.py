"""What excites a channel, in the window: File ▸ Scan a folder… scans every module whose activations are ticked over
a folder of images (``hookscope.core.scan.run``); afterwards, the channel the Channel view shows gets its top images from the
whole folder, in a dock under it. Click one to open that image as image A.

The scan never touches the live model the workspace runs. A deep copy of the model, without any of its hooks (the
registry's ticks and the interventions' edits), is taken by a short exclusive task (``Workspace.submit``), so it is
never taken while a run uses the model (the task waits for the run in flight, and a run asked for meanwhile waits
for it); the scan itself then runs on that copy in a task beside the runs, for as long as it takes, while the
window goes on running images on the live model. The copy costs the model's memory once more, for as long as the
scan's results are shown: it is also what computes a channel's receptive-field boxes when the channel is first
shown (a scan in the window skips the box phase: one gradient pass per top-k entry of every channel would take
minutes; one channel's nine take a moment). Progress and Cancel are in the dock; a cancelled scan keeps the previous
results. File ▸ Open a scan… shows a scan.json made by ``hookscope scan`` (on this machine or a Ray cluster).

File ▸ Save session… writes the scan shown beside the session file (``name.hookscope.scan/scan.json``, noted in the
session under ``parts``/``scan``); Open session shows it again (a missing or damaged one is a problem line).

While a scan is shown, the panel of a scanned module offers the order "by dataset mean": its channels by their mean
over the whole folder (the scan's statistics), highest first (the workspace's ``channel_orders``; runs carry it).
"""

from __future__ import annotations

import html
import os
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PySide6.QtCore import QObject, QSize, Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import find_images
from hookscope.core.pictures.panels import PanelPicture
from hookscope.core.pictures.views import sort_order
from hookscope.core.scan.boxes import channel_boxes
from hookscope.core.scan.model_copy import copy_without_hooks
from hookscope.core.scan.results import (
    SCAN_FILE,
    PatchReader,
    ScanResult,
    ScanSettings,
    TopImage,
    read_scan,
    shown_name,
    write_scan,
)
from hookscope.core.scan.run import ScanProgress
from hookscope.core.scan.run import scan_images as run_scan_images
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.dialogs.folders import last_folder, remember_folder
from hookscope.ui.host import DockSpec, Host
from hookscope.ui.state.requests import LoadOutcome
from hookscope.ui.state.tasks import Task
from hookscope.ui.state.workspace import Workspace, error_text
from hookscope.ui.widgets.disposal import dispose

FEATURE_ID = "scan"
DOCK_ID = "scan"
TOP = 9  # images per channel
BATCH_SIZE = 16
SCANNED_FOLDER, SCAN_FILE_FOLDER = "scanned", "scans"  # where the last folder scanned, the last scan file, were
THUMB = 72  # pixels of a patch in the dock
PROMPT = (
    "File ▸ Scan a folder… finds, for each ticked module (Act), the images of a folder that excite each channel most."
)


class ScanFeature(QObject):
    """The dock: what the scan is doing (progress, Cancel), then the shown channel's top images and statistics."""

    id = FEATURE_ID
    progressed = Signal(object)  # ScanProgress (emitted by the scan's worker thread)
    finished = Signal(str)  # "done", "cancelled" or "failed", once a scan has ended and the dock says so
    patches_shown = Signal(str, int)  # module path and channel, once its top images are in the dock

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__(workspace)
        self.workspace = workspace
        self.host = host
        self.result: ScanResult | None = None
        self.entries: list[TopImage] = []  # the top images in the dock, best first
        self._scan_model: LoadedModel | None = None  # the copy the result was made with: it computes boxes
        self._request: tuple[str, tuple[str, ...], LoadedModel] | None = None  # folder, modules, the live model
        self._copy_task: Task | None = None  # the copy of the model, submitted
        self._copy_job: Task | None = None  # ... and started (it waits for the runs first)
        self._scan: Task | None = None
        self._patches: Task | None = None
        self._wanted: tuple[str, int] | None = None  # the channel the Channel view shows
        self._cache: dict[tuple[str, int], tuple[list[TopImage], list[np.ndarray]]] = {}
        self._cancel = False
        self._closing = False
        self._build()
        self.dock = host.add_dock(DockSpec(DOCK_ID, "Top images", area="bottom", below="channel", visible=False, scroll=False),
                                  self.widget)  # fmt: skip
        host.add_actions([
            ActionSpec("file.scan_folder", "Scan a folder…", "File", self.scan_dialog, group=50, order=10,
                       tooltip="The images of a folder that excite each channel of the ticked modules most"),
            ActionSpec("file.open_scan", "Open a scan…", "File", self.open_dialog, group=50, order=20,
                       tooltip="Show a scan.json written by 'hookscope scan'"),
        ])  # fmt: skip
        host.add_channel_listener(self._on_channel_shown)
        self.progressed.connect(self._on_progress)
        workspace.model_changed.connect(self._on_model_changed)
        workspace.on_shutdown(self.shutdown)
        workspace.add_session_part("scan", self.save_with_session, self.restore_from_session)

    # ---- the dock ------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.widget = QWidget()
        self.title = QLabel(PROMPT)
        self.title.setObjectName("panelTitle")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.PlainText)  # a folder named <b>… is shown as named
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the scan (the previous results stay)")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setVisible(False)
        self.save_button = QPushButton("Save…")
        self.save_button.setToolTip(f"Write the scan as {SCAN_FILE} (hookscope scan's format)")
        self.save_button.clicked.connect(self.save_dialog)
        self.save_button.setEnabled(False)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.progress)
        top.addWidget(self.cancel_button)
        top.addWidget(self.save_button)
        self.strip = QHBoxLayout()
        self._strip_buttons: list[QToolButton] = []
        self.strip.setSpacing(4)
        self.strip.addStretch(1)
        self.stats = QLabel("")
        self.stats.setObjectName("muted")
        self.stats.setWordWrap(True)
        self.stats.setTextFormat(Qt.TextFormat.PlainText)
        layout = QVBoxLayout(self.widget)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        # The patches in a strip that scrolls sideways: nine side by side need about 770 px, and as a plain row they
        # widened the window past a 1024 px screen.
        strip = QWidget()
        strip.setLayout(self.strip)
        self.strip.setContentsMargins(0, 0, 0, 0)
        strip_area = QScrollArea()
        strip_area.setWidget(strip)
        strip_area.setWidgetResizable(True)
        strip_area.setFrameShape(QScrollArea.Shape.NoFrame)
        strip_area.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        strip_area.setFixedHeight(THUMB + 12 + strip_area.horizontalScrollBar().sizeHint().height())
        layout.addWidget(strip_area)
        layout.addWidget(self.stats)
        layout.addStretch(1)
        # Not in a scroll area: the dock keeps the height of a row of patches, so none is ever cut off.
        self.widget.setMinimumHeight(THUMB + 100)

    @property
    def running(self) -> bool:
        return self._request is not None

    def ticked_modules(self) -> tuple[str, ...]:
        """The modules whose activations are ticked, in the model's order."""
        ticked = {path for path, kind in self.workspace.ticked_pairs() if kind == "forward"}
        return tuple(node.path for node in self.workspace.nodes if node.path in ticked)

    # ---- scanning ------------------------------------------------------------------------------------------------
    def scan_dialog(self) -> None:
        remembers = self.host.remembers
        folder = QFileDialog.getExistingDirectory(
            self.host.dialog_parent(), "Scan a folder of images", last_folder(SCANNED_FOLDER, remembers)
        )
        if folder:
            remember_folder(SCANNED_FOLDER, folder, remembers)
            self.scan_folder(folder)

    def scan_folder(self, folder: str) -> bool:
        """Scan every image in ``folder`` (and its subfolders) for the ticked modules, in the background."""
        if self.running:
            self.host.show_status("A scan is running: cancel it first.", 4000)
            return False
        loaded = self.workspace.loaded
        if loaded is None:
            self.host.show_error("No model is loaded yet.", dialog=False)
            return False
        modules = self.ticked_modules()
        if not modules:
            self.host.show_error("Tick the activations (Act) of the modules to scan first.", dialog=False)
            return False
        if not Path(folder).is_dir():
            self.host.show_error(f"'{folder}' is not a folder.", dialog=False)
            return False
        self._request = (folder, modules, loaded)
        self._cancel = False
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.title.setText(f"Scanning {folder} for {', '.join(modules)}: waiting for the run in progress…")
        self.host.show_dock(DOCK_ID)
        self._copy_model()
        return True

    def _copy_model(self) -> None:
        """The copy is taken by an exclusive task: never while a run uses the model (it waits for the run in
        progress, and a run asked for meanwhile waits for it)."""
        assert self._request is not None
        task = self._copy_task = self.workspace.submit(
            "scan-copy", partial(copy_without_hooks, self._request[2].module), exclusive=True
        )
        task.started.connect(partial(self._on_copy_started, task))
        task.finished.connect(partial(self._on_copied, task))
        task.failed.connect(partial(self._on_copy_failed, task))

    def _on_copy_started(self, task: Task) -> None:
        if task is self._copy_task and self._request is not None:
            self._copy_job = task
            self.title.setText(f"Scanning {self._request[0]}: copying the model…")

    def _on_copied(self, task: Task, outcome: object) -> None:
        if task is not self._copy_task or self._request is None:
            return
        self._copy_task = self._copy_job = None
        if self._cancel or self._closing:
            self._end("cancelled", "Scan cancelled before it started.")
            return
        folder, modules, live = self._request
        assert isinstance(outcome, torch.nn.Module)  # copy_without_hooks's
        loaded = replace(live, module=outcome)
        settings = ScanSettings(modules, top=TOP, batch_size=BATCH_SIZE, boxes=False)
        device = self.workspace.device

        def work() -> tuple[ScanResult, LoadedModel]:
            images = find_images(folder, recursive=True)
            if not images:
                raise HookscopeError(f"There are no image files in '{folder}' (nor in its subfolders).", path=folder)
            result = run_scan_images(loaded, images, settings, device=device, root=folder,
                                     progress=self.progressed.emit, cancelled=lambda: self._cancel)  # fmt: skip
            return result, loaded

        self.title.setText(f"Scanning {folder} for {', '.join(modules)}…")
        self._scan = self.workspace.submit("scan", work)  # on the copy: beside the runs
        self._scan.finished.connect(self._on_scanned)
        self._scan.failed.connect(self._on_scan_failed)

    def _on_copy_failed(self, task: Task, error: object) -> None:
        if task is self._copy_task:
            self._copy_task = self._copy_job = None
            self._failed(error)

    def _on_progress(self, progress: ScanProgress) -> None:
        if self._scan is None or not isinstance(progress, ScanProgress):
            return
        self.progress.setRange(0, max(1, progress.total))
        self.progress.setValue(progress.done)
        self.progress.setFormat(f"%v / %m images · {progress.rate:.1f}/s")
        # As wide as its text with the largest counts: beside the stretching title the bar kept its 100 px size hint
        # and cut "120 / 500 images · 3.1/s" in a 1024 px window.
        widest = f"{progress.total} / {progress.total} images · {progress.rate:.1f}/s"
        self.progress.setMinimumWidth(self.progress.fontMetrics().horizontalAdvance(widest) + 16)

    def cancel(self) -> None:
        if self.running:
            self._cancel = True
            self.cancel_button.setEnabled(False)
            if self._copy_job is None and self._scan is None:  # still waiting for the runs: nothing started
                if self._copy_task is not None:
                    self._copy_task.cancel()
                    self._copy_task = None
                self._end("cancelled", "Scan cancelled before it started.")
            else:
                self.title.setText("Cancelling the scan…")

    def _on_scanned(self, outcome: object) -> None:
        self._scan = None
        if self._closing or not isinstance(outcome, tuple):
            return
        result, loaded = outcome
        live = self.workspace.loaded
        if self._request is None or live is None or live.module is not self._request[2].module:
            self._end("cancelled", "Scan dropped: another model was loaded while it ran.")
            return
        if not result.complete:
            self._end("cancelled", f"Scan cancelled after {result.processed} images; the previous results stay.")
            return
        self._show_result(result, loaded)
        skipped = f", {len(result.skipped)} skipped" if result.skipped else ""
        self._end("done", f"Scan of {result.processed} images{skipped}: {', '.join(result.modules)} "
                          f"({result.processed / max(result.scan_s, 1e-9):.1f} images/s). Click a channel tile to "
                          "see what excites it.")  # fmt: skip

    def _on_scan_failed(self, error: object) -> None:
        self._scan = None
        if not self._closing:
            self._failed(error)

    def _failed(self, error: object) -> None:
        message = error_text(error) if isinstance(error, BaseException) else str(error)
        self.host.show_error(message, dialog=False)
        self._end("failed", f"The scan failed: {message}")

    def _end(self, state: str, title: str) -> None:
        self._request = None
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)
        self.title.setText(title)
        self.host.show_status(title, 8000)
        self.finished.emit(state)

    def _show_result(self, result: ScanResult, loaded: LoadedModel | None) -> None:
        self.result = result
        self._scan_model = loaded
        self._cache.clear()
        self.save_button.setEnabled(True)
        # A panel of a scanned module can order its tiles "by dataset mean": the scan's channel means, highest first.
        self.workspace.set_channel_orders({path: sort_order(module.mean) for path, module in result.modules.items()})
        if self._wanted is not None:
            self._show_channel(*self._wanted)

    # ---- opening and saving ----------------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        remembers = self.host.remembers
        path, _ = QFileDialog.getOpenFileName(self.host.dialog_parent(), "Open a scan",
                                              last_folder(SCAN_FILE_FOLDER, remembers),
                                              f"Hookscope scans ({SCAN_FILE});;All files (*)")  # fmt: skip
        if path:
            remember_folder(SCAN_FILE_FOLDER, path, remembers)
            self.open_scan(path)

    def open_scan(self, path: str) -> bool:
        """Show a scan.json (or a folder holding one). Boxes missing from it (``--no-boxes``) stay missing: the
        whole image is shown."""
        try:
            result = read_scan(path)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return False
        self._show_result(result, None)
        self.title.setText(f"Scan {path}: {len(result.images)} images, {', '.join(result.modules)}. Click a channel "
                           "tile to see what excites it.")  # fmt: skip
        self.host.show_dock(DOCK_ID)
        return True

    def save_dialog(self) -> None:
        if self.result is None:
            return
        remembers = self.host.remembers
        folder = QFileDialog.getExistingDirectory(
            self.host.dialog_parent(), f"Save the scan ({SCAN_FILE}) in", last_folder(SCAN_FILE_FOLDER, remembers)
        )
        if folder:
            remember_folder(SCAN_FILE_FOLDER, folder, remembers)
            self.save(folder)

    def save(self, folder: str) -> Path | None:
        if self.result is None:
            return None
        try:
            path = write_scan(self.result, folder)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return None
        self.host.show_status(f"Saved {path}", 5000)
        return path

    # ---- sessions ----------------------------------------------------------------------------------------------
    def save_with_session(self, session_path: str) -> dict[str, object] | None:
        """File > Save session…: the scan on screen as scan.json in a folder beside the session file
        (``name.hookscope.json`` -> ``name.hookscope.scan/scan.json``); what the session notes (None: no scan)."""
        if self.result is None:
            return None
        session = Path(os.path.abspath(session_path))
        stem = session.name[: -len(".json")] if session.name.lower().endswith(".json") else session.name
        file = write_scan(self.result, session.parent / f"{stem}.scan")  # HookscopeError: the save says so
        return {"path": str(file), "relative": Path(os.path.relpath(file, session.parent)).as_posix()}

    def restore_from_session(self, value: object, folder: str) -> list[str]:
        """File > Open session…: show the session's scan (its relative path first, so a folder moved whole works);
        a missing or damaged scan is one problem line."""
        if not isinstance(value, dict):
            return ["The session's scan entry is not a file entry; the scan was not restored."]
        candidates = [os.path.join(folder, str(value["relative"]))] if value.get("relative") else []
        candidates += [str(value["path"])] if value.get("path") else []
        found = next((c for c in candidates if os.path.isfile(c)), candidates[0] if candidates else "")
        try:
            result = read_scan(found)
        except HookscopeError as error:
            return [f"{error} The scan was not restored; the rest of the session was."]
        self._show_result(result, None)
        self.title.setText(f"Scan {found} (from the session): {len(result.images)} images, "
                           f"{', '.join(result.modules)}. Click a channel tile to see what excites it.")  # fmt: skip
        return []

    # ---- the channel shown --------------------------------------------------------------------------------------
    def _on_channel_shown(self, picture: PanelPicture, channel: int) -> None:
        # The module's output channel: activations and their gradients, not a module's input (a pre-hook's channel).
        self._wanted = None if picture.kind == "pre" else (picture.path, channel)
        if self._wanted is not None:
            self._show_channel(*self._wanted)

    def _show_channel(self, path: str, channel: int) -> None:
        result = self.result
        if result is None:
            return
        module = result.modules.get(path)
        if module is None or not 0 <= channel < module.channels:
            self._clear_strip()
            self.stats.setText(f"The scan has no {path or 'model output'}: tick its activations (Act) and scan again.")
            return
        self.host.show_dock(DOCK_ID)
        cached = self._cache.get((path, channel))
        if cached is not None:
            self._show_patches(path, channel, *cached)
        elif self._patches is None:
            self._load_patches(path, channel)
        else:
            self.stats.setText(f"{path}, channel {channel}: reading its top images…")

    def _load_patches(self, path: str, channel: int) -> None:
        """Read the channel's top images (and compute their boxes on the scan's copy of the model) off the GUI
        thread; a channel clicked meanwhile is loaded next."""
        result, loaded, device = self.result, self._scan_model, self.workspace.device
        assert result is not None

        def work() -> tuple[ScanResult, str, int, list[TopImage], list[np.ndarray]]:
            entries = result.top(path, channel)
            if loaded is not None and any(entry.box is None for entry in entries):
                entries = channel_boxes(loaded, result, path, channel, device)
            reader = PatchReader(result)
            return result, path, channel, entries, [reader.patch(entry, THUMB) for entry in entries]

        self.stats.setText(f"{path}, channel {channel}: reading its top images…")
        self._patches = self.workspace.submit("scan-patches", work)  # the scan's copy of the model: beside the runs
        self._patches.finished.connect(self._on_patches)
        self._patches.failed.connect(self._on_patches_failed)

    def _on_patches(self, outcome: object) -> None:
        self._patches = None
        if self._closing or not isinstance(outcome, tuple):
            return
        result, path, channel, entries, patches = outcome
        if result is self.result:
            self._cache[(path, channel)] = (entries, patches)
            if self._wanted == (path, channel):
                self._show_patches(path, channel, entries, patches)
        if self._wanted is not None and self._wanted != (path, channel) and self.result is not None:
            self._show_channel(*self._wanted)

    def _on_patches_failed(self, error: object) -> None:
        self._patches = None
        if not self._closing:
            message = error_text(error) if isinstance(error, BaseException) else str(error)
            self.stats.setText(f"The top images could not be shown: {message}")

    def _clear_strip(self) -> None:
        self.entries = []
        # By the buttons themselves, not takeAt() (a Python wrapper over a layout item Qt frees: disposal.py).
        for button in self._strip_buttons:
            dispose(button)
        self._strip_buttons = []

    def _show_patches(self, path: str, channel: int, entries: list[TopImage], patches: list[np.ndarray]) -> None:
        assert self.result is not None
        result = self.result
        self._clear_strip()
        self.entries = list(entries)
        for rank, (entry, patch) in enumerate(zip(entries, patches)):
            button = QToolButton()
            button.setIcon(QPixmap.fromImage(_qimage(patch)))
            button.setIconSize(QSize(THUMB, THUMB))
            button.setAutoRaise(True)
            image = result.images[entry.image]
            where = "the whole image" if entry.box is None else f"the region {entry.box} it sees"
            button.setToolTip(_rich_tip(f"{shown_name(image)}\nscore {entry.score:.4g}, maximum at (y {entry.y}, "
                                        f"x {entry.x}); showing {where}\nClick to open it as image A"))  # fmt: skip
            button.setObjectName(f"scan_patch_{rank}")
            button.clicked.connect(partial(self.open_image, entry.image))
            self.strip.insertWidget(rank, button)
            self._strip_buttons.append(button)
        module = result.modules[path]
        by = "maximum" if result.settings.by == "max" else "mean"
        self.stats.setText(
            f"{path}, channel {channel}: its top {len(entries)} of {result.processed} images by the channel's {by}. "
            f"Over all of them: mean {module.mean[channel]:.3g}, std {module.std[channel]:.3g}, active (maximum > 0) "
            f"in {module.active[channel]:.0%}."
        )
        self.patches_shown.emit(path, channel)

    def open_image(self, index: int) -> None:
        """Open one of the scan's images as image A."""
        if self.result is not None:
            self.workspace.open_paths([self.result.images[index]])

    # ---- the model changes, the window closes ----------------------------------------------------------------------
    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        """A scan belongs to the model it ran: another model drops it (a scan in progress is cancelled)."""
        if self.running:
            self.cancel()
        if self.result is not None and self._scan_model is not None:
            self.result, self._scan_model = None, None
            self.workspace.set_channel_orders({})
            self._cache.clear()
            self._clear_strip()
            self.save_button.setEnabled(False)
            self.stats.setText("")
            self.title.setText("The scan belonged to the previous model. " + PROMPT)

    def shutdown(self) -> None:
        """The closing window calls this (``Workspace.on_shutdown``) before it cancels and waits for the tasks, a
        bounded time: the scan stops at its next batch."""
        self._closing = True
        self._cancel = True


def _rich_tip(text: str) -> str:
    """Plain ``text`` as a tooltip that shows it as written: Qt takes a tooltip that looks like markup (a file named
    ``<b>x</b>.png``) as rich text, so it is always given as rich text, escaped."""
    return "<qt>" + html.escape(text).replace("\n", "<br>") + "</qt>"


def _qimage(pixels: np.ndarray) -> QImage:
    pixels = np.ascontiguousarray(pixels)
    height, width = pixels.shape[:2]
    return QImage(pixels.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()
