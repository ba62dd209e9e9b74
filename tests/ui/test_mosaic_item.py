"""Mosaics coloured off the GUI thread at the size a panel shows them, and painted whole once zoomed in past that."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import RUN_TIMEOUT_MS
from PIL import Image
from PySide6.QtCore import QPoint, QPointF, QRectF
from PySide6.QtGui import QImage, QPainter

from hookscope.core.common.resources import colormap_lut
from hookscope.core.engine.hooks import Record
from hookscope.core.pictures.panels import PanelPicture, PanelSettings, picture_of
from hookscope.core.pictures.views import under_centres
from hookscope.ui.state.rendering import FIT_PADDING, fitted_size, nearest, render_mosaic, rendered_for, with_rendering
from hookscope.ui.widgets.feature_map_panel import FeatureMapPanel


def record(values: torch.Tensor, kind: str = "forward") -> Record:
    return Record("layer", kind, 0, "", "register_forward_hook", values)


def rgb(qimage, x: int, y: int) -> tuple[int, int, int]:
    return tuple(qimage.pixelColor(x, y).getRgb()[:3])


def test_a_whole_mosaic_is_coloured_through_its_colormap(qapp) -> None:
    picture = picture_of(record(torch.rand(1, 16, 9, 9)), PanelSettings(colormap="inferno"))
    rendered = render_mosaic(picture.arrangement, "inferno")
    image = picture.arrangement.image
    assert rendered.is_full and rendered.qimage.size().toTuple() == image.shape[::-1]
    lut = colormap_lut("inferno")
    for y, x in ((0, 0), (4, 5), (9, 9), (image.shape[0] - 1, image.shape[1] - 1)):  # (9, 9): padding
        assert rgb(rendered.qimage, x, y) == tuple(int(c) for c in lut[image[y, x]])


def constant_channels(count: int, side: int) -> PanelPicture:
    """``count`` channels of ``side`` x ``side``, each one value (channel c: c / count), on one shared scale: every
    pixel of a tile has its channel's colour, so where a pixel shows which tile can be read off its colour."""
    values = (torch.arange(count, dtype=torch.float32) / count).view(1, count, 1, 1).expand(1, count, side, side)
    return picture_of(record(values.contiguous()), PanelSettings(scaling="shared"))


def assert_shows_the_mosaic_scaled(rendered, picture: PanelPicture) -> None:
    """Every pixel of the rendered image shows the tile (or padding) of the whole mosaic under its centre, as the
    raster engine shows the whole mosaic painted at that size; pixels within a step of a tile's edge may show
    either side of the edge."""
    full = render_mosaic(picture.arrangement, "viridis")
    layout = picture.arrangement.layout
    height, width = picture.arrangement.size
    w, h = rendered.qimage.width(), rendered.qimage.height()
    step = max(width / w, height / h)
    checked = 0
    for y in range(0, h, 3):
        for x in range(0, w, 3):
            fx, fy = (x + 0.5) * width / w, (y + 0.5) * height / h
            near = {
                layout.tile_at(fx + dx, fy + dy) for dx in (-step - 1, 0, step + 1) for dy in (-step - 1, 0, step + 1)
            }
            if len(near) == 1:  # well inside one tile, or the padding
                checked += 1
                assert rgb(rendered.qimage, x, y) == rgb(full.qimage, int(fx), int(fy)), (x, y)
    assert checked > w * h / 9 / 4  # most of the image was checked


def test_a_large_mosaic_is_coloured_at_exactly_the_size_shown(qapp) -> None:
    picture = constant_channels(256, 56)  # a 911 x 911 mosaic
    height, width = picture.arrangement.size
    assert (height, width) == (911, 911)
    fit = (300, 280)  # a view box's size in device pixels
    shown = fitted_size(width, height, fit)
    assert shown == (round(280 / (1 + 2 * FIT_PADDING)),) * 2  # the height limits; the padding around it
    rendered = render_mosaic(picture.arrangement, "viridis", fit=fit)
    assert not rendered.is_full
    assert (rendered.qimage.width(), rendered.qimage.height()) == shown  # painted pixel for pixel, no scaling
    assert_shows_the_mosaic_scaled(rendered, picture)


