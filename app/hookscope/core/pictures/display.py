"""What a panel draws, prepared where the run's tensors are: on the record's own device.

A record keeps the tensor its hook saw on the run's device (``Record.data``). A panel needs, per record, a few
numbers per channel (its range: the scaling, the legend, the flat-panel check) and a uint8 mosaic at about the size
the panel shows (``draw_mosaic``: every step-th pixel of each tile). Both are made on that device, so after a run
on a GPU only those cross to the CPU, not the tensors. The full-resolution values (``DisplayChannels.data``, numpy)
are made only when something reads them: a hover, the channel view, an export.

The torch here is device-agnostic (no numpy on device tensors, no float64 on the device: MPS has none), so it runs
on CUDA and MPS as on the CPU (where the tests check it); the scaling factors come from one place
(``views.scaling_factors``, numpy on the CPU, a few numbers per channel), so the device mosaic has the same bytes as
``views.mosaic`` on the same values. On the CPU the mosaic is ``views.mosaic`` itself, on the tensor's own memory.
"""

from __future__ import annotations

import numpy as np
import torch

from hookscope.core.pictures.views import (
    ChannelData,
    MosaicLayout,
    mosaic,
    mosaic_layout,
    mosaic_size,
    non_finite_note,
    scaling_factors,
    shaped,
)

Ranges = tuple[np.ndarray, np.ndarray]


class DisplayChannels(ChannelData):
    """A record's values as its panel draws them, kept as a torch tensor on the run's device.

    ``values``: what is drawn (|grad| for gradients), float32, finite (NaN and inf replaced by 0, with a note),
    shaped as ``kind`` says: (C, H, W) maps, (C,) vector or (1,) scalar. ``ranges``: for maps, the per-channel
    (min, max) of the values, as numpy (made at once: the scaling, the legend and the flat-panel check need it).
    ``data``: the values at full resolution as numpy, made on first use (on the CPU, a view of the same memory)."""

    def __init__(
        self, kind: str, values: torch.Tensor, note: str, ranges: Ranges | None, data: np.ndarray | None = None
    ) -> None:
        super().__init__(kind, data, note)
        self.values = values
        self.ranges = ranges

    @property
    def data(self) -> np.ndarray:
        if self._data is None:  # two threads may both make it: equal arrays, so either one is kept
            self._data = np.ascontiguousarray(self.values.cpu().numpy(), dtype=np.float32)
        return self._data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def count(self) -> int:
        """How many channels (maps) or values (vectors, scalars)."""
        return int(self.values.shape[0])

    def maxima(self) -> np.ndarray:
        """Per-channel maximum of what is drawn (the values themselves for vectors), float32."""
        if self.kind == "maps":
            assert self.ranges is not None
            return self.ranges[1]
        return self.data.reshape(-1)

    def means(self) -> np.ndarray:
        """Per-channel mean of what is drawn (the values themselves for vectors), float32, on the device."""
        if self.kind != "maps":
            return self.data.reshape(-1)
        if not self.values.numel():
            return np.zeros(self.count, dtype=np.float32)
        return self.values.flatten(1).mean(dim=1).cpu().numpy()


def display_channels(data: torch.Tensor, magnitude: bool = False) -> DisplayChannels:
    """Any tensor a hook saw, as a panel draws it (``views.shaped``; 1x1 maps as a vector), on its own device.
    ``magnitude``: drawn as |values| (gradients). Complex values are drawn as magnitudes.

    |grad| is one full pass (a copy): its per-channel range cannot come from the signed range, whose ends give the
    largest |v| but not the smallest (the value nearest 0, wherever the range holds 0), and torch has no fused
    min-of-|v| that is not slower than the copy (``linalg.vector_norm(ord=-inf)``: about 20x amin on the CPU)."""
    notes: list[str] = []
    data = data.detach()
    if data.is_complex():
        data = data.abs()
        notes.append("complex values shown as magnitudes")
    elif magnitude:
        data = _absolute(data)
    kind, values, shape_notes = shaped(data.float())
    notes += shape_notes
    if kind == "maps" and tuple(values.shape[1:]) == (1, 1) and values.shape[0] > 1:
        kind, values = "vector", values.reshape(-1)  # pooled features say more as a bar plot than as single pixels
        notes.append("1×1 maps shown as a vector")
    return _finite(kind, values, notes)


def display_of_array(channels: ChannelData) -> DisplayChannels:
    """Values already on the CPU as numpy (the A − B difference), drawn as they are (no magnitude)."""
    values = torch.from_numpy(np.ascontiguousarray(channels.data, dtype=np.float32))
    kind, notes = channels.kind, [channels.note] if channels.note else []
    if kind == "maps" and tuple(values.shape[1:]) == (1, 1) and values.shape[0] > 1:
        kind, values = "vector", values.reshape(-1)
        notes.append("1×1 maps shown as a vector")
    return _finite(kind, values, notes)


