"""The graphics item that paints a mosaic coloured in the worker (``state/rendering.py``), and the views around it.

Measured on this project's panels (``python -m app.ui.bench_gui``): pyqtgraph's ``ImageItem`` turns a uint8 image
and a lookup table into an ``Indexed8`` QImage on the GUI thread at every new image (building a 256-entry colour
table in Python each time), and the raster engine converts ``Indexed8`` again at every paint: about 0.7 ms a panel
whatever its size. An ``RGB32`` image made once, off the GUI thread (``QImage`` is reentrant; only ``QPixmap`` is
tied to the GUI thread), paints in about 0.07 ms.

The worker colours the mosaic at the size it is shown (``fit``: the panels' view size in device pixels), keeping
every n-th pixel of each tile, which is what painting the whole mosaic scaled down shows too: a 900x900 mosaic
in a 300 pixel panel needs a ninth of the memory and of the work. Zooming in past that resolution paints the full mosaic,
coloured then on the GUI thread (once per picture, under a millisecond).

The views that show mosaics sit in a scrolling page of panels, so the mouse wheel scrolls that page; Ctrl+wheel
zooms the mosaic around the mouse (``MosaicViewBox``, ``ScrollingLayoutWidget``).
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QWidget

from app.ui.state.rendering import RenderedMosaic, render_mosaic


class MosaicItem(pg.GraphicsObject):
    """Paints one ``RenderedMosaic`` over the mosaic's own pixel grid (one scene unit per mosaic pixel, so the
    view box's zoom and pan and the hover arithmetic do not depend on the resolution painted)."""

    def __init__(self) -> None:
        super().__init__()
        self._rendered: RenderedMosaic | None = None
        self._full: RenderedMosaic | None = None  # made when the view first needs more than the worker's copy
        self._rect = QRectF()

    @property
    def rendered(self) -> RenderedMosaic | None:
        return self._rendered

    def show_rendered(self, rendered: RenderedMosaic) -> None:
        h, w = rendered.arrangement.size
        if (w, h) != (self._rect.width(), self._rect.height()):
            self.prepareGeometryChange()
            self._rect = QRectF(0, 0, w, h)
            self.informViewBoundsChanged()
        self._rendered = rendered
        self._full = rendered if rendered.is_full else None
        self.update()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt's name)
        return QRectF(self._rect)

    def paint(self, painter, *args) -> None:
        if self._rendered is None:
            return
        painter.drawImage(self._rect, self._image_for(painter).qimage)

    def _image_for(self, painter) -> RenderedMosaic:
        """The worker's copy while it has a pixel for every device pixel painted, else the full mosaic."""
        rendered = self._rendered
        assert rendered is not None
        if self._full is not None:
            return self._full
        transform = painter.worldTransform()
        device = painter.device()
        ratio = device.devicePixelRatioF() if device is not None else 1.0
        shown_w = math.hypot(transform.m11(), transform.m12()) * ratio * self._rect.width()
        shown_h = math.hypot(transform.m21(), transform.m22()) * ratio * self._rect.height()
        # 2% slack: the view box's padding makes the painted size wobble around the size the worker was told.
        if shown_w <= rendered.qimage.width() * 1.02 and shown_h <= rendered.qimage.height() * 1.02:
            return rendered
        self._full = render_mosaic(rendered.arrangement, rendered.lut)
        return self._full


def zooms(event: object) -> bool:
    """Whether a wheel event (Qt's or pyqtgraph's scene event) asks to zoom: Ctrl is held."""
    return bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)


def enclosing_scroll_area(widget: QWidget) -> QAbstractScrollArea | None:
    """The scroll area whose page holds ``widget`` (None in a dock of its own)."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


def scroll_page(widget: QWidget, event: QWheelEvent) -> None:
    """Hand a wheel event over a plot to the scroll area around it, as if the plot were not there.

    Qt propagates an ignored wheel event to the parents only when it came from the window system; handing it to
    the scroll area's viewport here works for every event (and scrolls once: the area accepts what it used)."""
    event.ignore()
    area = enclosing_scroll_area(widget)
    if area is not None:
        QApplication.sendEvent(area.viewport(), event)


class WheelScrollsPage:
    """Mixin for a pyqtgraph ``GraphicsView``: the wheel scrolls the page around it, Ctrl+wheel goes to the scene
    (where the view box zooms around the mouse)."""

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt's name)
        if zooms(event):
            super().wheelEvent(event)  # type: ignore[misc]
            event.accept()
        else:
            scroll_page(self, event)  # type: ignore[arg-type]


class ScrollingLayoutWidget(WheelScrollsPage, pg.GraphicsLayoutWidget):
    """A ``GraphicsLayoutWidget`` whose wheel scrolls the page (Ctrl+wheel zooms)."""


class ScrollingPlotWidget(WheelScrollsPage, pg.PlotWidget):
    """A ``PlotWidget`` whose wheel scrolls the page (Ctrl+wheel zooms)."""


class MosaicViewBox(pg.ViewBox):
    """A view box that zooms only with Ctrl held; a plain wheel is left to the page (``WheelScrollsPage``)."""

    def wheelEvent(self, ev, axis=None) -> None:  # noqa: N802 (pyqtgraph's name)
        if not zooms(ev):
            ev.ignore()
            return
        super().wheelEvent(ev, axis)

    def fit(self) -> None:
        """Show the whole mosaic (the double-click)."""
        self.autoRange(padding=0.01)
