"""Live: a video file or a camera through the window's run path (``LiveFeature``, id "live").

File > Open video… (or dropping a video file) and File > Open camera… start a source (``hookscope.core.live.video``): it
plays on a thread of its own into a one-frame mailbox (``LatestFrame``, paced at the file's own rate, as a camera
gives its frames). Whenever the workspace has no run in flight, the newest frame is asked for as the image on
screen (``workspace.request_image``), so every panel, the predictions, Grad-CAM and the Channel view follow it
through the workspace's one run path; frames that arrive while a run is in flight are dropped, never queued.

Space freezes the frame on screen (it is then an image like any other: edits, the inspector and exports work on
it) and resumes; the Space shortcut exists only while a source is open, so the module tree keeps its own Space the
rest of the time. The status bar shows the source's and the processed frame rates once a second. A file that is
not a video, or ends early because it is truncated, is one error line; the results on screen stay.

File > Record what is seen… writes the runs that come on screen as a video file (``BackgroundRecorder``: drawn
and encoded on a thread of its own): the input as the model sees it with the chosen module's panel, or its
Grad-CAM, beside it, at the source's frame rate, until File > Stop recording or the source closes.
"""

from __future__ import annotations

import gc
import os
import time

from PIL import Image
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QInputDialog, QLabel, QSlider, QWidget

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.hooks import OUTPUT_GRADIENT_KINDS
from hookscope.core.live.runner import GRAD_CAM, BackgroundRecorder, SeenView
from hookscope.core.live.video import (
    VIDEO_SUFFIXES,
    LatestFrame,
    VideoSource,
    list_cameras,
    no_camera_error,
    open_camera,
    open_video,
)
from hookscope.core.pictures.cam import has_spatial_output
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import Host
from hookscope.ui.state.requests import ImageSource, RunOutcome
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.widgets.disposal import dispose
from hookscope.ui.words import window_words

RECORD_FILTER = "MP4 video (*.mp4);;AVI video, MJPG (*.avi)"
RECORD_TITLE = "Record what is seen"
TITLE_ROOM = 160  # px beside a dialog's title: the window manager's icon and buttons
VIDEO_FILTER = "Videos (" + " ".join(f"*{suffix}" for suffix in sorted(VIDEO_SUFFIXES)) + ");;All files (*)"
# The newest frame is asked for when a run ends and taken when the reader says it put one (``frame_ready``);
# this slow timer is only a safety net. A 5 ms poll woke the GUI thread 200 times a second beside the model's two
# threads, which on two cores cost the model more than the poll did.
POLL_MS = 100
RATES_EVERY_S = 1.0
# When the run path frees, the next frame is usually waiting already (asked for when the model finished,
# ``_ask_next``). When it is due but still being decoded, waiting for it here (under a millisecond) starts the next
# run before this thread paints the last one, not after (4 ms a frame otherwise).
DUE_WAIT_S = 0.01


FROZEN, PLAYING = "Frozen", "▶ Playing"  # the video bar's state, a word (the keys: its tooltip)


class VideoBar(QWidget):
    """Under the input while a video or camera plays, on one row: whether it plays or is frozen (the status bar's
    rates stop while it is, and say the keys), and for a file a slider over its frames and which frame is on screen.

    One row, a word for the state: at 1024x700 the state's sentence (two lines in a narrow dock) and the slider's
    row under it pushed Image B's row out of the Input dock's sight."""

    under_image = True  # the input panel puts it right under the picture, in sight in a short dock

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("videoBar")
        self.state = QLabel("")
        self.state.setObjectName("videoState")
        # as wide as the wider of its two words: the slider does not jump when Space toggles them
        self.state.setMinimumWidth(max(self.state.fontMetrics().horizontalAdvance(w) for w in (FROZEN, PLAYING)))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Drag to any frame of the video (it freezes there; Space plays on from it)")
        self.label = QLabel("")
        self.label.setObjectName("muted")
        line = QHBoxLayout(self)
        line.setContentsMargins(0, 4, 0, 0)
        line.addWidget(self.state)
        line.addWidget(self.slider, 1)
        line.addWidget(self.label)
        self.setVisible(False)

    def show_frame(self, index: int, count: int | None) -> None:
        self.slider.blockSignals(True)  # the video moved it: not a request to seek
        self.slider.setValue(index)
        self.slider.blockSignals(False)
        self.label.setText(f"frame {index}" + (f" / {count - 1}" if count else ""))

    def show_state(self, frozen: bool, is_file: bool) -> None:
        steps = "; . and , step" if is_file else ""
        # words, no pause sign: the usual fonts of a Linux desktop lack one (it showed as a box at 1024x700)
        self.state.setText(FROZEN if frozen else PLAYING)
        self.state.setToolTip(f"Frozen on this frame (Space plays{steps})" if frozen else "Playing (Space freezes)")


