"""The Attention panel (issue 43, item 2): one tile per head of the class token's attention over the patch grid,
a click on a patch of the input makes it the query, the heads' mean, DINO's view, rollout, and the map over the
input as Grad-CAM's is. The pictures are checked against the run's own attention record."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookscope.core.common.resources import colormap_lut
from hookscope.core.pictures.attention import dino_masks, head_maps, token_layout
from hookscope.ui.features.attention import COLORMAP, DOCK_ID, AttentionFeature

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def vit_space(qtbot):
    pytest.importorskip("timm")
    from hookscope.ui.state.workspace import Workspace

    space = Workspace(weights="none", ticks=["blocks.0.norm1"])
    space.attach_view(lambda: (300, 300))
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        space.start("timm/vit_tiny_patch16_224", None)
    yield space
    space.shutdown()


def weights_of(space, path: str) -> torch.Tensor:
    return next(r.tensor for r in space.last.result.records if (r.kind, r.key) == ("attention", path))[0]


def test_the_panel_shows_each_heads_attention_and_a_clicked_patch_becomes_the_query(vit_space, host, qtbot):
    feature = AttentionFeature(vit_space, host)
    with qtbot.waitSignal(vit_space.run_applied, timeout=RUN_TIMEOUT_MS):
        assert feature.show_module("blocks.11.attn")  # ticks Attn: the hooks go on, a run follows
    assert vit_space.registry.has("blocks.11.attn", "attention")
    assert host.docks[DOCK_ID] is feature.dock
    weights = weights_of(vit_space, "blocks.11.attn")
    layout = token_layout(197)
    expected = head_maps(weights, layout, 0)
    picture = feature.picture
    assert picture is not None and picture.tiles.shape == (3, 14, 14)
    np.testing.assert_allclose(picture.tiles, expected / expected.max(axis=(1, 2), keepdims=True), rtol=1e-6)
    assert "class token" in feature.query_label.text()
    mosaic = feature.tiles_item.image
    assert mosaic.shape == (29, 29, 3)  # 3 tiles of 14 x 14 in a 2 x 2 layout, 1-pixel gaps
    np.testing.assert_array_equal(mosaic[:14, :14], colormap_lut(COLORMAP)[feature.tiles_image()[:14, :14]])

    assert feature.click_input(3 * 16 + 5, 2 * 16 + 9)  # the patch in row 2, column 3 of the 224 x 224 input
    query = 1 + 2 * 14 + 3
    assert feature.query == query and "patch (row 2, column 3)" in feature.query_label.text()
    clicked = head_maps(weights, layout, query)
    np.testing.assert_allclose(feature.picture.tiles, clicked / clicked.max(axis=(1, 2), keepdims=True), rtol=1e-6)
    xs, ys = feature.marker.getData()  # the outline of the clicked patch, on the input's pixels
    assert feature.marker.isVisible() and list(xs) == [48, 64, 64, 48, 48] and list(ys) == [32, 32, 48, 48, 32]
    assert not feature.click_input(300, 10)  # outside the image: the query stays
    feature.class_button.click()
    assert feature.query == 0


def test_the_mean_dino_and_rollout_views_and_the_overlay(vit_space, host, qtbot):
    feature = AttentionFeature(vit_space, host)
    with qtbot.waitSignal(vit_space.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.show_module("blocks.10.attn")
    weights = weights_of(vit_space, "blocks.10.attn")
    maps = head_maps(weights, token_layout(197), 0)
    feature.view_box.setCurrentIndex(feature.view_box.findData("mean"))
    mean = maps.mean(0)
    np.testing.assert_allclose(feature.picture.tiles[0], mean / mean.max(), rtol=1e-6)
    feature.view_box.setCurrentIndex(feature.view_box.findData("dino"))
    feature.keep.setValue(40)
    np.testing.assert_array_equal(feature.picture.tiles.astype(bool), dino_masks(maps, 0.4))
    feature.view_box.setCurrentIndex(feature.view_box.findData("rollout"))
    assert feature.picture.tiles.shape == (1, 14, 14) and "Rollout (all layers) of 1 layers" in feature.title.text()
    # The overlay: at opacity 1 the input shows the map's colours, patch by patch.
    feature.opacity.setValue(100)
    shown = feature.input_item.image
    lut = colormap_lut(COLORMAP)
    level = np.round(feature.picture.overlay[5, 7] * 255).astype(int)
    assert tuple(shown[5 * 16 + 8, 7 * 16 + 8]) == tuple(lut[level])
