"""A record panel's Export… menu: what the panel shows, written to files (``app/core/outputs/panel_export.py`` does it).

The mosaic is written exactly as drawn: the panel's uint8 mosaic (its sort and scaling) through its colormap (the
diverging one for the A − B view), one image pixel per file pixel. One channel (the last one clicked in the
panel) is written the same way. The arrays are the raw tensor the hook captured (for the B and A − B views, the
values drawn); the statistics are per channel of the values drawn (|grad| for gradients).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QFileDialog, QMenu, QStyle, QToolButton

from app.core.common.errors import HookscopeError
from app.core.engine.hooks import Record
from app.core.outputs.export import file_stem, picture_image
from app.core.outputs.panel_export import (
    _writing,
    export_channel_png,
    export_image_png,
    export_npy,
    export_npz,
    export_stats_csv,
    export_svg,
    svg_document,
)
from app.core.pictures.ab import diverging_lut
from app.ui.state.settings import app_settings

if TYPE_CHECKING:
    from app.ui.widgets.feature_map_panel import FeatureMapPanel

EXPORT_FOLDER_KEY = "export_folder"


def export_folder() -> str:
    """Where the last export went (the user's home at first)."""
    folder = app_settings().value(EXPORT_FOLDER_KEY, "")
    return str(folder) if folder and os.path.isdir(str(folder)) else os.path.expanduser("~")


def remember_folder(path: str) -> None:
    app_settings().setValue(EXPORT_FOLDER_KEY, os.path.dirname(os.path.abspath(path)))


class PanelExporter(QObject):
    """Exports of one panel; ``choose_path`` is the one file question (tests replace it)."""

    def __init__(self, panel: FeatureMapPanel) -> None:
        super().__init__(panel)
        self.panel = panel
        self.selected_channel: int | None = None
        panel.channel_clicked.connect(self._on_channel_clicked)

    def _on_channel_clicked(self, picture: object, channel: int) -> None:
        self.selected_channel = channel

    # ---- what is exported ---------------------------------------------------------------------------------
    def mosaic(self) -> np.ndarray:
        """The uint8 picture the panel draws: its mosaic, or a one-row strip for a vector."""
        picture = self._picture()
        image = picture.arrangement.image
        if image is None:
            image = picture_image(picture.channels, picture.settings.scaling, picture.arrangement.order)
        return image

    def record(self) -> Record | None:
        """The record the panel shows, with the raw tensor the hook captured (it travels with the picture)."""
        picture = self.panel.picture
        return picture.record if picture is not None else None

    def raw_array(self) -> np.ndarray:
        record = self.record() if self.view == "A" else None
        return record.tensor.numpy() if record is not None else self._picture().channels.data

    @property
    def view(self) -> str:
        """ "A", or with image B set "B" or "diff" (A − B, drawn with the diverging colormap)."""
        return str(getattr(self.panel.picture, "view", "A"))

    # ---- writing ------------------------------------------------------------------------------------------
    def mosaic_png(self, path: str | os.PathLike) -> np.ndarray:
        if self.view == "diff":
            return _write_with_lut(self.mosaic(), path)
        return export_image_png(self.mosaic(), path, self._picture().settings.colormap)

    def mosaic_svg(self, path: str | os.PathLike) -> None:
        picture = self._picture()
        title = f"{picture.key or '(model)'} · {self.panel.kind_label}" + (" · A − B" if self.view == "diff" else "")
        if self.view != "diff":
            export_svg(self.mosaic(), path, picture.settings.colormap, title=title)
            return
        # the same document, its embedded picture drawn through the diverging lookup table
        image = self.mosaic()
        document = svg_document(image, "gray", title).replace(
            _png_base64(apply_gray(image)), _png_base64(diverging_lut()[image])
        )
        with _writing(path) as target:
            target.write_text(document, encoding="utf-8")

    def channel_png(self, channel: int, path: str | os.PathLike) -> np.ndarray:
        picture = self._picture()
        data = picture.channels.data
        if picture.channels.kind != "maps" or not 0 <= channel < data.shape[0]:
            raise HookscopeError(f"This panel has no channel {channel} to export as a picture.")
        if self.view == "diff":  # signed, zero at 128, as the panel's A − B tiles
            values = np.nan_to_num(np.asarray(data, dtype=np.float32))
            magnitude = float(np.abs(values if picture.settings.scaling == "shared" else values[channel]).max())
            scaled = values[channel] * (127.0 / magnitude if magnitude > 0 else 0.0) + np.float32(128.5)
            return _write_with_lut(np.clip(scaled, 1, 255).astype(np.uint8), path)
        lo = hi = None
        if picture.settings.scaling == "shared":  # the range the panel draws every tile with
            lo, hi = float(np.nanmin(data)), float(np.nanmax(data))
        return export_channel_png(data[channel], path, picture.settings.colormap, lo, hi)

    def array_npy(self, path: str | os.PathLike) -> None:
        export_npy(self.raw_array(), path)

    def arrays_npz(self, path: str | os.PathLike) -> None:
        """The raw tensor under its record key, and the values drawn (``shown``: |grad| for gradients)."""
        picture = self._picture()
        export_npz({picture.key or "(model)": self.raw_array(), "shown": picture.channels.data}, path)

    def stats_csv(self, path: str | os.PathLike) -> None:
        export_stats_csv(self._picture().channels, path)

    def _picture(self):
        if self.panel.picture is None:
            raise HookscopeError("This panel shows nothing yet: there is nothing to export.")
        return self.panel.picture

    # ---- the menu -----------------------------------------------------------------------------------------
    def choose_path(self, title: str, suggested: str, pattern: str) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self.panel, title, os.path.join(export_folder(), suggested), pattern)
        return path or None

    def fill_menu(self, menu: QMenu) -> None:
        menu.clear()
        picture = self.panel.picture
        stem = f"{file_stem(self.panel.key or 'model')}_{self.panel.kind}"
        entries = [
            ("Mosaic as PNG…", "png", "PNG image (*.png)", "", self.mosaic_png),
            ("Mosaic as SVG…", "svg", "SVG image (*.svg)", "", self.mosaic_svg),
        ]
        channel = self.selected_channel
        if (
            picture is not None
            and picture.channels.kind == "maps"
            and channel is not None
            and channel < picture.channel_count
        ):
            entries.append(
                (
                    f"Channel {channel} as PNG…",
                    "png",
                    "PNG image (*.png)",
                    f"_channel{channel}",
                    lambda path, c=channel: self.channel_png(c, path),
                )
            )
        entries += [
            None,
            ("Array as .npy…", "npy", "NumPy array (*.npy)", "", self.array_npy),
            ("Arrays as .npz (raw and drawn)…", "npz", "NumPy archive (*.npz)", "", self.arrays_npz),
            ("Statistics as CSV…", "csv", "CSV (*.csv)", "_stats", self.stats_csv),
        ]
        for entry in entries:
            if entry is None:
                menu.addSeparator()
                continue
            label, suffix, pattern, extra, write = entry
            action = menu.addAction(label)
            action.setEnabled(picture is not None)
            action.triggered.connect(
                lambda *_, a=(label, f"{stem}{extra}.{suffix}", pattern, suffix, write): self._export(*a)
            )

    def _export(self, label: str, suggested: str, pattern: str, suffix: str, write) -> None:
        path = self.choose_path(f"Export {label.rstrip('…').lower()}", suggested, pattern)
        if not path:
            return
        if not Path(path).suffix:
            path += f".{suffix}"
        try:
            write(path)
        except HookscopeError as error:
            self._tell(str(error), error=True)
            return
        remember_folder(path)
        self._tell(f"Exported {Path(path).name} to {Path(path).parent}.")

    def _tell(self, message: str, error: bool = False) -> None:
        """Through the panel's ``message`` signal: the window shows it in the status bar (or as an error)."""
        self.panel.message.emit(message, error)


