"""Layer outputs to pictures: token grids, channel interpretation, mosaics and their hit testing."""

from __future__ import annotations

import numpy as np
import pytest

from hookscope.core.pictures.views import (
    ChannelData,
    MosaicLayout,
    as_channels,
    channel_ranges,
    channel_stats,
    grad_magnitude,
    mosaic,
    mosaic_layout,
    mosaic_size,
    shaped,
    sort_order,
    to_uint8,
)

RNG = np.random.default_rng(0)


def _random(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape).astype(np.float32)


# --- tokens laid back on their grid -----------------------------------------------------------------


def test_vit_b16_tokens_are_a_grid_without_the_class_token() -> None:
    tokens = _random(197, 768)
    kind, grid, notes = shaped(tokens)
    assert kind == "maps" and grid.shape == (768, 14, 14)
    assert np.array_equal(grid, tokens[1:].reshape(14, 14, 768).transpose(2, 0, 1))
    assert "class token" in notes[0] and "14x14" in notes[0]


def test_tokens_without_a_class_token_are_a_grid() -> None:
    tokens = _random(196, 32)
    kind, grid, notes = shaped(tokens)
    assert kind == "maps" and grid.shape == (32, 14, 14)
    assert np.array_equal(grid[:, 2, 3], tokens[2 * 14 + 3])
    assert "class token" not in notes[0]


def test_vit_b32_tokens_are_a_7x7_grid() -> None:
    tokens = _random(50, 16)
    _kind, grid, _notes = shaped(tokens)
    assert grid.shape == (16, 7, 7)
    assert np.array_equal(grid[:, 0, 0], tokens[1])


def test_tokens_that_are_no_grid_are_shown_as_one_map() -> None:
    for count in (198, 0):
        kind, grid, notes = shaped(_random(count, 8))
        assert kind == "maps" and grid.shape == (1, count, 8) and notes == [f"{count}x8 output shown as one map"]


# --- as_channels --------------------------------------------------------------------------------------


def test_as_channels_batched_maps() -> None:
    array = _random(1, 8, 5, 6)
    result = as_channels(array)
    assert isinstance(result, ChannelData)
    assert result.kind == "maps" and result.data.shape == (8, 5, 6)
    assert result.data.dtype == np.float32
    assert np.array_equal(result.data, array[0])


def test_as_channels_batched_vector() -> None:
    result = as_channels(_random(1, 1000))
    assert result.kind == "vector" and result.data.shape == (1000,)


def test_as_channels_scalar() -> None:
    result = as_channels(np.float64(2.5))
    assert result.kind == "scalar" and result.data.shape == (1,) and result.data[0] == 2.5


def test_as_channels_vit_tokens() -> None:
    array = _random(1, 197, 768)
    result = as_channels(array)
    assert result.kind == "maps" and result.data.shape == (768, 14, 14)
    assert np.array_equal(result.data, array[0, 1:].T.reshape(768, 14, 14))
    assert "class token" in result.note


def test_as_channels_non_grid_2d_is_one_map() -> None:
    result = as_channels(_random(11, 20))
    assert result.kind == "maps" and result.data.shape == (1, 11, 20)


def test_as_channels_channels_last() -> None:
    array = _random(7, 7, 768)
    result = as_channels(array)
    assert result.kind == "maps" and result.data.shape == (768, 7, 7)
    assert np.array_equal(result.data[5], array[:, :, 5])
    assert "channels-last" in result.note
    batched = as_channels(array[np.newaxis])
    assert batched.data.shape == (768, 7, 7)


def test_as_channels_channels_first_is_kept() -> None:
    result = as_channels(_random(64, 7, 7))
    assert result.data.shape == (64, 7, 7) and result.note == ""


def test_as_channels_merges_leading_dims() -> None:
    result = as_channels(_random(2, 3, 4, 5, 6))
    assert result.kind == "maps" and result.data.shape == (24, 5, 6)


def test_as_channels_replaces_non_finite() -> None:
    array = _random(1, 2, 3, 3)
    array[0, 0, 0, 0] = np.nan
    array[0, 1, 2, 2] = np.inf
    result = as_channels(array)
    assert np.isfinite(result.data).all()
    assert result.data[0, 0, 0] == 0 and result.data[1, 2, 2] == 0
    assert "non-finite" in result.note


def test_as_channels_integer_input() -> None:
    result = as_channels(np.arange(6, dtype=np.int64))
    assert result.kind == "vector" and result.data.dtype == np.float32


# --- mosaic -------------------------------------------------------------------------------------------


def test_mosaic_shape_and_layout() -> None:
    maps = _random(10, 5, 7)
    picture, layout = mosaic(maps, pad=2)
    assert layout == MosaicLayout(channels=10, cols=4, rows=3, tile_h=5, tile_w=7, pad=2)
    assert picture.shape == (3 * 7 - 2, 4 * 9 - 2)
    assert picture.dtype == np.uint8 and picture.flags["C_CONTIGUOUS"]
    assert picture[5:7, :].max() == 0  # padding rows
    assert picture[:, 7:9].max() == 0  # padding columns
    assert picture[14:, 2 * 9 :].max() == 0  # empty tiles after the last channel


