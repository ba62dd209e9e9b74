"""Turning layer outputs and gradients into 2-D pictures: numpy arrays in and out, so it is cheap to test and reuse.

The caller converts tensors to numpy; torch is used only inside ``channel_ranges``, as a faster reduction. How a
record's shape becomes channels (``shaped``) works on numpy arrays and torch tensors alike, so the panels' device
path (``hookscope.core.pictures.display``) and the exports shape a record the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class ChannelData:
    """A layer output in one of three shapes the views can draw, and how it got that shape.

    Not changed after it is made. ``data`` is a numpy array here; ``display.DisplayChannels`` makes it only when
    first read (the full-resolution values of a panel, which most runs never need on the CPU)."""

    def __init__(self, kind: str, data: np.ndarray | None, note: str = "") -> None:
        self.kind = kind  # "maps" (C,H,W) | "vector" (C,) | "scalar" (1,)
        self._data = data
        self.note = note

    @property
    def data(self) -> np.ndarray:
        assert self._data is not None
        return self._data

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of ``data`` (known without making it)."""
        return tuple(self.data.shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!r}, {self.shape}, {self.note!r})"


def shape_text(shape: Iterable[int], times: str = "×") -> str:
    """A shape as words: "64×56×56" for the window's labels; the notes of ``shaped`` write it "64x56x56"."""
    return times.join(str(int(n)) for n in shape)


def _perfect_square_side(n: int) -> int | None:
    if n <= 0:
        return None
    side = math.isqrt(n)
    return side if side * side == n else None


def _grid(tokens: Any) -> tuple[Any, str] | None:
    """Transformer tokens (N, C) laid back on their patch grid as (C, s, s) with a note, the class token dropped
    where N is one more than a square; None when N is not a grid. For numpy arrays and torch tensors alike (a strided
    view, no copy)."""
    if tokens.ndim != 2:
        return None
    n, c = tokens.shape
    side = _perfect_square_side(n)
    if side is not None:
        return tokens.T.reshape(c, side, side), f"tokens {n}x{c} -> {side}x{side} grid"
    side = _perfect_square_side(n - 1)
    if side is not None:
        return tokens[1:].T.reshape(c, side, side), f"tokens {n}x{c} -> {side}x{side} grid (class token dropped)"
    return None


def shaped(data: Any) -> tuple[str, Any, list[str]]:
    """Any layer output (real values, numpy or torch) as (kind, values, notes): "maps" (C, H, W), "vector" (C,) or
    "scalar" (1,). Only operations numpy and torch share, so the values come back as the same type, a view where
    one can be had (no copy: the caller decides when to pay for a contiguous one)."""
    notes: list[str] = []
    if data.ndim >= 2 and data.shape[0] == 1:
        data = data[0]
    if data.ndim == 0:
        return "scalar", data.reshape(1), notes
    if data.ndim == 1:
        return "vector", data, notes
    if data.ndim == 2:
        grid = _grid(data)
        if grid is not None:
            notes.append(grid[1])
            return "maps", grid[0], notes
        notes.append(f"{shape_text(data.shape, times='x')} output shown as one map")
        return "maps", data[None], notes
    if data.ndim == 3:
        h, w, c = data.shape
        if h == w and c > h:
            notes.append(f"channels-last {h}x{w}x{c} -> {c} maps of {h}x{w}")
            return "maps", data.swapaxes(0, 2).swapaxes(1, 2), notes
        return "maps", data, notes
    original = tuple(data.shape)
    data = data.reshape(-1, original[-2], original[-1])
    notes.append(
        f"{len(original)}-D output {shape_text(original, times='x')} -> "
        f"{data.shape[0]} maps of {original[-2]}x{original[-1]} (leading dims merged)"
    )
    return "maps", data, notes


def as_channels(array: np.ndarray, check_finite: bool = True) -> ChannelData:
    """Interpret any layer output as maps, a vector or a scalar, so every layer gets a sensible picture.

    NaN and inf become 0 (with a note); ``check_finite=False`` leaves that to a caller that finds them on a pass
    it makes anyway (``without_non_finite``)."""
    data = np.asarray(array)
    notes: list[str] = []
    if np.iscomplexobj(data):
        data = np.abs(data)
        notes.append("complex values shown as magnitudes")
    kind, data, shape_notes = shaped(data.astype(np.float32, copy=False))
    notes += shape_notes
    channels = ChannelData(kind=kind, data=np.ascontiguousarray(data, dtype=np.float32), note="; ".join(notes))
    # A NaN or inf anywhere makes the sum non-finite: one pass with no temporary array, and only then (or on an
    # overflowing sum of finite values) the full check that counts and replaces them.
    if check_finite and channels.data.size and not np.isfinite(channels.data.sum()):
        channels = without_non_finite(channels)
    return channels