class LiveFeature(QObject):
    """The live source's menu entries, drop handler, frame pump and freeze."""

    id = "live"
    # emitted on the reader's thread when it put a frame (or the source ended): queued to the GUI thread's pump
    frame_ready = Signal()

    def __init__(self, workspace: Workspace, host: Host) -> None:
        super().__init__()
        self.workspace = workspace
        self.host = host
        self.stream: LatestFrame | None = None
        self.frozen = False
        self.shown = 0  # frames whose run is on screen, since the source opened
        self._asked: ImageSource | None = None  # the frame asked for last
        self._asked_index: int | None = None
        self._rates_at = time.monotonic()
        self._shown_at_rates = 0
        self._rates = ""  # the status line of the source's and the processed rates, renewed once a second
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._pump)
        self.frame_ready.connect(self._pump, Qt.ConnectionType.QueuedConnection)
        self._keys: list[QShortcut] = []  # Space and '.', only while a source is open
        self._step_wanted = False
        self.current_index: int | None = None  # the frame asked for last
        self.recorder: BackgroundRecorder | None = None
        self.bar = VideoBar()
        self.bar.slider.valueChanged.connect(self.seek)
        host.add_input_row(self.bar)
        host.add_actions(self._action_specs())
        host.add_drop_handler(self._on_drop)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.busy_changed.connect(self._on_busy_changed)
        workspace.on_shutdown(self.shutdown)

    def _action_specs(self) -> list[ActionSpec]:
        # greyed in File while they cannot act (asked as the menu opens)
        playing, a_file, recording = self._open, self._playing_a_file, self._recording
        return [
            ActionSpec("file.open_video", "Open video…", "File", self.open_video_dialog, group=16, order=10,
                       tooltip="Play a video file through the hooks: the panels follow its frames"),
            ActionSpec("file.open_camera", "Open camera…", "File", self.open_camera_dialog, group=16, order=20,
                       tooltip="Run a camera's frames through the hooks"),
            ActionSpec("file.live_freeze", "Freeze / resume the video (Space)", "File", self.toggle_freeze, group=16,
                       order=30, tooltip="Keep the frame on screen to work on it as on an image; again to resume",
                       enabled=playing),
            ActionSpec("file.live_next_frame", "Next frame of the video (.)", "File", self.next_frame, group=16,
                       order=35, tooltip="Freeze the video and show its next frame; again for the one after",
                       enabled=a_file),
            ActionSpec("file.live_previous_frame", "Previous frame of the video (,)", "File", self.previous_frame,
                       group=16, order=36, tooltip="Freeze the video and show the frame before the one on screen",
                       enabled=a_file),
            ActionSpec("file.live_record", "Record what is seen…", "File", self.record_dialog, group=16, order=37,
                       tooltip="Write the frames as they come on screen to a video file, with one module's panel or "
                       "Grad-CAM beside the input", enabled=playing),
            ActionSpec("file.live_stop_recording", "Stop recording", "File", self.stop_recording, group=16, order=38,
                       tooltip="Close the recording: the video file is complete and playable", enabled=recording),
            ActionSpec("file.live_stop", "Close the video or camera", "File", self.stop, group=16, order=40,
                       tooltip="Stop the video or camera; the last frame's results stay", enabled=playing),
        ]  # fmt: skip

    def _open(self) -> bool:
        return self.stream is not None

    def _playing_a_file(self) -> bool:
        return self.stream is not None and self.stream.source.info.kind == "video"

    def _recording(self) -> bool:
        return self.recorder is not None

    # ---- public ---------------------------------------------------------------------------------------------
    @property
    def playing(self) -> bool:
        return self.stream is not None

    def open_video(self, path: str | os.PathLike, loop: bool = False) -> bool:
        """Play the video at ``path`` (again from its start when it ends, with ``loop``); a file that cannot be read
        is one error, and what is on screen stays."""
        try:
            source = open_video(path)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return False
        self._start(source, loop=loop)
        return True

    def open_camera(self, index: int) -> bool:
        try:
            source = open_camera(index)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return False
        self._start(source)
        return True

    def ask_video_path(self) -> str | None:
        """The file to play (tests replace this question)."""
        path, _ = QFileDialog.getOpenFileName(self.host.dialog_parent(), "Open video", "", VIDEO_FILTER)
        return path or None

    def ask_camera(self, names: list[str]) -> int | None:
        """Which of the cameras found to open (tests replace this question); its position in ``names``."""
        name, ok = QInputDialog.getItem(self.host.dialog_parent(), "Open camera", "Camera:", names, 0, False)
        return names.index(name) if ok else None

    def open_video_dialog(self) -> None:
        path = self.ask_video_path()
        if path:
            self.open_video(path)

    def open_camera_dialog(self) -> None:
        cameras = list_cameras()
        if not cameras:
            self.host.show_error(window_words(no_camera_error()))
            return
        choice = 0 if len(cameras) == 1 else self.ask_camera([camera.name for camera in cameras])
        if choice is not None:
            self.open_camera(cameras[choice].index)

    def toggle_freeze(self) -> None:
        """Freeze the frame on screen, or resume. A file waits where it is (and resumes from there); a camera
        cannot wait: it runs on, and resuming shows its newest frame."""
        if self.stream is None:
            self.host.show_status("No video or camera is open (File > Open video…).", 4000)
            return
        self.frozen = not self.frozen
        self._step_wanted = False
        is_file = self.stream.source.info.kind == "video"
        if is_file:
            (self.stream.pause if self.frozen else self.stream.resume)()
        name = self.stream.source.info.name
        steps = "'.' steps to the next frame, " if is_file else ""
        self.bar.show_state(self.frozen, is_file)
        self.host.show_status(f"{name}: frozen on this frame ({steps}Space resumes)." if self.frozen
                              else f"{name}: playing.", 0 if self.frozen else 4000)  # fmt: skip

    def next_frame(self) -> None:
        """While a video is frozen: show its next frame (frozen on it)."""
        if self.stream is None or self.stream.source.info.kind != "video":
            self.host.show_status("Frame stepping is for a video file (File > Open video…).", 4000)
            return
        if not self.frozen:
            self.toggle_freeze()
        self._step_wanted = True
        if not self.stream.holds_frame:  # else the frame read last before the freeze comes first
            self.stream.step()

    def seek(self, index: int) -> None:
        """Show frame ``index`` of the video (frozen on it; Space plays on from there)."""
        if self.stream is None or self.stream.source.info.kind != "video":
            self.host.show_status("Moving to a frame is for a video file (File > Open video…).", 4000)
            return
        if not self.frozen:
            self.toggle_freeze()
        self._step_wanted = True
        self.stream.seek(index)

    def previous_frame(self) -> None:
        if self.current_index is not None:
            self.seek(max(0, self.current_index - 1))

    # ---- recording --------------------------------------------------------------------------------------------
    def record_choices(self) -> list[SeenView]:
        """What a recording can show beside the input, from the run on screen: each ticked module's panel (network
        order), then the Grad-CAM of each module whose activations and output gradient are both hooked."""
        outcome = self.workspace.last
        if outcome is None:
            return []
        ticked = self.workspace.ticked_pairs()
        records = [r for r in outcome.result.records if not r.call and not r.leaf]
        panels = [SeenView(r.path, r.kind) for r in records if (r.path, r.kind) in ticked]
        grads = {r.path for r in records if r.kind in OUTPUT_GRADIENT_KINDS}
        cams = [SeenView(r.path, GRAD_CAM) for r in records
                if r.kind == "forward" and r.path in grads and has_spatial_output(tuple(r.tensor.shape))]  # fmt: skip
        return list(dict.fromkeys(panels + cams))

    def ask_record_view(self, names: list[str]) -> int | None:
        """Which view to record beside the input (tests replace this question); its position in ``names``."""
        dialog = QInputDialog(self.host.dialog_parent())
        dialog.setWindowTitle(RECORD_TITLE)
        dialog.setLabelText("Beside the input:")
        dialog.setComboBoxItems(names)
        dialog.setComboBoxEditable(False)
        # wide enough for the window manager to show the whole title (it was "Record wh...Hookscope")
        # (the dialog's own layout fixes its size to its contents: the choice box is what is widened)
        title = dialog.fontMetrics().horizontalAdvance(f"{RECORD_TITLE} — Hookscope")
        for box in dialog.findChildren(QComboBox):
            box.setMinimumWidth(title + TITLE_ROOM)
        try:
            ok = dialog.exec() == QInputDialog.DialogCode.Accepted
            return names.index(dialog.textValue()) if ok else None
        finally:
            dispose(dialog)

    def ask_record_path(self) -> str | None:
        """The video file to write (tests replace this question)."""
        path, chosen = QFileDialog.getSaveFileName(self.host.dialog_parent(), "Record to", "seen.mp4", RECORD_FILTER)
        if path and not os.path.splitext(path)[1]:
            path += ".avi" if "avi" in chosen.lower() else ".mp4"
        return path or None

    def record_dialog(self) -> None:
        if self.stream is None:
            self.host.show_status("Open a video or camera first (File > Open video…): a recording follows it.", 4000)
            return
        choices = self.record_choices()
        if not choices:
            self.host.show_error("Nothing to record beside the input: tick a module's Act or Grad first.")
            return
        # A file waits while the two questions are asked (a camera cannot): it used to play on and could end
        # before the answers, and then nothing was recorded. It plays on from there once the recording is set up.
        paused = self.stream.source.info.kind == "video" and not self.frozen
        if paused:
            self.toggle_freeze()
        try:
            choice = self.ask_record_view([view.describe() for view in choices])
            path = self.ask_record_path() if choice is not None else None
            if path and choice is not None:
                if self.stream is None:  # a camera unplugged meanwhile, or the source failed
                    self.host.show_error("The video or camera closed while the recording was being set up: "
                                         "nothing was recorded.")  # fmt: skip
                else:
                    self.start_recording(path, choices[choice])
        finally:
            if paused and self.stream is not None and self.frozen:
                self.toggle_freeze()

    def start_recording(self, path: str | os.PathLike, view: SeenView) -> bool:
        """Record from the next run on screen: the input with ``view`` beside it, at the source's frame rate."""
        if self.stream is None:
            self.host.show_status("Open a video or camera first (File > Open video…): a recording follows it.", 4000)
            return False
        self.stop_recording()
        try:
            self.recorder = BackgroundRecorder(path, self.stream.source.info.fps or 25.0, view)
        except HookscopeError as error:
            self.host.show_error(str(error))
            return False
        self.host.show_status(f"Recording {view.describe()} beside the input to {self.recorder.path} (File > Stop "
                              "recording ends it).", 4000)  # fmt: skip
        return True

    def stop_recording(self) -> int | None:
        """Close the recording; the pictures written (None when none was going)."""
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return None
        written = recorder.close()
        if recorder.error is not None:
            self.host.show_error(str(recorder.error))
        else:
            skipped = f", {recorder.skipped} runs skipped (the recorder was behind)" if recorder.skipped else ""
            problem = f"; {recorder.problem}" if recorder.problem else ""
            self.host.show_status(f"Recorded {written} pictures ({written / recorder.fps:.1f} s) of "
                                  f"{recorder.view.describe()} to {recorder.path}{skipped}{problem}", 8000)  # fmt: skip
        return written

    def stop(self) -> None:
        """Close the source (and a recording of it); the last frame's results stay on screen."""
        self.stop_recording()
        self._timer.stop()
        self.bar.setVisible(False)
        for key in self._keys:
            key.setEnabled(False)
            dispose(key)
        self._keys = []
        if self.stream is not None:
            self.stream.close()
            self.stream = None
            gc.unfreeze()  # what existed when playback began is the collector's again
        self.frozen = False

    def shutdown(self) -> None:
        self.stop()

    # ---- the frames -----------------------------------------------------------------------------------------
    def _start(self, source: VideoSource, loop: bool = False) -> None:
        self.stop()
        # The cyclic collector's full passes rescan every object in the process (the model, Qt's wrappers, torch's
        # modules): 40-120 ms with the GIL held, a stall of the GUI thread in the middle of playback. What exists
        # when playback begins is set aside until it ends (nothing is lost: unfreeze hands it back), so the passes
        # during playback see only what the frames make.
        self.stream = LatestFrame(source, paced=True, loop=loop, on_frame=self.frame_ready.emit)
        gc.freeze()
        self.shown = self._shown_at_rates = 0
        self._rates = ""
        self._rates_at = time.monotonic()
        self._asked = None
        self._asked_index = None
        keys = [(Qt.Key.Key_Space, self.toggle_freeze)]
        if source.info.kind == "video":
            keys += [(Qt.Key.Key_Period, self.next_frame), (Qt.Key.Key_Comma, self.previous_frame)]
            count = source.info.frame_count
            self.bar.slider.blockSignals(True)
            self.bar.slider.setRange(0, max(0, (count or 1) - 1))
            self.bar.slider.setValue(0)
            self.bar.slider.blockSignals(False)
            self.bar.label.setText("")
        has_slider = source.info.kind == "video" and bool(source.info.frame_count)  # unknown length: no slider
        self.bar.slider.setVisible(has_slider)
        self.bar.label.setVisible(has_slider)
        self.bar.show_state(False, source.info.kind == "video")
        self.bar.setVisible(True)
        self.current_index = None
        for key, action in keys:
            shortcut = QShortcut(QKeySequence(key), self.host.dialog_parent())
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(action)
            self._keys.append(shortcut)
        self._timer.start()
        self.host.show_status(f"Playing {source.info.describe()}; Space freezes the frame.", 4000)

    def _pump(self) -> None:
        """Ask for the newest frame when no run is in flight: a busy model makes the source drop frames."""
        stream = self.stream
        if stream is None or (self.frozen and not self._step_wanted) or self.workspace.busy or self.workspace.loading:
            return
        try:
            frame = stream.take_due(DUE_WAIT_S)
        except HookscopeError as error:  # a truncated file: its frames were shown; what is on screen stays
            self.stop()
            self.host.show_error(str(error))
            return
        if frame is None:
            if stream.ended:
                name = stream.source.info.name
                self.stop()
                self.host.show_status(f"End of {name}: {self.shown} frames shown, {stream.dropped} dropped.", 8000)
            return
        self._step_wanted = False
        self.current_index = frame.index
        name = stream.source.info.name
        self._asked = ImageSource(f"{os.path.basename(name)} · frame {frame.index}", None,
                                  Image.fromarray(frame.rgb), frame=True, after_model=self._ask_next)  # fmt: skip
        self._asked_index = frame.index
        self.workspace.request_image(self._asked, debounce=False)  # a frame is no burst of changes to gather

    def _ask_next(self) -> None:
        """On the worker, when a frame's model passes are done: the reader decodes the next frame while the pictures
        are made and painted, so that it waits in the mailbox when the run path frees instead of being decoded then
        with the GUI thread waiting (``take_due``): 0.5 ms less a frame in the window (``bench_live``, ten pairs
        side by side). Not while frozen: an edit re-running the frozen frame asks for nothing."""
        stream = self.stream
        if stream is not None and not self.frozen:
            stream.ask()

    def _on_busy_changed(self, busy: bool) -> None:
        """The run path is free: the next frame goes at once, not at the timer's next tick."""
        if not busy and self.stream is not None:
            self._pump()

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        if self.stream is None or self._asked is None or outcome.image != self._asked:
            return
        index = self._asked_index
        self.shown += 1
        if self.stream.source.info.kind == "video" and index is not None:
            # with the panels, in the same repaint: the bar says which frame is on screen
            self.bar.show_frame(index, self.stream.source.info.frame_count)
        if self.recorder is not None and index is not None:
            self.recorder.add(index, outcome.input_display, outcome.result)
        now = time.monotonic()
        if now - self._rates_at >= RATES_EVERY_S:  # the rates over the last second or so
            processed = (self.shown - self._shown_at_rates) / (now - self._rates_at)
            self._rates_at, self._shown_at_rates = now, self.shown
            self._rates = (f"{self.stream.source.info.name}: source {self.stream.source_fps:.1f} fps, processed "
                           f"{processed:.1f} fps, {self.stream.dropped} frames dropped")  # fmt: skip
            # renewed once a second, shown for two: the window leaves the status line to this while frames play
            QTimer.singleShot(0, self, self._show_rates)

    def _show_rates(self) -> None:
        if self.stream is not None and self._rates and not self.frozen:  # frozen: the status says so and stays
            recording = f"; recording to {self.recorder.path}" if self.recorder is not None else ""
            self.host.show_status(self._rates + recording, 2000)

    def _on_drop(self, paths: list[str]) -> list[str]:
        """A dropped video file plays; everything else is left to the other handlers."""
        videos = [path for path in paths if os.path.splitext(path)[1].lower() in VIDEO_SUFFIXES]
        if videos:
            self.open_video(videos[0])
        return [path for path in paths if path not in videos]