def test_mosaic_explicit_cols() -> None:
    picture, layout = mosaic(_random(6, 3, 3), cols=6, pad=0)
    assert (layout.cols, layout.rows) == (6, 1)
    assert picture.shape == (3, 18)


def test_mosaic_per_channel_scaling() -> None:
    maps = _random(9, 4, 4)
    maps[3] *= 100
    maps[4] = 7.0  # constant
    picture, layout = mosaic(maps)
    for channel in range(9):
        x, y = layout.tile_origin(channel)
        tile = picture[y : y + 4, x : x + 4]
        if channel == 4:
            assert tile.max() == 0
            continue
        assert tile.max() == 255 and tile.min() == 0
        expected = np.rint((maps[channel] - maps[channel].min()) / np.ptp(maps[channel]) * 255)
        assert np.abs(tile.astype(int) - expected).max() <= 1


def test_mosaic_shared_scaling() -> None:
    maps = np.stack([np.full((2, 2), 0.0), np.full((2, 2), 1.0), np.full((2, 2), 2.0)]).astype(np.float32)
    picture, layout = mosaic(maps, scaling="shared", pad=1)
    values = [int(picture[y, x]) for x, y in (layout.tile_origin(c) for c in range(3))]
    assert values == [0, 128, 255]


def test_mosaic_handles_non_finite_and_rejects_bad_scaling() -> None:
    maps = _random(2, 3, 3)
    maps[0, 0, 0] = np.nan
    picture, _ = mosaic(maps)
    assert picture.shape == (3, 7)
    with pytest.raises(ValueError):
        mosaic(maps, scaling="log")


def test_tile_at_centres_and_padding() -> None:
    maps = _random(7, 6, 4)
    picture, layout = mosaic(maps, pad=1)
    for channel in range(7):
        x, y = layout.tile_origin(channel)
        assert layout.tile_at(x + 2.0, y + 3.0) == channel
        assert layout.tile_at(x + 3.9, y + 5.9) == channel
    assert layout.tile_at(4.0, 1.0) is None  # padding column
    assert layout.tile_at(1.0, 6.5) is None  # padding row
    assert layout.tile_at(-1.0, 0.0) is None
    assert layout.tile_at(1.0 * picture.shape[1] + 3, 0.0) is None
    x, y = 2 * 5 + 1, 2 * 7 + 1  # the empty 9th tile
    assert layout.tile_at(x, y) is None


def test_tile_at_with_order() -> None:
    maps = np.arange(5, dtype=np.float32)[:, None, None] * np.ones((5, 3, 3), dtype=np.float32)
    maps += RNG.normal(size=maps.shape).astype(np.float32) * 0.01
    order = sort_order(maps.mean(axis=(1, 2)))
    assert order.tolist() == [4, 3, 2, 1, 0]
    picture, layout = mosaic(maps, scaling="shared", order=order)
    assert layout.order == (4, 3, 2, 1, 0)
    assert layout.tile_at(1.0, 1.0) == 4  # first tile shows the strongest channel
    for channel in range(5):
        x, y = layout.tile_origin(channel)
        assert layout.tile_at(x + 1.5, y + 1.5) == channel
    x, y = layout.tile_origin(4)
    assert (x, y) == (0, 0) and picture[y + 1, x + 1] >= 250


def test_tile_origin_out_of_range() -> None:
    _, layout = mosaic(_random(3, 2, 2))
    with pytest.raises(IndexError):
        layout.tile_origin(3)


def test_mosaic_large_inputs() -> None:
    for shape in ((2048, 7, 7), (512, 56, 56)):
        picture, layout = mosaic(_random(*shape))
        c, h, w = shape
        assert layout.channels == c
        assert picture.shape == (layout.rows * (h + 1) - 1, layout.cols * (w + 1) - 1)


# --- stats and helpers --------------------------------------------------------------------------------