def non_finite_note(bad: int) -> str:
    return f"{bad} non-finite value{'s' if bad != 1 else ''} (NaN/inf) replaced by 0"


def without_non_finite(channels: ChannelData) -> ChannelData:
    """NaN and inf replaced by 0, with a note saying how many (the same channels when there are none)."""
    finite = np.isfinite(channels.data)
    if finite.all():
        return channels
    note = non_finite_note(int(channels.data.size - np.count_nonzero(finite)))
    data = np.where(finite, channels.data, np.float32(0))
    return ChannelData(channels.kind, data, "; ".join(n for n in (channels.note, note) if n))


@dataclass(frozen=True)
class MosaicLayout:
    """Where each channel sits in a mosaic, so a mouse position can be mapped back to a channel."""

    channels: int
    cols: int
    rows: int
    tile_h: int
    tile_w: int
    pad: int
    order: tuple[int, ...] | None = None

    def tile_at(self, x: float, y: float) -> int | None:
        """Channel index under mosaic pixel (x = column, y = row); None in padding or past the last tile."""
        if not (math.isfinite(x) and math.isfinite(y)) or x < 0 or y < 0:
            return None
        step_x, step_y = self.tile_w + self.pad, self.tile_h + self.pad
        if step_x <= 0 or step_y <= 0:
            return None
        xi, yi = math.floor(x), math.floor(y)
        col, row = xi // step_x, yi // step_y
        if xi - col * step_x >= self.tile_w or yi - row * step_y >= self.tile_h:
            return None
        if col >= self.cols or row >= self.rows:
            return None
        tile = row * self.cols + col
        if tile >= self.channels:
            return None
        return self.order[tile] if self.order is not None else tile

    def tile_origin(self, index: int) -> tuple[int, int]:
        """Top-left (x, y) of the tile showing channel ``index`` (with ``order``, wherever it was placed)."""
        if self.order is not None:
            try:
                tile = self.order.index(index)
            except ValueError:
                raise IndexError(f"Channel {index} is not shown in this mosaic.") from None
        else:
            if not 0 <= index < self.channels:
                raise IndexError(f"Channel {index} is out of range (0..{self.channels - 1}).")
            tile = index
        row, col = divmod(tile, self.cols)
        return col * (self.tile_w + self.pad), row * (self.tile_h + self.pad)


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    if not np.isfinite(values).all():
        values = np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
    return values


def mosaic_layout(
    count: int, h: int, w: int, cols: int | None = None, pad: int = 1, order: tuple[int, ...] | None = None
) -> MosaicLayout:
    """Where ``count`` tiles of h x w go: about square, ``cols`` wide if given."""
    if count == 0 or h == 0 or w == 0:
        return MosaicLayout(count, 0, 0, h, w, pad, order)
    if cols is None:
        cols = math.ceil(math.sqrt(count))
    cols = max(1, min(int(cols), count))
    return MosaicLayout(count, cols, math.ceil(count / cols), h, w, pad, order)


def mosaic_size(layout: MosaicLayout) -> tuple[int, int]:
    """(height, width) of a mosaic in pixels."""
    if not layout.rows:
        return 0, 0
    return layout.rows * (layout.tile_h + layout.pad) - layout.pad, layout.cols * (
        layout.tile_w + layout.pad
    ) - layout.pad


def under_centres(source: int, shown: int) -> np.ndarray:
    """For each of ``shown`` pixels spanning ``source`` pixels, the source pixel under its centre:
    floor((i + 1/2) * source / shown), in integers (no rounding): what the raster engine shows of an image painted
    scaled without smoothing, and the rule a mosaic shown at another size follows (``rendering.nearest``)."""
    return (np.arange(shown) * 2 + 1) * source // (2 * shown)


