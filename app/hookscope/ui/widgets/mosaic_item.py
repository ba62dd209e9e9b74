"""The graphics item that paints a mosaic coloured in the worker (``state/rendering.py``), and the views around it.

Measured on this project's panels (``python -m hookscope.ui.bench_gui``): pyqtgraph's ``ImageItem`` turns a uint8 image
and a lookup table into an ``Indexed8`` QImage on the GUI thread at every new image (building a 256-entry colour
table in Python each time), and the raster engine converts ``Indexed8`` again at every paint: about 0.7 ms a panel
whatever its size. An ``RGB32`` image made once, off the GUI thread (``QImage`` is reentrant; only ``QPixmap`` is
tied to the GUI thread), paints in about 0.07 ms.

The worker colours the mosaic at exactly the size a fitted mosaic is shown at (``rendering.fitted_size``: from the
panels' view box size in device pixels), sampling only the pixels shown: a 900x900 mosaic in a 300 pixel panel
needs a ninth of the memory and of the work, and a small one arrives enlarged. The GUI thread then paints it pixel
for pixel, a plain copy (measured for 40 panels of 347x347: 0.08 ms a panel copied, against 0.18 ms painting the
worker's former, larger image scaled down and 0.11 ms a smaller one scaled up). Zoomed or resized since the run,
the image is painted scaled; zoomed in past its resolution, the full mosaic is, coloured then on the GUI thread
(once per picture, under a millisecond).

The views that show mosaics sit in a scrolling page of panels, so the mouse wheel scrolls that page; Ctrl+wheel
zooms the mosaic around the mouse (``MosaicViewBox``, ``ScrollingLayoutWidget``).
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPainter, QTransform, QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QGraphicsItem, QWidget

from hookscope.ui.state.rendering import FIT_PADDING, RenderedMosaic, render_mosaic


class MosaicItem(pg.GraphicsObject):
    """Paints one ``RenderedMosaic`` over the mosaic's own pixel grid (one scene unit per mosaic pixel, so the
    view box's zoom and pan and the hover arithmetic do not depend on the resolution painted)."""

    def __init__(self) -> None:
        super().__init__()
        self._rendered: RenderedMosaic | None = None
        self._size = (0, 0)  # the worker's image's (width, height), kept here: read at every paint
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
        self._size = rendered.size
        self._full = rendered if rendered.is_full else None
        self._repaint_views()

    def _repaint_views(self) -> None:
        """Repaint the views in the window's next repaint, with the panel's labels. Through ``update()`` the scene
        queues its views' repaint for a later turn of the event loop, so that each plot took a repaint of the
        window of its own after the one for the labels: 5.3 repaints a frame for a playing video, 1.1 this way
        (``python -m hookscope.ui.bench_live``). The mosaic fills its view: the whole viewport is what changed."""
        if not repaint_views(self):
            self.update()

    def release(self) -> None:
        """Drop the pictures (the panel is being removed): nothing left to paint."""
        self._rendered = self._full = None
        self.update()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt's name)
        return QRectF(self._rect)

    def paint(self, painter: QPainter, *args: Any) -> None:
        rendered = self._rendered
        if rendered is None:
            return
        to_device = QTransform(painter.deviceTransform())  # a copy: PySide hands out a reference into the painter
        shown = to_device.mapRect(self._rect)
        if (
            not to_device.isRotating()
            and to_device.m11() > 0
            and to_device.m22() > 0  # a plain scale
            and (round(shown.width()), round(shown.height())) == self._size
        ):
            # Shown at the size the worker coloured it for (``rendering.fitted_size``): a plain copy at a whole
            # device pixel. Painted through the view's scaling, the raster engine takes its scaling path instead
            # (the module's docstring says what each costs). The copy is placed through the painter's own
            # transform: what the painter adds after the world transform (the widget's offset in the window's
            # shared backing store, the device pixel ratio) is undone here, not assumed to be nothing, so the
            # image lands where the item is, in a partial repaint on a real screen as in an offscreen grab.
            world = QTransform(painter.worldTransform())
            beyond = world.inverted()[0] * to_device  # world -> device: view, redirection, device pixel ratio
            undo, invertible = beyond.inverted()
            if invertible:
                at = QTransform.fromTranslate(round(shown.left()), round(shown.top()))
                painter.setWorldTransform(at * undo)
                painter.drawImage(0, 0, rendered.qimage)
                painter.setWorldTransform(world)
                return
        # Zoomed, resized since the run, mirrored: scaled, from the worker's copy while it has a pixel for every
        # device pixel painted (2% slack: a view a few pixels larger than when the run was asked for), else from
        # the full mosaic (made on the first zoom past the worker's copy, kept for this picture).
        image = rendered
        if shown.width() > self._size[0] * 1.02 or shown.height() > self._size[1] * 1.02:
            if self._full is None:
                self._full = render_mosaic(rendered.arrangement, rendered.lut)
            image = self._full
        painter.drawImage(self._rect, image.qimage)


def repaint_views(item: QGraphicsItem) -> bool:
    """Ask every view of ``item``'s scene to repaint its whole viewport, in the window's next repaint; False when
    the item is in no scene."""
    scene = item.scene()
    if scene is None:
        return False
    for view in scene.views():
        view.viewport().update()
    return True


def zooms(event: Any) -> bool:
    """Whether a wheel event (Qt's or pyqtgraph's scene event: ``modifiers()`` both) asks to zoom: Ctrl is held."""
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
    """A ``GraphicsLayoutWidget`` whose wheel scrolls the page (Ctrl+wheel zooms).

    Its layout draws nothing of its own (no background, no cell borders: pyqtgraph adds an invisible border item
    per cell), so painting skips it: items that paint nothing still cost a call into Python at every paint."""

    def __init__(self) -> None:
        super().__init__()
        self.ci.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)

    def add_box(self, item: pg.GraphicsWidget) -> None:
        """Add ``item`` (a view box) to the layout's next cell, without the invisible border item."""
        self.ci.addItem(item)
        if self.ci.border is None:
            self.ci.itemBorders[item].setVisible(False)


class ScrollingPlotWidget(WheelScrollsPage, pg.PlotWidget):
    """A ``PlotWidget`` whose wheel scrolls the page (Ctrl+wheel zooms)."""


class MosaicViewBox(pg.ViewBox):
    """A view box that zooms only with Ctrl held; a plain wheel is left to the page (``WheelScrollsPage``).

    It has no border or background, so the box itself is not painted, only the mosaic in it (measured on 40 panels:
    the box's own paint, a path drawn with no pen, and its invisible border item were about a tenth of painting)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        self.borderRect.setVisible(False)

    def update(self, *args: Any) -> None:
        """pyqtgraph applies a new range (a zoom, a pan, the double-click's fit) at the views' next paint
        (``prepareForPaint``) and asks for that paint with ``update()``; an item with no contents gets none from
        Qt, so the zoom showed only at the next run. The views are repainted instead."""
        if not repaint_views(self):
            super().update(*args)

    def wheelEvent(self, ev: Any, axis: int | None = None) -> None:  # noqa: N802 (pyqtgraph's name)
        if not zooms(ev):
            ev.ignore()
            return
        super().wheelEvent(ev, axis)

    def fit(self) -> None:
        """Show the whole mosaic (the double-click), at the size the worker colours it for (``fitted_size``)."""
        self.autoRange(padding=FIT_PADDING)