def _finite(kind: str, values: torch.Tensor, notes: list[str]) -> DisplayChannels:
    """NaN and inf replaced by 0 with a note saying how many, found for maps from their ranges (which the mosaic
    needs anyway: a NaN or inf shows in them), so a finite record costs no extra pass."""
    if kind == "maps":
        ranges = channel_ranges(values)
        finite = bool(np.isfinite(ranges[0]).all() and np.isfinite(ranges[1]).all())
    else:
        ranges = None
        finite = bool(torch.isfinite(values).all()) if values.numel() else True
    if not finite:
        bad = int(values.numel() - int(torch.isfinite(values).sum()))
        values = torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
        notes = [*notes, non_finite_note(bad)]
        if kind == "maps":
            ranges = channel_ranges(values)
    return DisplayChannels(kind, values, "; ".join(notes), ranges)


# The CPU's values are drawn with numpy, not torch. A torch operation on a tensor of more than 32,768 values runs on
# PyTorch's OpenMP thread team: on any thread but the model's (the pictures of panels scrolled in, a recording) it
# starts a second team, which slows every run after it (``hookscope.ui.state.worker.model_pool``). numpy's operations are
# single-threaded, and as fast at these sizes (a live video's pictures took 3.3 ms a frame either way).
_NUMPY_DTYPES = (torch.float32, torch.float64)


def _absolute(data: torch.Tensor) -> torch.Tensor:
    """|data| (real values): numpy's on the CPU, the same values (the sign bit cleared, NaN kept)."""
    if data.device.type == "cpu" and data.dtype in _NUMPY_DTYPES:
        return torch.from_numpy(np.asarray(np.abs(data.numpy())))  # asarray: a 0-d one gives a numpy scalar
    return data.abs()


def saliency_map(input_grad: torch.Tensor) -> np.ndarray:
    """max over the channels of |the input's gradient|, (H, W) float32: reduced where the gradient is (a GPU run's,
    if the engine keeps it there: only the map moves); on the CPU with numpy, which wakes no thread team (see
    ``_NUMPY_DTYPES``)."""
    grad = input_grad[0].detach()
    if grad.device.type == "cpu" and grad.dtype == torch.float32:
        return np.ascontiguousarray(np.abs(grad.numpy()).max(axis=0))
    return np.ascontiguousarray(grad.abs().amax(dim=0).float().cpu().numpy())


def channel_ranges(maps: torch.Tensor) -> Ranges:
    """Per-channel (min, max) of (C, H, W) maps on their device, as numpy float32; a NaN in a channel makes its
    min and max NaN (an inf shows as one of them), as ``views.channel_ranges``."""
    count = maps.shape[0]
    if not count or not maps[0].numel():
        zeros = np.zeros(count, dtype=np.float32)
        return zeros, zeros.copy()
    flat = maps.flatten(1)
    if flat.device.type == "cpu" and flat.dtype in _NUMPY_DTYPES:  # numpy: see _NUMPY_DTYPES
        values = flat.numpy()
        return values.min(axis=1).astype(np.float32, copy=False), values.max(axis=1).astype(np.float32, copy=False)
    if flat.device.type == "cuda":  # one pass over the values
        both = torch.stack(torch.aminmax(flat, dim=1))
    else:  # two passes, but vectorised: torch 2.14's CPU aminmax is about 6x slower than amin and amax apart
        both = torch.stack((flat.amin(dim=1), flat.amax(dim=1)))
    ranges = both.cpu().numpy()  # one transfer
    return ranges[0], ranges[1]


def draw_mosaic(
    channels: DisplayChannels, scaling: str, order: np.ndarray | None = None, step: int = 1, pad: int = 1
) -> tuple[np.ndarray, MosaicLayout]:
    """The uint8 mosaic of ``channels``' maps, keeping every ``step``-th row and column of each tile (``views.mosaic``
    with the same arguments gives the same bytes), drawn where the values are: only the finished image comes to
    the CPU.

    On the CPU the values' memory is numpy's too, and ``views.mosaic`` draws it (chunks through a buffer that stays
    in cache: 1.1-1.5x faster than the same arithmetic as torch's eager operations, measured single-threaded on
    ResNet-50's layers); on any other device ``device_mosaic`` draws it there."""
    if channels.kind != "maps" or channels.ranges is None:
        raise ValueError("draw_mosaic draws maps.")
    if channels.values.device.type == "cpu":
        return mosaic(channels.values.numpy(), scaling, pad=pad, order=order, step=step, ranges=channels.ranges)
    return device_mosaic(channels, scaling, order, step, pad)


def device_mosaic(
    channels: DisplayChannels, scaling: str, order: np.ndarray | None = None, step: int = 1, pad: int = 1
) -> tuple[np.ndarray, MosaicLayout]:
    """``views.mosaic`` as torch operations on the values' device (CUDA, MPS; the CPU in tests): the same scaling
    factors (``views.scaling_factors``, computed on the CPU), the same float32 operations in the same order and the
    same truncating cast, so the same bytes. Only the sampled pixels are read, and only the uint8 image moves."""
    assert channels.ranges is not None
    factors = scaling_factors(channels.ranges, scaling)
    assert factors is not None, "DisplayChannels hold finite values"
    lo, scale = factors
    sampled, layout, index = _sampled(channels, order, step, pad)
    if sampled is None:
        return np.zeros((0, 0), dtype=np.uint8), layout
    if index is not None and scaling == "channel":
        lo, scale = lo[index], scale[index]
    device = sampled.device
    # (v - lo) * scale + 0.5, each step rounded to float32 as numpy does it, in one buffer of the sampled size
    # (contiguous whatever the values' strides: a token grid is a transposed view)
    work = torch.empty(sampled.shape, dtype=torch.float32, device=device)
    torch.sub(sampled, torch.from_numpy(lo).to(device), out=work)
    work.mul_(torch.from_numpy(scale).to(device)).add_(0.5)
    return _placed(work, layout), layout


