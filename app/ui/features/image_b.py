"""Comparing image A with image B in the window: the B slot under the input, the predictions of both side by side,
and the A / B / A − B views of every panel.

``CompareImages`` holds image B for the window. While B is set, every run also runs B through the same hooks and
edits in the same background job (``jobs.execute_run``), so A and B are always consistent; the run's
``Comparison`` then gives each panel its three views.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.core.ab_pictures import VIEWS
from app.core.images import IMAGE_SUFFIXES
from app.ui.state.requests import ImageSource, RunOutcome
from app.ui.widgets.predictions import THUMBNAIL, rgb_pixmap

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

class ImageBSlot(QWidget):
    """Image B under the input: its thumbnail as the model sees it, its name, open and clear buttons."""

    open_requested = Signal()
    clear_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.thumbnail = QLabel()
        self.thumbnail.setFixedSize(THUMBNAIL, THUMBNAIL)
        self.thumbnail.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.thumbnail.setStyleSheet("border: 1px solid #3b404a;")
        self.name = QLabel("")
        self.name.setWordWrap(True)
        self.hint = QLabel("Compare with a second image: every panel can show A, B or A − B.")
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        self.open_button = QToolButton()
        self.open_button.setText("Open image B…")
        self.open_button.setToolTip("Load a second image B to compare with A (File > Open image B…)")
        self.open_button.clicked.connect(self.open_requested)
        self.clear_button = QToolButton()
        self.clear_button.setText("✕")
        self.clear_button.setToolTip("Clear image B: back to A alone")
        self.clear_button.clicked.connect(self.clear_requested)
        title = QLabel("B")
        title.setObjectName("kindChip")
        title.setStyleSheet("background: #6b5aa8;")
        text = QVBoxLayout()
        text.setContentsMargins(0, 0, 0, 0)
        text.addWidget(self.name)
        text.addWidget(self.hint)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        text.addLayout(buttons)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addWidget(title, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.thumbnail, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(text, 1)
        self.show_image(None)

    def show_image(self, name: str | None, rgb: np.ndarray | None = None, waiting: bool = False) -> None:
        self.thumbnail.setVisible(name is not None)
        self.clear_button.setVisible(name is not None)
        self.hint.setVisible(name is None)
        self.name.setVisible(name is not None)
        if name is None:
            self.thumbnail.clear()
            self.name.setText("")
            return
        self.name.setText(f"{name}{'  (running…)' if waiting else ''}")
        if rgb is not None:
            self.thumbnail.setPixmap(rgb_pixmap(rgb))
        elif waiting:
            self.thumbnail.clear()


class CompareImages(QObject):
    """Image B of the window: set, cleared, run with every run, and shown in the panels and the predictions."""

    image_b_changed = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window
        self.image_b: ImageSource | None = None
        self._pending = False  # B set, but no run with it has come back yet
        self.slot = ImageBSlot()
        self.slot.open_requested.connect(self.open_dialog)
        self.slot.clear_requested.connect(self.clear)
        window.run_applied.connect(self._on_run_applied)
        window.run_failed.connect(self._on_run_failed)

    # ---- public -------------------------------------------------------------------------------------------
    def set_image_b(self, path: str | os.PathLike | None) -> None:
        """Compare with the image at ``path`` (None: stop comparing); the run follows at once."""
        self.image_b = ImageSource.from_path(path) if path is not None else None
        self._pending = self.image_b is not None
        self.slot.show_image(self.image_b.name if self.image_b else None, waiting=True)
        if self.image_b is None:
            self._window.predictions.side_by_side.setVisible(False)
        self.image_b_changed.emit()
        self._window.run_again()

    def clear(self) -> None:
        if self.image_b is not None:
            self.set_image_b(None)

    def open_dialog(self) -> None:
        window = self._window
        patterns = " ".join(f"*{suffix}" for suffix in sorted(IMAGE_SUFFIXES))
        image = window.last_outcome.image if window.last_outcome is not None else None
        start = os.path.dirname(image.path) if image is not None and image.path else os.path.expanduser("~")
        path, _ = QFileDialog.getOpenFileName(
            window, "Open image B (to compare with A)", start, f"Images ({patterns});;All files (*)"
        )
        if path:
            self.set_image_b(path)

    def show_view_everywhere(self, view: str) -> None:
        """Every panel with B shows ``view`` ("A", "B" or "diff"), as each panel's drop-down would."""
        if view not in VIEWS:
            raise ValueError(f"Unknown view '{view}'; use one of: {', '.join(VIEWS)}.")
        for panel in self._window.panel_area.panels.values():
            if panel.views:
                panel.choose_view(view)

    # ---- after a run --------------------------------------------------------------------------------------
    def _on_run_applied(self, outcome: RunOutcome) -> None:
        window = self._window
        comparison = outcome.comparison
        if comparison is None or outcome.image_b is None:
            window.predictions.side_by_side.setVisible(False)
            return
        if self.image_b is not None and outcome.image_b == self.image_b:
            self.image_b = outcome.image_b  # keep B's pixels: later runs need not read the file again
            self._pending = False
        self.slot.show_image(outcome.image_b.name, comparison.input_display)
        for panel in window.panel_area.panels.values():
            views = comparison.views.get(panel.ident)
            if views:
                panel.show_views(views)
        window.predictions.side_by_side.show_both(
            outcome.image.name, outcome.result.top5, outcome.image_b.name, comparison.result.top5
        )
        window.predictions.side_by_side.setVisible(bool(outcome.result.top5))

    def _on_run_failed(self, message: str) -> None:
        """A B that cannot be read is dropped (the error is on screen already), so the next runs work again."""
        image = self.image_b
        if image is None or not self._pending:
            return
        if image.name in message or (image.path and image.path in message):
            self.set_image_b(None)
