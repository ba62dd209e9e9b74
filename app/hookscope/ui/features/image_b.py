"""Image B: a second image every run compares with image A (``ImageBFeature``, id "image_b").

The feature holds no state of its own: image B lives in the workspace (``workspace.image_b``), which runs it
right after A through the same hooks and edits in the same background job, so A and B always agree; each run's
``Comparison`` then gives every panel its A / B / A − B views (the panels draw them; which one is a panel
setting, ``PanelSettings.view``, so sessions keep it). Here: the B slot under the input image (thumbnail, name,
Open image B…, ✕), File > Open image B… / Clear image B, View > Image B: show (all panels), and View > Channel
order > by difference A − B. A B that cannot be read is dropped after its error is shown, so the next runs work.
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from hookscope.core.common.errors import ImageError
from hookscope.core.common.resources import sample_image
from hookscope.core.models.images import IMAGE_SUFFIXES
from hookscope.core.pictures.panels import VIEWS
from hookscope.ui.actions.builtin import image_folder
from hookscope.ui.actions.specs import ActionSpec
from hookscope.ui.host import Host
from hookscope.ui.state.requests import ImageSource, RunOutcome
from hookscope.ui.state.workspace import RunFailure, Workspace
from hookscope.ui.widgets.predictions import THUMBNAIL, rgb_pixmap

VIEW_MENU = "View/Image B: show (all panels)"
ORDER_MENU = "View/Channel order (all panels)"
VIEW_TITLES = {"A": "image A", "B": "image B", "diff": "the difference A − B"}  # the View menu's words
IMAGE_FILTER = "Images (" + " ".join(f"*{suffix}" for suffix in sorted(IMAGE_SUFFIXES)) + ");;All files (*)"


class ImageBSlot(QWidget):
    """Image B under the input: its thumbnail as the model sees it, its name, open and clear buttons."""

    open_requested = Signal()
    clear_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("imageBSlot")
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
        self.open_button.setToolTip("Load a second image B to compare with A (File > Open image B…, Ctrl+B)")
        self.open_button.clicked.connect(self.open_requested)
        self.clear_button = QToolButton()
        self.clear_button.setText("✕")
        self.clear_button.setToolTip("Clear image B: back to A alone (File > Clear image B)")
        self.clear_button.clicked.connect(self.clear_requested)
        title = QLabel("B")
        title.setObjectName("kindChip")
        title.setStyleSheet("background: #6b5aa8;")
        # The buttons on the chip's row, the words under them: under the hint, Open image B… was the row a short
        # dock (1024x700) scrolled out of sight.
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(title)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        text = QVBoxLayout()
        text.setContentsMargins(0, 0, 0, 0)
        text.addWidget(self.name)
        text.addWidget(self.hint)
        shown = QHBoxLayout()
        shown.setContentsMargins(0, 0, 0, 0)
        shown.addWidget(self.thumbnail, 0, Qt.AlignmentFlag.AlignTop)
        shown.addLayout(text, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(buttons)
        layout.addLayout(shown)
        self.show_image(None)

    def show_image(self, name: str | None, rgb: np.ndarray | None = None, waiting: bool = False) -> None:
        """B's name and thumbnail (None: no B); ``waiting`` while its first run has not come back."""
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