def test_a_small_mosaic_is_coloured_enlarged_to_the_size_shown(qapp) -> None:
    picture = constant_channels(16, 7)  # a 31 x 31 mosaic in a view box of 300 x 280
    height, width = picture.arrangement.size
    shown = fitted_size(width, height, (300, 280))
    assert shown[0] > 8 * width
    rendered = render_mosaic(picture.arrangement, "viridis", fit=(300, 280))
    assert (rendered.qimage.width(), rendered.qimage.height()) == shown and not rendered.is_full
    assert_shows_the_mosaic_scaled(rendered, picture)


def test_nearest_keeps_the_pixel_under_each_centre() -> None:
    image = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert nearest(image, (4, 3)) is image
    np.testing.assert_array_equal(nearest(image, (2, 3)), image[:, [1, 3]])  # centres at 1.0 and 3.0
    np.testing.assert_array_equal(nearest(image, (8, 6)), image.repeat(2, axis=0).repeat(2, axis=1))
    assert under_centres(7, 3).tolist() == [1, 3, 5]  # centres at 7/6, 3.5 and 35/6: no rounding


def test_the_workers_rendering_is_used_only_while_it_fits(qapp) -> None:
    picture = with_rendering(picture_of(record(torch.rand(1, 8, 6, 6)), PanelSettings()), fit=(400, 400))
    assert rendered_for(picture) is picture.rendered
    recoloured = picture.with_settings(PanelSettings(colormap="gray"))  # same mosaic, another colormap
    assert rendered_for(recoloured) is not picture.rendered and rendered_for(recoloured).lut == "gray"
    large = picture_of(record(torch.rand(1, 256, 56, 56)), PanelSettings()).with_settings(PanelSettings("gray"))
    coloured = rendered_for(large, (300, 300))  # recoloured on the GUI thread: at the size shown, not whole
    assert not coloured.is_full and coloured.lut == "gray" and coloured.qimage.width() < large.arrangement.size[1]
    flat = with_rendering(picture_of(record(torch.zeros(1, 8, 6, 6), kind="backward"), PanelSettings()), (400, 400))
    assert flat.flat and flat.rendered is None  # a flat panel shows a message, nothing to colour


def test_zooming_in_past_the_workers_copy_paints_the_whole_mosaic(qtbot) -> None:
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    fit = panel.view_size()
    assert fit is not None and min(fit) >= 50, fit
    picture = with_rendering(picture_of(record(torch.rand(1, 256, 56, 56)), PanelSettings()), fit)
    assert not picture.rendered.is_full, fit
    panel.show_picture(picture)
    panel._view.grab()  # a paint at the size the worker was told
    assert panel._mosaic._full is None
    panel._viewbox.setRange(QRectF(0, 0, 56, 56), padding=0)  # one tile fills the view
    panel._view.grab()
    full = panel._mosaic._full
    assert full is not None and full.is_full and full.arrangement is picture.arrangement


def test_a_zoom_shows_without_another_paint_asked_for(qtbot) -> None:
    """A zoom (Ctrl+wheel, a pan, the double-click's fit) changes the view box's range, and pyqtgraph applies it at
    the views' next paint: the view must be repainted by the event loop alone, with no grab forcing a paint (on a
    real screen nothing else paints it, and the zoom did not show until the next run)."""
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    empty = panel._viewbox.childGroup.transform().m11()
    panel.show_picture(with_rendering(picture_of(record(torch.rand(1, 16, 9, 9)), PanelSettings()), panel.view_size()))
    box = panel._viewbox  # pyqtgraph applies a new range at the view's next paint (``_matrixNeedsUpdate`` till then)
    qtbot.waitUntil(lambda: not box._matrixNeedsUpdate and box.childGroup.transform().m11() != empty)  # fit painted
    fitted = panel._viewbox.childGroup.transform().m11()  # view box units to pixels, as painted
    panel._viewbox.setRange(QRectF(0, 0, 9, 9), padding=0)  # one tile of a 39-pixel-wide mosaic fills the view
    qtbot.waitUntil(lambda: panel._viewbox.childGroup.transform().m11() > 3 * fitted, timeout=2000)


