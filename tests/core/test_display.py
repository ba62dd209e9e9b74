"""Panels prepared where the tensors are: the device path (``hookscope.core.pictures.display``) against the numpy one (``views``).

The torch mosaic (``device_mosaic``) is what a CUDA or MPS run draws with; here it runs on CPU tensors, and must
give the very bytes ``views.mosaic`` gives for the same values, step, scaling and order.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookscope.core.engine.hooks import Record
from hookscope.core.pictures.display import (
    channel_ranges,
    device_mosaic,
    display_channels,
    display_of_array,
    draw_mosaic,
    saliency_map,
    signed_mosaic,
)
from hookscope.core.pictures.panels import PanelSettings, picture_of
from hookscope.core.pictures.views import ChannelData, as_channels, grad_magnitude, mosaic, without_non_finite

RNG = np.random.default_rng(12)


def _values(*shape: int, scale: float = 1.0) -> np.ndarray:
    return np.asarray(RNG.normal(size=shape) * scale, dtype=np.float32)


def _numpy_picture(array: np.ndarray, magnitude: bool) -> ChannelData:
    """What the panels drew before the device path: ``export.record_picture``'s numpy, 1x1 maps as a vector, then
    NaN and inf replaced."""
    channels = as_channels(grad_magnitude(array) if magnitude else array, check_finite=False)
    if channels.kind == "maps" and channels.data.shape[1:] == (1, 1) and channels.data.shape[0] > 1:
        note = "; ".join(n for n in (channels.note, "1×1 maps shown as a vector") if n)
        channels = ChannelData("vector", channels.data.reshape(-1), note)
    return without_non_finite(channels)


SHAPES = {
    "maps": (1, 9, 13, 17),
    "odd tiles": (1, 5, 1, 23),
    "one map": (1, 1, 7, 5),
    "one pixel maps": (1, 6, 1, 1),
    "vector": (1, 40),
    "scalar": (),
    "vit tokens": (1, 197, 12),
    "tokens without class token": (1, 49, 6),
    "not a grid": (11, 20),
    "channels last": (7, 7, 30),
    "5-d": (2, 3, 4, 5, 6),
    "no batch": (12, 8, 8),
}


@pytest.mark.parametrize("magnitude", [False, True], ids=["values", "gradient"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_a_record_is_shaped_and_cleaned_as_the_numpy_path_does(name: str, magnitude: bool) -> None:
    array = _values(*SHAPES[name], scale=3.0)
    if array.size > 4:
        flat = array.reshape(-1)
        flat[1], flat[-2] = np.nan, -np.inf
    expected = _numpy_picture(array, magnitude)
    channels = display_channels(torch.from_numpy(array.copy()), magnitude)
    assert channels.kind == expected.kind and channels.note == expected.note
    assert channels.shape == expected.data.shape and channels.count == expected.data.shape[0]
    assert channels.data.dtype == np.float32 and channels.data.flags.c_contiguous
    np.testing.assert_array_equal(channels.data, expected.data)
    if channels.kind == "maps":
        low, high = channels.ranges
        np.testing.assert_array_equal(low, expected.data.reshape(expected.data.shape[0], -1).min(axis=1))
        np.testing.assert_array_equal(high, expected.data.reshape(expected.data.shape[0], -1).max(axis=1))
    else:
        assert channels.ranges is None


def test_the_range_of_a_gradients_magnitude_is_exact_not_anchored_at_zero() -> None:
    # every channel straddles 0 but holds no 0: the smallest |grad| is the value nearest 0, not 0
    grad = np.array([[[-2.0, 0.5], [1.5, -0.25]], [[3.0, -1.0], [0.125, 2.0]]], dtype=np.float32)
    low, high = display_channels(torch.from_numpy(grad), magnitude=True).ranges
    assert low.tolist() == [0.25, 0.125] and high.tolist() == [2.0, 3.0]


def test_complex_values_are_drawn_as_magnitudes() -> None:
    values = torch.tensor([[3 + 4j, 0 + 1j, -1 + 0j]], dtype=torch.complex64)
    channels = display_channels(values)
    assert channels.kind == "vector" and channels.note == "complex values shown as magnitudes"
    assert channels.data.tolist() == [5.0, 1.0, 1.0]


def test_half_and_integer_records_are_drawn_as_float32() -> None:
    assert display_channels(torch.arange(6, dtype=torch.int64)).data.dtype == np.float32
    half = torch.randn(1, 3, 4, 4).half()
    np.testing.assert_array_equal(display_channels(half).data, half[0].float().numpy())


def test_empty_maps_have_empty_ranges_and_an_empty_mosaic() -> None:
    channels = display_channels(torch.zeros(4, 0, 3))
    assert channels.kind == "maps" and channels.ranges[0].tolist() == [0.0] * 4
    image, layout = device_mosaic(channels, "channel")
    assert image.shape == (0, 0) and layout.rows == 0
    assert device_mosaic(display_channels(torch.zeros(0, 5, 5)), "shared")[0].shape == (0, 0)


def _maps_cases() -> list:
    cases = []
    for shape in [(12, 9, 13), (5, 1, 23), (3, 17, 1), (1, 7, 5), (64, 3, 3), (37, 11, 8)]:
        for scaling in ("channel", "shared"):
            cases.append(pytest.param(shape, scaling, id=f"{'x'.join(map(str, shape))}-{scaling}"))
    return cases


@pytest.mark.parametrize("shape, scaling", _maps_cases())
def test_the_device_mosaic_has_the_bytes_of_the_numpy_mosaic(shape: tuple[int, int, int], scaling: str) -> None:
    for magnitude in (False, True):
        for scale in (1e-3, 1.0, 1e4):
            array = _values(1, *shape, scale=scale) + np.float32(scale * 0.7)  # ranges away from 0 as well
            channels = display_channels(torch.from_numpy(array), magnitude)
            expected_values = np.abs(array[0]) if magnitude else array[0]
            count = shape[0]
            orders = [None, RNG.permutation(count), np.array([count - 1, 0, -1])[: max(1, min(3, count))]]
            for order in orders:
                for step in (1, 2, 3, 5):
                    for pad in (0, 1, 2):
                        got, layout = device_mosaic(channels, scaling, order, step, pad)
                        want, want_layout = mosaic(expected_values, scaling, pad=pad, order=order, step=step)
                        assert layout == want_layout
                        np.testing.assert_array_equal(got, want, err_msg=f"{magnitude=} {scale=} {order=} {step=}")


def test_the_device_mosaic_of_channels_with_nan_inf_and_flat_values() -> None:
    array = _values(1, 7, 6, 6)
    array[0, 1, 2, 3] = np.nan
    array[0, 2] = np.inf  # a whole channel of inf: 0 after cleaning, a flat tile
    array[0, 4, 0, 0] = -np.inf
    array[0, 5] = 0.25  # flat
    channels = display_channels(torch.from_numpy(array))
    assert channels.note == "38 non-finite values (NaN/inf) replaced by 0"
    cleaned = np.nan_to_num(array[0], nan=0.0, posinf=0.0, neginf=0.0)
    for scaling in ("channel", "shared"):
        for step in (1, 2, 4):
            np.testing.assert_array_equal(
                device_mosaic(channels, scaling, None, step)[0], mosaic(cleaned, scaling, step=step)[0]
            )
            np.testing.assert_array_equal(
                draw_mosaic(channels, scaling, None, step)[0], mosaic(cleaned, scaling, step=step)[0]
            )


@pytest.mark.parametrize("shape", [(1, 197, 12), (7, 7, 30), (1, 2, 3, 6, 5)], ids=["tokens", "channels last", "5-d"])
def test_strided_views_are_drawn_without_a_copy_first(shape: tuple[int, ...]) -> None:
    array = _values(*shape)
    tensor = torch.from_numpy(array)
    channels = display_channels(tensor)
    assert channels.values.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()  # a view
    expected = _numpy_picture(array, False).data
    for step in (1, 2, 3):
        order = np.arange(expected.shape[0])[::-1]
        np.testing.assert_array_equal(
            device_mosaic(channels, "channel", order, step)[0], mosaic(expected, "channel", order=order, step=step)[0]
        )


def test_draw_mosaic_checks_what_it_is_given() -> None:
    maps = display_channels(torch.randn(4, 5, 5))
    with pytest.raises(ValueError, match="step"):
        device_mosaic(maps, "channel", step=0)
    with pytest.raises(ValueError, match="out of range"):
        device_mosaic(maps, "channel", np.array([0, 4]))
    with pytest.raises(ValueError, match="draws maps"):
        draw_mosaic(display_channels(torch.randn(6)), "channel")


def test_channel_ranges_show_nan_and_inf_as_the_numpy_ranges_do() -> None:
    maps = torch.tensor([[[1.0, float("nan")]], [[float("inf"), -2.0]], [[0.5, 0.25]]])
    low, high = channel_ranges(maps)
    assert np.isnan(low[0]) and np.isnan(high[0])
    assert low[1] == -2.0 and high[1] == np.inf and (low[2], high[2]) == (0.25, 0.5)


def test_statistics_come_from_the_device_values() -> None:
    array = _values(1, 16, 5, 5)
    channels = display_channels(torch.from_numpy(array), magnitude=True)
    magnitudes = np.abs(array[0]).reshape(16, -1)
    np.testing.assert_array_equal(channels.maxima(), magnitudes.max(axis=1))
    np.testing.assert_allclose(channels.means(), magnitudes.mean(axis=1), rtol=1e-6)
    vector = display_channels(torch.tensor([3.0, -1.0, 2.0]))
    assert vector.maxima().tolist() == vector.means().tolist() == [3.0, -1.0, 2.0]


def test_a_difference_already_in_numpy_is_drawn_as_it_is() -> None:
    difference = _values(4, 3, 3)
    difference[1, 1, 1] = np.nan
    channels = display_of_array(ChannelData("maps", difference, "a note"))
    assert channels.note == "a note; 1 non-finite value (NaN/inf) replaced by 0"
    assert channels.data[1, 1, 1] == 0 and (channels.data[0] == difference[0]).all()
    pooled = display_of_array(ChannelData("maps", _values(5, 1, 1)))
    assert pooled.kind == "vector" and pooled.shape == (5,) and pooled.note == "1×1 maps shown as a vector"


def test_a_picture_keeps_its_full_values_on_the_device_until_they_are_read() -> None:
    values = torch.randn(1, 32, 20, 20)
    picture = picture_of(Record("layer", "tensor", 0, "", "Tensor.register_hook", values), PanelSettings(sort="max"))
    assert picture.shape == (1, 32, 20, 20) and picture.channel_count == 32 and not picture.flat
    assert picture.arrangement.sampled(3).shape == (6 * 8 - 1, 6 * 8 - 1)
    assert picture.channels._data is None  # neither arranging, sorting nor drawing made the full numpy array
    np.testing.assert_array_equal(picture.channels.data, values[0].abs().numpy())
    order = np.argsort(-values[0].abs().amax(dim=(1, 2)).numpy(), kind="stable")
    np.testing.assert_array_equal(picture.arrangement.order, order)


def _signed_reference(maps: np.ndarray, scaling: str, order: np.ndarray | None, pad: int, step: int = 1) -> np.ndarray:
    """The A − B mosaic as it was drawn in numpy, tile by tile (magnitudes from every pixel, then sampled)."""
    count_all = maps.shape[0]
    magnitude = np.abs(maps).reshape(count_all, -1).max(axis=1)
    if scaling == "shared":
        magnitude = np.full_like(magnitude, magnitude.max(initial=0.0))
    scale = np.divide(127.0, magnitude, out=np.zeros_like(magnitude), where=magnitude > 0)
    maps = maps[:, ::step, ::step]
    h, w = maps.shape[1:]
    index = np.arange(count_all) if order is None else np.asarray(order)
    cols = max(1, min(int(np.ceil(np.sqrt(index.size))), index.size))
    rows = -(-index.size // cols)
    picture = np.zeros((rows * (h + pad) - pad, cols * (w + pad) - pad), dtype=np.uint8)
    for tile, channel in enumerate(index):
        row, col = divmod(tile, cols)
        scaled = maps[channel] * scale[channel] + np.float32(128.5)
        picture[row * (h + pad) : row * (h + pad) + h, col * (w + pad) : col * (w + pad) + w] = np.clip(scaled, 1, 255)
    return picture


@pytest.mark.parametrize("scaling", ["channel", "shared"])
def test_the_signed_mosaic_is_zero_at_128_and_sampled_as_the_others(scaling: str) -> None:
    maps = _values(10, 9, 7, scale=2.0)
    maps[3] = 0.0  # no difference at all
    maps[4] = np.abs(maps[4])  # only positive
    channels = display_of_array(ChannelData("maps", maps))
    for order in (None, np.array([9, 3, 0, 4])):
        for pad in (0, 1):
            for step in (1, 2, 3):
                image, layout = signed_mosaic(channels, scaling, order, step, pad)
                assert (layout.tile_h, layout.tile_w) == (-(-9 // step), -(-7 // step))
                np.testing.assert_array_equal(image, _signed_reference(maps, scaling, order, pad, step))
    assert (signed_mosaic(channels, scaling, np.array([3]))[0] == 128).all()


def test_the_cpus_magnitudes_and_ranges_are_torchs_values_to_the_bit() -> None:
    """On the CPU |values| and the per-channel ranges are numpy's (no PyTorch thread team woken): the very values
    torch gives (-0.0, and NaN and inf in the ranges, included), for contiguous and strided records."""
    values = torch.from_numpy(_values(1, 6, 9, 11))
    values[0, 4, 1, 1] = -0.0
    for record in (values, values.transpose(2, 3)):
        shown = display_channels(record, magnitude=True)
        assert torch.equal(shown.values, record[0].abs())
        assert not torch.signbit(shown.values).any()  # -0.0 became 0.0, as torch's abs makes it
    raw = values.clone()
    raw[0, 1, 2, 3], raw[0, 2, 0, 0], raw[0, 3, 4, 4] = float("nan"), float("inf"), -float("inf")
    for maps in (raw[0], raw[0].transpose(1, 2)):
        low, high = channel_ranges(maps)
        flat = maps.flatten(1)
        np.testing.assert_array_equal(low, flat.amin(dim=1).numpy())  # NaN where torch's is NaN
        np.testing.assert_array_equal(high, flat.amax(dim=1).numpy())
        assert low.dtype == high.dtype == np.float32


def test_the_saliency_map_is_the_largest_magnitude_over_the_colours() -> None:
    grad = torch.from_numpy(_values(1, 3, 7, 5))
    grad[0, 1, 2, 2] = float("nan")
    shown = saliency_map(grad)
    expected = grad[0].abs().amax(dim=0).numpy()
    assert shown.shape == (7, 5) and shown.dtype == np.float32 and shown.flags.c_contiguous
    np.testing.assert_array_equal(shown, expected)  # NaN where torch has NaN, the same values elsewhere
    half = saliency_map(grad.to(torch.bfloat16))  # not numpy's: torch's own path
    np.testing.assert_array_equal(half, grad.to(torch.bfloat16)[0].abs().amax(dim=0).float().numpy())
