"""One channel up close: the map large (float32, with its histogram), its statistics, and the map laid over the
input image with adjustable opacity, to see where in the picture the channel responds."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PIL import Image
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QSizePolicy, QSlider, QVBoxLayout, QWidget
from superqt import QElidingLabel

from hookscope.core.common.resources import colormap_lut
from hookscope.core.pictures.panels import KIND_LABELS, PanelPicture
from hookscope.core.pictures.views import channel_stats, shape_text


def colormap_of(name: str) -> pg.ColorMap:
    lut = colormap_lut(name)
    return pg.ColorMap(pos=np.linspace(0.0, 1.0, len(lut)), color=lut, name=name)


def upsample(map2d: np.ndarray, width: int, height: int) -> np.ndarray:
    """A small map stretched smoothly over the input image (bilinear), for the overlay."""
    return np.asarray(
        Image.fromarray(np.ascontiguousarray(map2d, dtype=np.float32), mode="F").resize(
            (width, height), Image.Resampling.BILINEAR
        ),
        dtype=np.float32,
    )


class CompactView(pg.GraphicsLayoutWidget):
    """A plot that asks for little room (pyqtgraph's ask for 600x480 each): the channel dock opens at a modest
    height instead of squeezing the docks beside it, and grows when the user drags it."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(280, 220)


class ChannelView(QWidget):
    """Shows one channel of one record; the window puts it in a dock and refills it on every run."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.picture: PanelPicture | None = None
        self.channel: int | None = None
        self._input: np.ndarray | None = None

        # Elided, the whole line and the hook's method in the tooltip: beside the Visualize button in a 540 px dock.
        self._title = QElidingLabel("Click a tile in a panel to look at one channel.")
        self._title.setObjectName("panelTitle")

        self._map_view = CompactView()
        self._map_box = self._map_view.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.map_item = pg.ImageItem()
        self._map_box.addItem(self.map_item)
        self.histogram = pg.HistogramLUTItem(image=self.map_item)
        self._map_view.addItem(self.histogram)
        self.histogram.sigLevelsChanged.connect(self._sync_overlay)
        self.histogram.sigLookupTableChanged.connect(self._sync_overlay)

        self._overlay_view = CompactView()
        self._overlay_box = self._overlay_view.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.input_item = pg.ImageItem()
        self.overlay_item = pg.ImageItem()
        self._overlay_box.addItem(self.input_item)
        self._overlay_box.addItem(self.overlay_item)
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(55)
        self.opacity.setToolTip("Opacity of the channel over the input image")
        self.opacity.valueChanged.connect(self._on_opacity)
        self.overlay_item.setOpacity(0.55)
        opacity_row = QHBoxLayout()
        opacity_row.addWidget(QLabel("Opacity"))  # short: the overlay's column is 110 px at 1024 px
        opacity_row.addWidget(self.opacity, 1)
        overlay = QVBoxLayout()
        overlay.setContentsMargins(0, 0, 0, 0)
        overlay.addWidget(self._overlay_view, 1)
        overlay.addLayout(opacity_row)

        self.stats: dict[str, QLabel] = {}
        form = QFormLayout()
        # Short values only (the record's name and hook are in the title and its tooltip): the column keeps the width
        # of its longest value, where "register_forward_pre_hook" was cut in a 1024 px window.
        for key in ("shape", "channel", "map size", "min", "max", "mean", "std", "zeros"):
            label = QLabel("–")
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.stats[key] = label
            form.addRow(key, label)
        stats = QWidget()
        stats.setLayout(form)
        stats.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Preferred)
        # The map shares its view with the histogram (about 110 px): a minimum keeps the map itself visible when
        # the dock is narrow (the panel area of a 1024 px window), instead of the histogram taking it all.
        self._map_view.setMinimumWidth(230)
        overlay_widget_min = 110

        body = QHBoxLayout()
        body.addWidget(self._map_view, 3)
        overlay_widget = QWidget()
        overlay_widget.setLayout(overlay)
        overlay_widget.setMinimumWidth(overlay_widget_min)
        body.addWidget(overlay_widget, 2)
        body.addWidget(stats, 0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        self._title_row = QHBoxLayout()  # the title, then what features add (``add_row``: a Visualize button)
        self._title_row.addWidget(self._title, 1)
        layout.addLayout(self._title_row)
        layout.addLayout(body, 1)

    def add_row(self, widget: QWidget) -> None:
        """A feature's widget for the channel shown (beside the title, so the dock needs no extra height)."""
        self._title_row.addWidget(widget)

    def show_channel(self, picture: PanelPicture, channel: int, input_rgb: np.ndarray | None) -> None:
        """Show ``channel`` of ``picture``; ``input_rgb`` is the image as the model saw it (for the overlay)."""
        if picture.channels.kind != "maps" or not 0 <= channel < picture.channel_count:
            return
        self.picture, self.channel, self._input = picture, channel, input_rgb
        values = np.ascontiguousarray(picture.channels.data[channel], dtype=np.float32)
        stats = {key: float(value[0]) for key, value in channel_stats(values[np.newaxis]).items()}
        low, high = stats["min"], stats["max"]
        if not high > low:
            high = low + 1.0
        what = "|grad| of " if picture.is_gradient else ""
        self._title.setText(f"{picture.key} · {KIND_LABELS.get(picture.kind, picture.kind)} · {what}channel {channel}")
        self._title.setToolTip(f"{self._title.text()}\n{picture.method}")
        self.map_item.setImage(values, autoLevels=False, levels=(low, high))
        self.histogram.gradient.setColorMap(colormap_of(picture.settings.colormap))
        self.histogram.setLevels(low, high)
        self.histogram.autoHistogramRange()
        self._map_box.autoRange(padding=0.02)

        if input_rgb is not None:
            height, width = input_rgb.shape[:2]
            self.input_item.setImage(input_rgb, autoLevels=False, levels=(0, 255))
            self.overlay_item.setImage(upsample(values, width, height), autoLevels=False)
            self.overlay_item.setRect(QRectF(0, 0, width, height))
            self._overlay_box.autoRange(padding=0.02)
        self._sync_overlay()

        self.stats["shape"].setText(shape_text(picture.shape))
        self.stats["shape"].setToolTip(f"{picture.key}: {shape_text(picture.shape)}, read by {picture.method}")
        self.stats["channel"].setText(f"{channel} of {picture.channel_count}")
        self.stats["map size"].setText(shape_text(values.shape))
        for key in ("min", "max", "mean", "std"):
            self.stats[key].setText(f"{stats[key]:.5g}")
        self.stats["zeros"].setText(f"{stats['zero_fraction']:.1%}")

    def refresh(self, pictures: list[PanelPicture], input_rgb: np.ndarray | None) -> bool:
        """After a run: show the same record and channel from the new results; False if it is gone."""
        if self.picture is None or self.channel is None:
            return False
        for picture in pictures:
            if (picture.kind, picture.key) == (self.picture.kind, self.picture.key):
                if self.channel < picture.channel_count and picture.channels.kind == "maps":
                    self.show_channel(picture, self.channel, input_rgb)
                    return True
        return False

    def _sync_overlay(self, *_: object) -> None:
        low, high = self.histogram.getLevels()
        self.overlay_item.setLevels((low, high))
        self.overlay_item.setLookupTable(self.histogram.getLookupTable(n=256))

    def _on_opacity(self, value: int) -> None:
        self.overlay_item.setOpacity(value / 100.0)
