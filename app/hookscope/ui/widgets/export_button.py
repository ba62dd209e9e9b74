"""A record panel's Export… menu: what the panel shows, written to files.

The menu lists ``hookscope.core.outputs.panel_export.PANEL_EXPORTS`` (what can be exported and the function that writes
it from the panel's picture); this widget only asks where, and says what happened. The mosaic is written exactly
as drawn (its sort, scaling and lookup table, one image pixel per file pixel); one channel (the last one clicked
in the panel) the same way. The arrays are the raw tensor the hook captured (for the B and A − B views, the values
drawn); the statistics are per channel of the values drawn (|grad| for gradients).

The button knows its panel only as an ``ExportSource`` (the feature map panel is one), so the two modules do not
import each other.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Qt, SignalInstance
from PySide6.QtWidgets import QFileDialog, QMenu, QStyle, QToolButton, QWidget

from hookscope.core.common.errors import HookscopeError
from hookscope.core.outputs.panel_export import PANEL_EXPORTS, PanelExport, panel_file_stem
from hookscope.core.pictures.panels import PanelPicture
from hookscope.ui.state.settings import app_settings

EXPORT_FOLDER_KEY = "export_folder"


def export_folder() -> str:
    """Where the last export went (the user's home at first)."""
    folder = app_settings().value(EXPORT_FOLDER_KEY, "")
    return str(folder) if folder and os.path.isdir(str(folder)) else os.path.expanduser("~")


def remember_folder(path: str) -> None:
    app_settings().setValue(EXPORT_FOLDER_KEY, os.path.dirname(os.path.abspath(path)))


class ExportSource(Protocol):
    """What the Export button reads of its panel: the picture shown, the record's key and hook kind (the suggested
    file name), the channel clicks (the channel export) and where to tell the user (``message(text, is_error)``)."""

    key: str
    kind: str

    @property
    def picture(self) -> PanelPicture | None: ...

    @property
    def channel_clicked(self) -> SignalInstance: ...

    @property
    def message(self) -> SignalInstance: ...


class PanelExporter(QObject):
    """Exports of one panel; ``choose_path`` is the one file question (tests replace it)."""

    def __init__(self, panel: ExportSource, owner: QWidget) -> None:
        super().__init__(owner)
        self.panel = panel
        self.owner = owner  # the file dialog's parent
        self.selected_channel: int | None = None
        panel.channel_clicked.connect(self._on_channel_clicked)

    def _on_channel_clicked(self, picture: object, channel: int) -> None:
        self.selected_channel = channel

    def choose_path(self, title: str, suggested: str, pattern: str) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self.owner, title, os.path.join(export_folder(), suggested), pattern)
        return path or None

    def fill_menu(self, menu: QMenu) -> None:
        menu.clear()
        picture = self.panel.picture
        stem = panel_file_stem(self.panel.key, self.panel.kind)  # layer1.0.conv1_gradients: the vocabulary's
        channel = self.selected_channel
        section: int | None = None
        for spec in PANEL_EXPORTS:
            if not spec.listed(picture, channel):
                continue
            if section is not None and spec.section != section:
                menu.addSeparator()
            section = spec.section
            label, name = spec.menu_label(channel), spec.file_name(stem, channel)
            action = menu.addAction(label)
            action.setEnabled(picture is not None)
            action.triggered.connect(lambda *_, s=spec, w=label, n=name, c=channel: self._export(s, w, n, c))

    def _export(self, spec: PanelExport, label: str, suggested: str, channel: int | None) -> None:
        path = self.choose_path(f"Export {label.rstrip('…').lower()}", suggested, spec.pattern)
        if not path:
            return
        if not Path(path).suffix:
            path += f".{spec.suffix}"
        try:
            picture = self.panel.picture  # the one shown now: a run may have finished while the menu was open
            if picture is None:
                raise HookscopeError("This panel shows nothing yet: there is nothing to export.")
            spec.export(picture, path, channel)
        except HookscopeError as error:
            self._tell(str(error), error=True)
            return
        remember_folder(path)
        self._tell(f"Exported {Path(path).name} to {Path(path).parent}.")

    def _tell(self, message: str, error: bool = False) -> None:
        """Through the panel's ``message`` signal: the window shows it in the status bar (or as an error)."""
        self.panel.message.emit(message, error)


class ExportButton(QToolButton):
    """The panel header's Export button; its menu is built when opened (panels stay cheap to create)."""

    def __init__(self, panel: ExportSource) -> None:
        super().__init__()
        self.setObjectName("exportPanel")
        self.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_DialogSaveButton))
        self.setAutoRaise(True)
        self.setStyleSheet(
            "QToolButton { border: none; padding: 0 2px; } "
            "QToolButton:hover { background: #3b404a; border-radius: 3px; }"
        )
        self.setToolTip("Export this panel: the mosaic or one channel as PNG or SVG, the arrays, the statistics")
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.exporter = PanelExporter(panel, self)
        self.clicked.connect(self._open_menu)

    def _open_menu(self) -> None:
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.exporter.fill_menu(menu)
        menu.popup(self.mapToGlobal(self.rect().bottomLeft()))


def export_button(panel: ExportSource) -> ExportButton:
    return ExportButton(panel)