def test_channel_stats_maps() -> None:
    maps = np.maximum(_random(6, 5, 5), 0)
    stats = channel_stats(maps)
    flat = maps.reshape(6, -1).astype(np.float64)
    np.testing.assert_allclose(stats["mean"], flat.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(stats["max"], flat.max(axis=1))
    np.testing.assert_allclose(stats["min"], flat.min(axis=1))
    np.testing.assert_allclose(stats["std"], flat.std(axis=1), rtol=1e-6)
    np.testing.assert_allclose(stats["zero_fraction"], (flat == 0).mean(axis=1))


def test_channel_stats_vector() -> None:
    vector = np.array([0.0, 2.0, -1.0], dtype=np.float32)
    stats = channel_stats(vector)
    assert stats["mean"].tolist() == [0.0, 2.0, -1.0]
    assert stats["std"].tolist() == [0.0, 0.0, 0.0]
    assert stats["zero_fraction"].tolist() == [1.0, 0.0, 0.0]


def test_grad_magnitude() -> None:
    result = grad_magnitude(np.array([-2.0, 0.5], dtype=np.float64))
    assert result.dtype == np.float32 and result.tolist() == [2.0, 0.5]


def test_to_uint8() -> None:
    values = np.array([[0.0, 1.0], [2.0, 4.0]], dtype=np.float32)
    assert to_uint8(values).tolist() == [[0, 64], [128, 255]]
    assert to_uint8(values, lo=0.0, hi=2.0).tolist() == [[0, 128], [255, 255]]
    assert to_uint8(np.full((2, 2), 3.0)).max() == 0


def test_sort_order_is_stable() -> None:
    values = np.array([1.0, 3.0, 1.0, 3.0, 2.0])
    assert sort_order(values).tolist() == [1, 3, 4, 0, 2]
    assert sort_order(values, descending=False).tolist() == [0, 2, 4, 1, 3]


def _reference_mosaic(maps: np.ndarray, cols: int, pad: int) -> np.ndarray:
    """The obvious per-channel loop, to check the vectorised version against."""
    count, h, w = maps.shape
    rows = -(-count // cols)
    picture = np.zeros((rows * (h + pad) - pad, cols * (w + pad) - pad), dtype=np.uint8)
    for channel in range(count):
        row, col = divmod(channel, cols)
        tile = maps[channel].astype(np.float64)
        span = tile.max() - tile.min()
        scaled = np.zeros_like(tile) if span == 0 else (tile - tile.min()) / span * 255
        y, x = row * (h + pad), col * (w + pad)
        picture[y : y + h, x : x + w] = np.floor(scaled + 0.5)
    return picture


@pytest.mark.parametrize("shape, pad", [((2000, 7, 7), 1), ((37, 30, 20), 0), ((3, 64, 64), 3)])
def test_mosaic_matches_reference_loop_with_order(shape: tuple[int, int, int], pad: int) -> None:
    maps = _random(*shape)
    order = RNG.permutation(shape[0])
    picture, layout = mosaic(maps, pad=pad, order=order)
    expected = _reference_mosaic(maps[order], layout.cols, pad)
    assert picture.shape == expected.shape
    assert np.abs(picture.astype(int) - expected).max() <= 1


def test_mosaic_shared_scaling_spans_the_values_not_zero() -> None:
    maps = np.stack([np.full((2, 2), v) for v in (1.0, 2.0, 3.0)]).astype(np.float32)
    picture, layout = mosaic(maps, scaling="shared")
    assert [int(picture[y, x]) for x, y in (layout.tile_origin(c) for c in range(3))] == [0, 128, 255]


@pytest.mark.parametrize("step", [2, 3])
def test_mosaic_step_keeps_every_step_th_pixel_scaled_by_all_values(step: int) -> None:
    maps = _random(10, 17, 13)
    maps[4, 1, 1] = 50.0  # a channel's maximum on a pixel the sampling drops: it still sets the channel's scale
    order = RNG.permutation(10)
    sampled, layout = mosaic(maps, order=order, step=step)
    assert (layout.tile_h, layout.tile_w) == (-(-17 // step), -(-13 // step))
    assert layout.order == tuple(int(i) for i in order)
    low, high = channel_ranges(maps)
    for channel in order:
        x, y = layout.tile_origin(int(channel))
        tile = sampled[y : y + layout.tile_h, x : x + layout.tile_w].astype(int)
        expected = np.floor((maps[channel, ::step, ::step] - low[channel]) / (high[channel] - low[channel]) * 255 + 0.5)
        assert np.abs(tile - expected).max() <= 1
    assert mosaic(maps, order=order, step=step, ranges=(low, high))[0].tolist() == sampled.tolist()
    assert mosaic(maps, step=1)[0].tolist() == mosaic(maps)[0].tolist()
    with pytest.raises(ValueError):
        mosaic(maps, step=0)


def test_mosaic_layout_and_size_match_the_drawn_mosaic() -> None:
    maps = _random(11, 5, 7)
    picture, layout = mosaic(maps, pad=2)
    assert mosaic_layout(11, 5, 7, pad=2) == layout
    assert mosaic_size(layout) == picture.shape


def test_channel_ranges_show_nan_and_inf() -> None:
    maps = _random(3, 4, 4)
    maps[1, 0, 0], maps[2, 3, 3] = np.nan, np.inf
    low, high = channel_ranges(maps)
    assert np.isfinite(low[0]) and np.isfinite(high[0])
    assert np.isnan(low[1]) and np.isnan(high[1]) and high[2] == np.inf
    assert low[0] == maps[0].min() and high[0] == maps[0].max()
