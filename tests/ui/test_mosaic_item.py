"""Mosaics coloured off the GUI thread at the size a panel shows them, and painted whole once zoomed in past that."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QRectF

from app.core.hooks import Record
from app.core.pictures import PanelSettings, picture_of
from app.core.resources import colormap_lut
from app.ui.state.rendering import fitted_size, render_mosaic, rendered_for, with_rendering
from app.ui.widgets.feature_map_panel import FeatureMapPanel


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


def test_a_large_mosaic_is_coloured_at_about_the_size_shown(qapp) -> None:
    picture = picture_of(record(torch.rand(1, 256, 56, 56)), PanelSettings())  # a 911 x 911 mosaic
    arrangement = picture.arrangement
    height, width = arrangement.size
    shown = fitted_size(width, height, (300, 280))
    rendered = render_mosaic(arrangement, "viridis", fit=(300, 280))
    assert not rendered.is_full
    # every step-th pixel of each tile: never fewer pixels than the screen shows, at most about twice as many
    assert shown[0] <= rendered.qimage.width() < 2 * shown[0]
    assert shown[1] <= rendered.qimage.height() < 2 * shown[1]
    step = min(width // shown[0], height // shown[1])
    full = render_mosaic(arrangement, "viridis")
    layout = arrangement.layout
    tile_h, tile_w = -(-layout.tile_h // step), -(-layout.tile_w // step)
    for channel in (0, 100, 255):
        full_x, full_y = layout.tile_origin(channel)
        row, col = divmod(channel, layout.cols)
        x, y = col * (tile_w + layout.pad), row * (tile_h + layout.pad)
        for dy, dx in ((0, 0), (5, 7), (tile_h - 1, tile_w - 1)):
            assert rgb(rendered.qimage, x + dx, y + dy) == rgb(full.qimage, full_x + dx * step, full_y + dy * step)


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
