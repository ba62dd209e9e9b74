"""The status bar's permanent part: the busy bar, and each run's timings and status line."""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import Workspace

BUSY_BAR_DELAY_MS = 300  # the busy bar shows for work lasting longer than this
FRAME_LINES_EVERY_S = 1.0  # a playing video's run renews the timings line at most this often


class StatusLine(QObject):
    """The busy bar and the timings line. ``run_arrived`` is connected before every other view, ``show_run`` called
    after them, so that "render" counts the GUI's work on the run as well as the worker's."""

    def __init__(self, space: Workspace, bar: QStatusBar):
        super().__init__(bar)
        self.space = space
        self.bar = bar
        self.last_timings: dict[str, float] = {}
        self._arrived_at = 0.0  # when the run on screen came
        self._frame_lines_at = 0.0  # when the timings line last showed a video frame's run
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setFixedWidth(70)
        self.busy_bar.setVisible(False)
        self.timing_label = QLabel("")
        self.timing_label.setToolTip("Last run: forward and backward pass, then preparing and drawing the panels")
        bar.addPermanentWidget(self.busy_bar)
        bar.addPermanentWidget(self.timing_label)
        # The busy bar comes when work lasts (BUSY_BAR_DELAY_MS) and goes at once: a video's frames, one run after
        # another, would blink it (a relayout and repaint of the status bar each frame, on the GUI thread).
        self._busy_timer = QTimer(self)
        self._busy_timer.setSingleShot(True)
        self._busy_timer.setInterval(BUSY_BAR_DELAY_MS)
        self._busy_timer.timeout.connect(lambda: self.busy_bar.setVisible(space.busy))
        space.busy_changed.connect(self._on_busy_changed)
        space.status.connect(lambda text, ms: bar.showMessage(text, ms))
        space.model_changed.connect(self._on_model_changed)

    def _on_busy_changed(self, *_: object) -> None:
        if not self.space.busy:  # a closing workspace is never busy
            self._busy_timer.stop()
            self.busy_bar.setVisible(False)
        elif not self.busy_bar.isVisible() and not self._busy_timer.isActive():
            self._busy_timer.start()

    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self.timing_label.setText("")  # the old model's timings go with its results

    def run_arrived(self, _outcome: RunOutcome) -> None:
        self._arrived_at = time.perf_counter()

    def show_run(self, outcome: RunOutcome) -> None:
        """The timings (a playing video's at a reading pace) and the run's line, led by what the load said."""
        result = outcome.result
        apply_ms = (time.perf_counter() - self._arrived_at) * 1000
        self.last_timings = t = {**outcome.timings, "apply_ms": apply_ms}
        if outcome.image.frame:  # a playing video: its feature keeps the status line
            if time.monotonic() - self._frame_lines_at < FRAME_LINES_EVERY_S:
                return
            self._frame_lines_at = time.monotonic()
        self.timing_label.setText(
            f"{result.device} · forward {t['forward_ms']:.0f} ms · backward "
            f"{t['backward_ms']:.0f} ms · render {t['prepare_ms'] + apply_ms:.0f} ms"
        )
        self.timing_label.setToolTip(
            f"read + preprocess {t['read_ms']:.0f} ms\nforward {t['forward_ms']:.1f} ms\n"
            f"backward {t['backward_ms']:.1f} ms\nprepare pictures (worker) {t['prepare_ms']:.1f} ms\n"
            f"update panels (GUI) {apply_ms:.1f} ms\n{len(result.records)} records"
        )
        model_message = self.space.take_model_message()
        if outcome.image.frame and not model_message:
            return
        line = f"{outcome.image.name}: {len(result.records)} records"
        self.bar.showMessage(f"{model_message} · {line}" if model_message else line, 8000)
