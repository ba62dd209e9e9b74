"""A mosaic through its colormap as ready-to-paint RGB32 pixels, coloured in the worker: the GUI thread then only
wraps them in a ``QImage`` (no copy) and paints. ``widgets/mosaic_item.py`` paints it.

The worker makes no Qt object at all, only a numpy array. Every Python wrapper of a Qt object (a ``QImage`` too)
is entered in and removed from PySide's one process-wide table of wrappers, and a C++ destructor on the GUI
thread reads that table without Python's lock. Wrappers made and freed on pool threads while the GUI thread
deleted list items or deferred-deleted objects crashed the process now and then, always in
``BindingManager::releaseWrapper`` on the GUI thread (issue 21, item 9; ``tests/ui/test_worker_threads.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
from PySide6.QtGui import QImage

from hookscope.core.common.resources import colormap_lut
from hookscope.core.pictures.ab import diverging_lut, view_of
from hookscope.core.pictures.panels import Arrangement, PanelPicture
from hookscope.core.pictures.views import under_centres

# The key of the signed A − B views' lookup table (``diverging_lut``; the rule is ``ab.picture_lut``): the window keys
# its cached colour tables by name, and every other key is a colormap name.
DIFF_LUT = "diff"


@dataclass(frozen=True, eq=False)
class RenderedMosaic:
    """An arrangement's mosaic through lookup table ``lut`` as RGB32 pixels (uint32, height x width): the whole
    mosaic, or a copy scaled down to the size it is shown at (``is_full`` tells)."""

    arrangement: Arrangement
    lut: str
    pixels: np.ndarray
    is_full: bool
    _qimage: list = field(default_factory=list, repr=False)  # the QImage over ``pixels``, made on first use

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        return self.pixels.shape[1], self.pixels.shape[0]

    @property
    def qimage(self) -> QImage:
        """The pixels as a ``QImage`` (no copy: it reads ``pixels``, which this object keeps), made on first use,
        on the thread that paints (the GUI thread), never in the worker."""
        if not self._qimage:
            h, w = self.pixels.shape
            self._qimage.append(QImage(self.pixels.data, w, h, self.pixels.strides[0], QImage.Format.Format_RGB32))
        return self._qimage[0]

    def matches(self, arrangement: Arrangement, lut: str) -> bool:
        return self.arrangement is arrangement and self.lut == lut


@cache
def color_array(lut: str) -> np.ndarray:
    """The 256 ARGB values of a lookup table as uint32 (Qt's RGB32 pixels), built once per table."""
    rgb = (diverging_lut() if lut == DIFF_LUT else colormap_lut(lut)).astype(np.uint32)
    table = 0xFF000000 | (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    table.flags.writeable = False  # shared by every call
    return table


def color_table(lut: str) -> tuple[int, ...]:
    """The 256 ARGB values of a lookup table, as ``QImage.setColorTable`` takes them."""
    return tuple(int(v) for v in color_array(lut))


FIT_PADDING = 0.01  # a fitted mosaic's margin in its view box, a fraction of its size on each side


def fitted_size(width: int, height: int, fit: tuple[int, int] | None) -> tuple[int, int]:
    """The size in device pixels a ``width`` x ``height`` mosaic is shown at when fitted into a view box of ``fit``
    device pixels (aspect kept, ``FIT_PADDING`` around it; scaled up as well as down): the size of the image that
    a panel paints without scaling (``mosaic_item.MosaicItem``)."""
    if fit is None or fit[0] <= 0 or fit[1] <= 0:
        return width, height
    scale = min(fit[0] / width, fit[1] / height) / (1 + 2 * FIT_PADDING)
    return max(1, round(width * scale)), max(1, round(height * scale))


def nearest(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image`` resampled to ``size`` (width, height) by nearest neighbour: each pixel shows the source pixel under
    its centre, which is what the raster engine shows when it paints the image scaled to that size."""
    height, width = image.shape
    if (width, height) == size:
        return image
    rows, cols = under_centres(height, size[1]), under_centres(width, size[0])
    # Rows taken whole (a copy of lines), columns gathered on the fewer rows: about 0.05 ms for a panel of 350x350
    # here, where take(axis=1) takes twice that and one 2-D fancy index (rows[:, None], cols) 0.6 ms.
    if size[1] <= height:
        return image.take(rows, axis=0)[:, cols]
    return image[:, cols].take(rows, axis=0)


def colour(source: np.ndarray, lut: str) -> np.ndarray:
    """A uint8 (H, W) image through a lookup table as RGB32 pixels (uint32, C-contiguous): numpy's ``take``, no Qt
    object (see the module's docstring)."""
    return np.ascontiguousarray(color_array(lut).take(np.asarray(source, dtype=np.uint8)))


def render_mosaic(arrangement: Arrangement, lut: str, fit: tuple[int, int] | None = None) -> RenderedMosaic:
    """Colour an arrangement's mosaic at exactly the size a view box of ``fit`` device pixels shows it (scaled up
    or down: ``fitted_size``), or whole without ``fit``.

    Scaled down, it draws only every step-th pixel of each tile (step: how many mosaic pixels a shown pixel
    spans, rounded down), so the work follows the pixels on screen, not the size of the layer; then that, a
    little larger than shown, is resampled to the size shown (``nearest``, on the uint8 image: a fraction of a
    millisecond here), so that the GUI thread paints it pixel for pixel, a plain copy (``mosaic_item``: measured
    for 40 panels of 347x347, 0.08 ms a panel, against 0.11 to 0.18 ms painting a smaller or larger image scaled)."""
    height, width = arrangement.size
    shown = fitted_size(width, height, fit)
    step = max(1, min(width // shown[0], height // shown[1]))
    sampled = arrangement.sampled(step)
    assert sampled is not None  # a map's arrangement: render_mosaic is never asked for a vector's
    pixels = colour(nearest(sampled, shown), lut)
    return RenderedMosaic(arrangement, lut, pixels, pixels.shape == (height, width))


def lut_of(picture: PanelPicture) -> str:
    """The lookup table a picture is drawn with: the diverging one for an A − B view, else its colormap."""
    return DIFF_LUT if view_of(picture) == "diff" else picture.settings.colormap


def rendered_for(picture: PanelPicture, fit: tuple[int, int] | None = None) -> RenderedMosaic:
    """The picture's mosaic ready to paint: the worker's rendering when it still fits (same arrangement, same
    colormap), else made now, at the size ``fit`` shows it (a settings change: on the GUI thread, so "apply to
    every panel" must not colour every mosaic whole)."""
    lut = lut_of(picture)
    if isinstance(picture.rendered, RenderedMosaic) and picture.rendered.matches(picture.arrangement, lut):
        return picture.rendered
    return render_mosaic(picture.arrangement, lut, fit)


def with_rendering(picture: PanelPicture, fit: tuple[int, int] | None = None) -> PanelPicture:
    """The picture with its mosaic coloured at the size ``fit`` shows it, for the worker to call so that the GUI
    thread only paints."""
    height, width = picture.arrangement.size
    if picture.flat or not (height and width):
        return picture
    return replace(picture, rendered=render_mosaic(picture.arrangement, lut_of(picture), fit))


# ---- the wheel: scroll the page of panels, Ctrl+wheel zooms ------------------------------------------------------