@pytest.mark.parametrize("shape", [(1, 4, 5, 5), (1, 6)])
def test_nan_and_inf_become_zero_with_a_note(shape: tuple[int, ...]) -> None:
    values = torch.rand(*shape)
    flat = values.view(-1)
    flat[3], flat[-1] = float("nan"), float("inf")
    picture = picture_of(record(values), PanelSettings())
    assert np.isfinite(picture.channels.data).all()
    assert picture.channels.data.reshape(-1)[3] == 0 and picture.channels.data.reshape(-1)[-1] == 0
    assert "2 non-finite values (NaN/inf) replaced by 0" in picture.channels.note
    if picture.arrangement.ranges is not None:
        low, high = picture.arrangement.ranges
        assert np.isfinite(low).all() and np.isfinite(high).all()
        assert picture.arrangement.image.shape == picture.arrangement.size


def pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, : image.width() * 4].reshape(image.height(), image.width(), 4)[..., :3].copy()


@pytest.mark.parametrize("ratio", [1.0, 2.0, 1.25])
def test_a_panel_paints_the_workers_mosaic_pixel_for_pixel(qtbot, ratio: float) -> None:
    """At the size the worker was told (the view box's, in device pixels), the mosaic lands on the screen as the
    worker coloured it, on every device pixel ratio (here painted into an image of that ratio, as a high-DPI
    screen's backing store is)."""
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    values = torch.rand(1, 256, 56, 56, generator=torch.Generator().manual_seed(0))
    panel.show_picture(with_rendering(picture_of(record(values), PanelSettings()), None))
    panel.layout().activate()  # laid out with a picture now, not at the event loop's next turn
    fit = panel.view_size()
    assert fit is not None
    picture = with_rendering(
        picture_of(record(values), PanelSettings()), (round(fit[0] * ratio), round(fit[1] * ratio))
    )
    panel.show_picture(picture)
    worker = picture.rendered.qimage
    view = panel._view
    target = QImage(
        round(view.width() * ratio), round(view.height() * ratio), QImage.Format.Format_ARGB32_Premultiplied
    )
    target.setDevicePixelRatio(ratio)
    target.fill(0)
    painter = QPainter(target)
    view.render(painter, QRectF(0, 0, view.width(), view.height()))
    painter.end()
    item = panel._mosaic
    shown = item.deviceTransform(view.viewportTransform()).mapRect(item.boundingRect())
    # the view shows the mosaic at exactly the size of the worker's image: painted as it is, not scaled
    assert (round(shown.width() * ratio), round(shown.height() * ratio)) == (worker.width(), worker.height())
    x, y = round(shown.left() * ratio), round(shown.top() * ratio)
    painted = pixels(target)[y : y + worker.height(), x : x + worker.width()]
    np.testing.assert_array_equal(painted, pixels(worker))
    assert panel._mosaic._full is None  # the worker's copy was enough


@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_the_mosaic_lands_where_its_view_is_in_a_shared_backing_store(qtbot, ratio: float) -> None:
    """On a real screen every widget paints into the window's one backing store, through a painter already moved
    to the widget's place in the window: rendering the whole panel into an image at an offset does the same. The
    mosaic must land under its view there too (it once landed offset twice over: black panels on a real display,
    unseen by ``grab()``, which paints each widget on its own at the origin)."""
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    values = torch.rand(1, 64, 28, 28, generator=torch.Generator().manual_seed(1))
    panel.show_picture(with_rendering(picture_of(record(values), PanelSettings()), None))
    panel.layout().activate()  # laid out with a picture now, not at the event loop's next turn
    fit = panel.view_size()
    picture = with_rendering(
        picture_of(record(values), PanelSettings()), (round(fit[0] * ratio), round(fit[1] * ratio))
    )
    panel.show_picture(picture)
    worker = picture.rendered.qimage
    offset = QPoint(37, 53)  # where the panel sits in the "window"
    target = QImage(
        round((panel.width() + 80) * ratio),
        round((panel.height() + 80) * ratio),
        QImage.Format.Format_ARGB32_Premultiplied,
    )
    target.setDevicePixelRatio(ratio)
    target.fill(0)
    panel.render(target, offset)
    view = panel._view
    item = panel._mosaic
    shown = item.deviceTransform(view.viewportTransform()).mapRect(item.boundingRect())
    place = view.viewport().mapTo(panel, QPoint(0, 0)) + offset
    x, y = round((place.x() + shown.left()) * ratio), round((place.y() + shown.top()) * ratio)
    painted = pixels(target)[y : y + worker.height(), x : x + worker.width()]
    np.testing.assert_array_equal(painted, pixels(worker))