class ImageBFeature:
    """Image B's slot, menu entries and View choices; B itself is ``workspace.image_b``."""

    id = "image_b"

    def __init__(self, workspace: Workspace, host: Host) -> None:
        self.workspace = workspace
        self.host = host
        self.slot = ImageBSlot()
        self.slot.open_requested.connect(self.open_dialog)
        self.slot.clear_requested.connect(self.clear)
        host.add_input_row(self.slot)
        host.add_actions(self._action_specs())
        workspace.image_b_changed.connect(self._on_image_b_changed)
        workspace.run_applied.connect(self._on_run_applied)
        workspace.failed.connect(self._on_failed)
        self._on_image_b_changed(workspace.image_b)

    def _action_specs(self) -> list[ActionSpec]:
        specs = [
            ActionSpec(
                "file.open_image_b",
                "Open image B…",
                "File",
                self.open_dialog,
                group=15,
                order=10,
                shortcut="Ctrl+B",
                tooltip="A second image to compare with: every panel can show A, B or A − B",
            ),
            ActionSpec(
                "file.clear_image_b",
                "Clear image B",
                "File",
                self.clear,
                group=15,
                order=20,
                tooltip="Stop comparing with image B: back to A alone",
            ),
            # The submenu's place in the View menu (see MenuBuilder: a spec whose id is the submenu's path).
            ActionSpec(VIEW_MENU, VIEW_MENU.rpartition("/")[2], "View", group=10, order=40),
            ActionSpec(
                "view.sort.diff",
                "by difference A − B (image B)",
                ORDER_MENU,
                lambda: self.workspace.set_all("sort", "diff"),
                order=90,
                tooltip="Channels ranked by how much A and B differ (mean |A − B|); channel order without B",
            ),
        ]
        for order, (view, title) in enumerate(VIEW_TITLES.items()):
            specs.append(
                ActionSpec(
                    f"view.image_b.{view}",
                    title,
                    VIEW_MENU,
                    partial(self.show_view_everywhere, view),
                    group=10,
                    order=order,
                    tooltip=f"Every panel shows {title} while image B is set",
                )
            )
        return specs

    # ---- public ---------------------------------------------------------------------------------------------
    def set_image_b(self, path: str | os.PathLike | None) -> None:
        """Compare with the image at ``path`` (None: stop comparing); the run follows."""
        self.workspace.set_image_b(ImageSource.from_path(path) if path is not None else None)

    def clear(self) -> None:
        self.workspace.set_image_b(None)

    def ask_image_b_path(self) -> str | None:
        """The file to open as image B (tests replace this question)."""
        shown = self.workspace.image  # B's folder is most likely A's; never the bundled sample's (the installation)
        sample = os.path.abspath(sample_image())
        if shown is not None and shown.path and os.path.abspath(shown.path) != sample:
            start = os.path.dirname(os.path.abspath(shown.path))
        else:
            start = image_folder(self.host.remembers)
        path, _ = QFileDialog.getOpenFileName(
            self.host.dialog_parent(), "Open image B (to compare with A)", start, IMAGE_FILTER
        )
        return path or None

    def open_dialog(self) -> None:
        path = self.ask_image_b_path()
        if path:
            self.set_image_b(path)

    def show_view_everywhere(self, view: str) -> None:
        """Every panel shows ``view`` ("A", "B" or "diff") while B is set, panels made later too."""
        if view not in VIEWS:
            raise ValueError(f"Unknown view '{view}'; use one of: {', '.join(VIEWS)}.")
        self.workspace.set_all("view", view)

    # ---- workspace events -----------------------------------------------------------------------------------
    def _on_image_b_changed(self, source: ImageSource | None) -> None:
        self.slot.show_image(source.name if source is not None else None, waiting=source is not None)

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        image_b = self.workspace.image_b
        if image_b is None:
            self.slot.show_image(None)
        elif outcome.comparison is not None and outcome.image_b == image_b:
            self.slot.show_image(image_b.name, outcome.comparison.input_display)

    def _on_failed(self, failure: RunFailure) -> None:
        """A B that cannot be read is dropped (its error is on screen already), so the next runs work again."""
        image_b = self.workspace.image_b
        error = failure.error
        if failure.load or image_b is None or image_b.path is None or not isinstance(error, ImageError):
            return
        if error.path is not None and os.path.abspath(error.path) == os.path.abspath(image_b.path):
            self.host.show_status(f"Image B ({image_b.name}) was dropped: it could not be read.", 8000)
            self.workspace.set_image_b(None)