def channel_ranges(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (min, max) of (C, H, W) maps: what per-channel scaling needs, computed once per picture.
    A NaN in a channel makes its min and max NaN (an inf shows as one of them)."""
    flat = np.asarray(maps, dtype=np.float32).reshape(maps.shape[0], -1)
    if not flat.shape[1]:
        zeros = np.zeros(flat.shape[0], dtype=np.float32)
        return zeros, zeros.copy()
    if flat.flags.c_contiguous and flat.flags.writeable:
        # torch's reductions use every core, numpy's one: on a ResNet-50 run's 40 records, 3.8 ms against 6.5 ms
        # (medians of 10 runs). torch only reads the array's memory here.
        values = torch.from_numpy(flat)
        return values.amin(dim=1).numpy(), values.amax(dim=1).numpy()
    return flat.min(axis=1), flat.max(axis=1)


def _mosaic_maps(maps: np.ndarray, scaling: str, pad: int, step: int) -> np.ndarray:
    """``mosaic``'s maps as float32 (C, H, W) (one (H, W) map is one channel), its other arguments checked."""
    values = np.asarray(maps, dtype=np.float32)
    if values.ndim == 2:
        values = values[np.newaxis]
    if values.ndim != 3:
        raise ValueError(f"mosaic expects maps of shape (C, H, W), got {values.shape}.")
    if scaling not in ("channel", "shared"):
        raise ValueError(f"Unknown scaling '{scaling}'; use 'channel' or 'shared'.")
    if pad < 0:
        raise ValueError("mosaic pad must not be negative.")
    if step < 1:
        raise ValueError("mosaic step must be at least 1.")
    return values


def _mosaic_order(order: np.ndarray | None, total: int) -> np.ndarray | None:
    """``mosaic``'s channel order as non-negative indexes (negative ones count from the end), checked."""
    if order is None:
        return None
    index = np.asarray(order, dtype=np.intp).reshape(-1)
    if index.size and (index.min() < -total or index.max() >= total):
        raise ValueError("mosaic order holds a channel index out of range.")
    return np.where(index < 0, index + total, index)


def mosaic(
    maps: np.ndarray,
    scaling: str = "channel",
    cols: int | None = None,
    pad: int = 1,
    order: np.ndarray | None = None,
    *,
    step: int = 1,
    ranges: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, MosaicLayout]:
    """All channels of (C,H,W) as one uint8 picture of tiles: one image upload instead of C widgets.

    ``step`` > 1 keeps every step-th row and column of each tile (a picture to show scaled down: the scaling still
    comes from every value); ``ranges`` are the maps' ``channel_ranges`` when the caller already has them.
    """
    values = _mosaic_maps(maps, scaling, pad, step)
    index = _mosaic_order(order, values.shape[0])
    order_tuple = tuple(int(i) for i in index) if index is not None else None

    count = values.shape[0] if index is None else index.size
    layout = mosaic_layout(count, -(-values.shape[1] // step), -(-values.shape[2] // step), cols, pad, order_tuple)
    if not layout.rows:
        return np.zeros((0, 0), dtype=np.uint8), layout
    rows, cols, h, w = layout.rows, layout.cols, layout.tile_h, layout.tile_w

    lo, scale = _scaling(values, scaling, ranges)
    if lo is None:  # NaN or inf somewhere: only then pay for a cleaned copy
        values = _finite(values)
        lo, scale = _scaling(values, scaling)
    assert lo is not None and scale is not None
    if index is not None and scaling == "channel":
        lo, scale = lo[index], scale[index]
    if step > 1:
        values = values[:, ::step, ::step]

    picture = np.zeros(mosaic_size(layout), dtype=np.uint8)
    # A (rows, h, cols, w) window onto the tiles' pixels of the final picture: written once, no padding pass.
    row_stride = picture.strides[0]
    tiles = np.lib.stride_tricks.as_strided(
        picture,
        shape=(rows, h, cols, w),
        strides=((h + pad) * row_stride, row_stride, (w + pad), 1),
        writeable=True,
    )
    # A few tile rows at a time through one small reused buffer: a fresh full-size float temporary costs
    # more in page faults than the arithmetic. The loop is over tile rows (a few dozen), not channels.
    step_rows = max(1, _CHUNK_VALUES // (cols * h * w))
    buffer = np.empty(min(rows, step_rows) * cols * h * w, dtype=np.float32)
    per_channel = lo.shape[0] > 1
    for first_row in range(0, rows, step_rows):
        start, stop = first_row * cols, min(count, (first_row + step_rows) * cols)
        n = stop - start
        work = buffer[: n * h * w].reshape(n, h, w)
        source = values[start:stop] if index is None else values[index[start:stop]]
        chunk_lo = lo[start:stop] if per_channel else lo
        chunk_scale = scale[start:stop] if per_channel else scale
        # (v - lo) * 255 / span + 0.5 lies in [0.5, 255.5], so the uint8 cast rounds and cannot wrap.
        np.subtract(source, chunk_lo, out=work)
        np.multiply(work, chunk_scale, out=work)
        np.add(work, np.float32(0.5), out=work)
        full = n // cols
        if full:
            block = work[: full * cols].reshape(full, cols, h, w)
            tiles[first_row : first_row + full] = block.transpose(0, 2, 1, 3)
        if n > full * cols:
            tiles[first_row + full, :, : n - full * cols] = work[full * cols :].transpose(1, 0, 2)
    return picture, layout


_CHUNK_VALUES = 1 << 16


def _scaling(
    values: np.ndarray, scaling: str, ranges: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-channel (or shared) offset and factor to 0..255; (None, None) when values are not all finite."""
    factors = scaling_factors(ranges if ranges is not None else channel_ranges(values), scaling)
    return factors if factors is not None else (None, None)


def scaling_factors(ranges: tuple[np.ndarray, np.ndarray], scaling: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, scale), float32 of shape (C, 1, 1) (per channel) or (1, 1, 1) (shared), that take a value v to
    ``(v - lo) * scale + 0.5`` in [0.5, 255.5], so a uint8 cast rounds; None when a range is not finite. The one
    definition of the scaling: ``mosaic`` here and the device mosaic (``hookscope.core.pictures.display``) both use it, so both
    give the same bytes."""
    low, high = ranges
    if scaling == "channel":
        lo, hi = low.reshape(-1, 1, 1), high.reshape(-1, 1, 1)
    else:
        lo = np.full((1, 1, 1), low.min() if low.size else 0.0, dtype=np.float32)
        hi = np.full((1, 1, 1), high.max() if high.size else 0.0, dtype=np.float32)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return None
    span = hi.astype(np.float64) - lo.astype(np.float64)
    scale = np.divide(255.0, span, out=np.zeros_like(span), where=span > 0).astype(np.float32)
    return lo.astype(np.float32, copy=False), scale


STATS_KEYS = ("mean", "max", "min", "std", "zero_fraction")


def channel_stats(maps: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel mean, max, min, std and fraction of exact zeros (``STATS_KEYS``), in float64: the statistics
    export's columns, and the channel view's figures (of one channel: ``maps[np.newaxis]``)."""
    values = np.asarray(maps)
    if values.ndim == 0:
        values = values.reshape(1)
    flat = values.reshape(values.shape[0], -1).astype(np.float64, copy=False)
    if flat.shape[1] == 0:
        empty = np.zeros(flat.shape[0], dtype=np.float64)
        return {key: empty.copy() for key in STATS_KEYS}
    return {
        "mean": flat.mean(axis=1),
        "max": flat.max(axis=1),
        "min": flat.min(axis=1),
        "std": flat.std(axis=1),
        "zero_fraction": np.count_nonzero(flat == 0, axis=1) / flat.shape[1],
    }


def grad_magnitude(array: np.ndarray) -> np.ndarray:
    """Gradients matter by size, not sign, when looking for what the output is sensitive to."""
    return np.abs(np.asarray(array)).astype(np.float32, copy=False)


def to_uint8(map2d: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """One map to 0..255 between lo and hi (its own min/max by default); a flat map becomes 0."""
    values = _finite(map2d)
    if values.size == 0:
        return np.zeros(values.shape, dtype=np.uint8)
    low = float(values.min()) if lo is None else float(lo)
    high = float(values.max()) if hi is None else float(hi)
    if not high > low:
        return np.zeros(values.shape, dtype=np.uint8)
    scaled = (values - np.float32(low)) * np.float32(255.0 / (high - low)) + np.float32(0.5)
    return np.clip(scaled, 0, 255).astype(np.uint8)


def sort_order(values: np.ndarray, descending: bool = True) -> np.ndarray:
    """Stable channel order by a statistic (e.g. mean activation or |grad|); ties keep channel order."""
    keys = np.asarray(values, dtype=np.float64).reshape(-1)
    return np.argsort(-keys if descending else keys, kind="stable")