def test_a_zoomed_or_resized_panel_paints_the_mosaic_scaled(qtbot) -> None:
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    values = torch.rand(1, 16, 7, 7, generator=torch.Generator().manual_seed(0))
    panel.show_picture(with_rendering(picture_of(record(values), PanelSettings()), None))
    panel.layout().activate()  # laid out with a picture now, not at the event loop's next turn
    picture = with_rendering(picture_of(record(values), PanelSettings()), panel.view_size())
    panel.show_picture(picture)
    before = pixels(panel._view.grab().toImage())
    panel.resize(400, 480)  # larger than the worker was told: the same picture, scaled up
    qtbot.waitUntil(lambda: (panel.width(), panel.height()) == (400, 480))  # a window's resize comes back as an event
    panel._viewbox.fit()
    after = pixels(panel._view.grab().toImage())
    background = panel._view.backgroundBrush().color().getRgb()[:3]
    area = lambda image: int((image != background).any(axis=2).sum())  # noqa: E731  (the mosaic's pixels)
    assert area(after) > 1.2 * area(before)  # the mosaic fills the larger view
    colours = lambda image: {tuple(c) for c in image.reshape(-1, 3)}  # noqa: E731
    assert colours(pixels(picture.rendered.qimage)) <= colours(after)  # every colour of the mosaic still shows


def test_a_panel_shows_a_picture_without_its_full_resolution_values(qtbot) -> None:
    """Mosaic, legend and labels come from what the worker prepared (ranges, the coloured image): the values at full
    resolution reach the CPU only when something reads them, here a hover."""
    panel = FeatureMapPanel("layer", "tensor", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    picture = with_rendering(picture_of(record(torch.rand(1, 64, 28, 28), kind="tensor"), PanelSettings()), (300, 300))
    panel.show_picture(picture)
    panel._view.grab()
    assert panel.legend.legend is not None and "|grad|" in panel.legend.text()
    assert picture.channels._data is None
    x, y = picture.arrangement.layout.tile_origin(5)
    panel._on_mouse_moved(panel._viewbox.mapViewToScene(QPointF(x + 0.5, y + 0.5)))
    assert panel._footer.text().startswith("channel 5 · |grad|") and picture.channels._data is not None


def test_a_runs_new_pictures_are_painted_in_one_repaint_of_the_window(window, qtbot) -> None:
    """A video's every frame gives each panel in view a new picture. Through ``QGraphicsItem.update()`` the scene
    queued the repaint of each plot for a later turn of the event loop: the window repainted once for the panels'
    labels and again for each plot, 5.3 repaints a frame (``python -m hookscope.ui.bench_live``), each one a pass over
    the window and a copy to the screen."""
    from PySide6.QtCore import QEvent, QObject

    from hookscope.ui.state.requests import ImageSource

    class Passes(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Type.UpdateRequest:
                self.count += 1
            return False

    area = window.panel_area
    panels = [p for p in area.panels.values() if area.in_view(p, ahead=0) and p.picture is not None]
    assert len(panels) >= 2
    pixels = np.asarray(window.workspace.last.image.load())
    qtbot.wait(200)  # part of the measure: the repaints the first run queued land before the counting starts
    passes = Passes()
    window.installEventFilter(passes)
    runs = 4
    for index in range(runs):
        frame = ImageSource(f"clip.mp4 · frame {index}", None, Image.fromarray(np.roll(pixels, index * 8, axis=1)),
                            frame=True)  # fmt: skip
        with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
            window.workspace.request_image(frame, debounce=False)
        qtbot.wait(150)  # part of the measure: every repaint the run queued is counted within this time
        records = {id(r) for r in window.workspace.last.result.records}
        assert all(id(p.picture.record) in records for p in panels)
    window.removeEventFilter(passes)
    # one repaint a run, and a few for the status bar's lines and the like; not one more for each plot
    assert passes.count < runs * 2, f"{passes.count} repaints of the window for {runs} runs of {len(panels)} plots"