def signed_mosaic(
    channels: DisplayChannels, scaling: str, order: np.ndarray | None = None, step: int = 1, pad: int = 1
) -> tuple[np.ndarray, MosaicLayout]:
    """Signed maps (an A − B difference) as a uint8 mosaic with zero at 128 (values 1..255, padding 0), symmetric
    per channel (or one range for all: ``scaling`` "shared"), keeping every ``step``-th pixel of each tile: the tile
    layout of ``views.mosaic``, so the panel's tile arithmetic works unchanged. Drawn on the values' device."""
    assert channels.ranges is not None
    low, high = channels.ranges
    magnitude = np.maximum(np.abs(low), np.abs(high))  # the largest |v| of each channel: at one end of its range
    if scaling == "shared":
        magnitude = np.full_like(magnitude, magnitude.max(initial=0.0))
    scale = np.divide(np.float32(127.0), magnitude, out=np.zeros_like(magnitude), where=magnitude > 0)
    sampled, layout, index = _sampled(channels, order, step, pad)
    if sampled is None:
        return np.zeros((0, 0), dtype=np.uint8), layout
    if index is not None:
        scale = scale[index]
    device = sampled.device
    work = torch.mul(
        sampled,
        torch.from_numpy(scale.reshape(-1, 1, 1)).to(device),
        out=torch.empty(sampled.shape, dtype=torch.float32, device=device),
    )
    work.add_(128.5).clamp_(1, 255)
    return _placed(work, layout), layout


def signed_channel(channels: DisplayChannels, channel: int, scaling: str) -> np.ndarray:
    """One channel of signed maps at full size, as ``signed_mosaic`` draws its tile (zero at 128, values 1..255;
    ``scaling`` "shared": the range of all channels): the A − B view's channel export, the same bytes as the panel."""
    return signed_mosaic(channels, scaling, order=np.array([channel]))[0]


def _sampled(
    channels: DisplayChannels, order: np.ndarray | None, step: int, pad: int
) -> tuple[torch.Tensor | None, MosaicLayout, np.ndarray | None]:
    """Every ``step``-th pixel of each map, the maps in ``order`` (a view, or a copy of the sampled pixels only),
    with the mosaic's layout and the order as indices; no values for an empty mosaic."""
    if step < 1:
        raise ValueError("mosaic step must be at least 1.")
    values = channels.values
    total, height, width = values.shape
    index: np.ndarray | None = None
    order_tuple: tuple[int, ...] | None = None
    if order is not None:
        index = np.asarray(order, dtype=np.intp).reshape(-1)
        if index.size and (index.min() < -total or index.max() >= total):
            raise ValueError("mosaic order holds a channel index out of range.")
        index = np.where(index < 0, index + total, index)
        order_tuple = tuple(int(i) for i in index)
    count = total if index is None else index.size
    layout = mosaic_layout(count, -(-height // step), -(-width // step), None, pad, order_tuple)
    if not layout.rows:
        return None, layout, index
    sampled = values[:, ::step, ::step] if step > 1 else values
    if index is not None:
        sampled = sampled.index_select(0, torch.from_numpy(index.astype(np.int64)).to(values.device))
    return sampled, layout, index


def _placed(work: torch.Tensor, layout: MosaicLayout) -> np.ndarray:
    """(count, h, w) tiles, already in [0.5, 255.5), as the uint8 mosaic of ``layout`` (padding 0): made on their
    device, then moved to the CPU (the cast truncates, as numpy's does)."""
    rows, cols, h, w, pad = layout.rows, layout.cols, layout.tile_h, layout.tile_w, layout.pad
    count = work.shape[0]
    # Each tile with its padding below and to the right, as (rows, h + pad, cols, w + pad): the tiles' pixels are
    # a plain slice of it (no as_strided, which not every device's views support), written once each.
    picture = torch.zeros((rows, h + pad, cols, w + pad), dtype=torch.uint8, device=work.device)
    full = count // cols
    if full:
        picture[:full, :h, :, :w].copy_(work[: full * cols].view(full, cols, h, w).permute(0, 2, 1, 3))
    if count > full * cols:
        picture[full, :h, : count - full * cols, :w].copy_(work[full * cols :].permute(1, 0, 2))
    picture_h, picture_w = mosaic_size(layout)  # the last padding row and column are not part of the mosaic
    cropped = picture.view(rows * (h + pad), cols * (w + pad))[:picture_h, :picture_w]
    return np.ascontiguousarray(cropped.cpu().numpy())