def apply_gray(image: np.ndarray) -> np.ndarray:
    return np.repeat(image[..., np.newaxis], 3, axis=2)


def _png_base64(rgb: np.ndarray) -> str:
    import base64
    import io

    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _write_with_lut(image: np.ndarray, path: str | os.PathLike) -> np.ndarray:
    """A uint8 picture through the A − B view's diverging lookup table, as PNG at native size."""
    if image.size == 0:
        raise HookscopeError("There is nothing to export: the picture is empty.")
    with _writing(path) as target:
        Image.fromarray(diverging_lut()[image]).save(target, format="PNG")
    return image


def export_button(panel: FeatureMapPanel) -> QToolButton:
    """The panel header's Export button; its menu is built when opened (panels stay cheap to create)."""
    button = QToolButton()
    button.setObjectName("exportPanel")
    button.setIcon(button.style().standardIcon(QStyle.StandardPixmap.SP_DialogSaveButton))
    button.setAutoRaise(True)
    button.setStyleSheet(
        "QToolButton { border: none; padding: 0 2px; } QToolButton:hover { background: #3b404a; border-radius: 3px; }"
    )
    button.setToolTip("Export this panel: the mosaic or one channel as PNG or SVG, the arrays, the statistics")
    button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    exporter = PanelExporter(panel)
    button.exporter = exporter

    def open_menu() -> None:
        menu = QMenu(button)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        exporter.fill_menu(menu)
        menu.popup(button.mapToGlobal(button.rect().bottomLeft()))

    button.clicked.connect(open_menu)
    return button
