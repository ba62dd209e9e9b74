"""What a record panel draws, computed off the GUI thread.

Pure numpy, no Qt: the worker turns every record of a run into a ``PanelPicture`` (values, per-channel statistics
and the finished uint8 mosaic), so the GUI thread only uploads one small image per panel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from app.core.export import GRADIENT_KINDS, record_picture
from app.core.hooks import Record
from app.core.resources import COLORMAPS
from app.core.views import ChannelData, MosaicLayout, mosaic, sort_order

SCALINGS: dict[str, str] = {"channel": "per-channel scaling", "shared": "shared scaling"}
SORTS: tuple[str, ...] = ("none", "mean", "max", "diff")  # "diff": by |A - B| with image B (else channel order)
KIND_LABELS: dict[str, str] = {
    "pre": "Inputs",
    "forward": "Activations",
    "backward": "Gradients",
    "tensor": "Output gradients",
}
KIND_ORDER: dict[str, int] = {"pre": 0, "forward": 1, "backward": 2, "tensor": 3}


@dataclass(frozen=True)
class PanelSettings:
    """How one (module, hook kind) pair is drawn; kept across runs."""

    colormap: str = "viridis"
    scaling: str = "channel"  # "channel" or "shared"
    sort: str = "none"  # "none", "mean" or "max" (descending)

    def __post_init__(self) -> None:
        if self.colormap not in COLORMAPS:
            raise ValueError(f"Unknown colormap '{self.colormap}'.")
        if self.scaling not in SCALINGS:
            raise ValueError(f"Unknown scaling '{self.scaling}'.")
        if self.sort not in SORTS:
            raise ValueError(f"Unknown sort '{self.sort}'.")


@dataclass(frozen=True)
class Arrangement:
    """The drawable form of a picture under one setting: a mosaic for maps, ordered values for vectors."""

    image: np.ndarray | None  # uint8 (H, W) mosaic for maps
    layout: MosaicLayout | None
    order: np.ndarray | None  # channel order shown (None: natural order)
    values: np.ndarray | None  # vector values in display order


@dataclass(frozen=True, eq=False)  # compared by identity: it holds arrays
class PanelPicture:
    """Everything one record panel shows for one run."""

    path: str
    kind: str
    key: str  # the record key: path, "#call" for later calls, "/leaf" inside structured outputs
    call: int
    leaf: str
    method: str
    shape: tuple[int, ...]  # the captured tensor's shape
    channels: ChannelData  # values drawn: |grad| for gradient kinds
    flat: bool  # every value the same (often all-zero gradients): a picture would show nothing
    settings: PanelSettings
    arrangement: Arrangement

    @property
    def is_gradient(self) -> bool:
        return self.kind in GRADIENT_KINDS

    @property
    def channel_count(self) -> int:
        return int(self.channels.data.shape[0])

    @property
    def high(self) -> float:
        return float(self.maxima.max()) if self.maxima.size else 0.0

    # Per-channel statistics are computed when first needed (sorting, the flat-panel message): a full pass over
    # the values that the worker skips in the common case.
    @cached_property
    def maxima(self) -> np.ndarray:
        return channel_maxima(self.channels)

    @cached_property
    def means(self) -> np.ndarray:
        return channel_means(self.channels)

    def with_settings(self, settings: PanelSettings) -> PanelPicture:
        """The same values redrawn under other settings (only a colormap change keeps the mosaic)."""
        if (settings.scaling, settings.sort) == (self.settings.scaling, self.settings.sort):
            return replace(self, settings=settings)
        return replace(self, settings=settings, arrangement=arrange(self.channels, settings))


def shape_text(shape: Iterable[int]) -> str:
    return "×".join(str(int(n)) for n in shape)


def _as_drawable(channels: ChannelData) -> ChannelData:
    """1x1 maps (pooled features) say more as a bar plot than as a mosaic of single pixels."""
    if channels.kind == "maps" and channels.data.shape[1:] == (1, 1) and channels.data.shape[0] > 1:
        note = "; ".join(n for n in (channels.note, "1×1 maps shown as a vector") if n)
        return ChannelData("vector", np.ascontiguousarray(channels.data.reshape(-1)), note)
    return channels


def channel_maxima(channels: ChannelData) -> np.ndarray:
    """Per-channel maximum (sorting by max, the largest value): one pass, float32."""
    data = channels.data
    if channels.kind != "maps":
        return data.reshape(-1).astype(np.float32, copy=False)
    flat = data.reshape(data.shape[0], -1)
    return flat.max(axis=1) if flat.shape[1] else np.zeros(flat.shape[0], dtype=np.float32)


def channel_means(channels: ChannelData) -> np.ndarray:
    data = channels.data
    if channels.kind != "maps":
        return data.reshape(-1).astype(np.float32, copy=False)
    flat = data.reshape(data.shape[0], -1)
    return flat.mean(axis=1, dtype=np.float32) if flat.shape[1] else np.zeros(flat.shape[0], dtype=np.float32)


def arrange(channels: ChannelData, settings: PanelSettings) -> Arrangement:
    """Order channels as ``settings.sort`` asks and build the mosaic (maps) or ordered values (vectors)."""
    order = None
    if settings.sort == "mean":
        order = sort_order(channel_means(channels))
    elif settings.sort == "max":
        order = sort_order(channel_maxima(channels))
    if channels.kind == "maps":
        image, layout = mosaic(channels.data, scaling=settings.scaling, order=order)
        return Arrangement(image, layout, order, None)
    values = channels.data.reshape(-1)
    return Arrangement(None, None, order, values[order] if order is not None else values)


def _is_flat(channels: ChannelData, arrangement: Arrangement) -> bool:
    """Mostly from the mosaic: a non-constant channel puts a 255 in it, so only an all-zero mosaic needs the
    per-channel maxima (all constant channels: flat when they are the same constant)."""
    if not channels.data.size:
        return False
    if channels.kind == "maps" and arrangement.image is not None and arrangement.image.any():
        return False
    maxima = channel_maxima(channels)
    return float(maxima.min()) == float(maxima.max())


def picture_of(record: Record, settings: PanelSettings) -> PanelPicture:
    """One record as its panel will draw it."""
    channels = _as_drawable(record_picture(record))
    arrangement = arrange(channels, settings)
    return PanelPicture(
        path=record.path,
        kind=record.kind,
        key=record.key,
        call=record.call,
        leaf=record.leaf,
        method=record.method,
        shape=tuple(record.tensor.shape),
        channels=channels,
        flat=_is_flat(channels, arrangement),
        settings=settings,
        arrangement=arrangement,
    )


def prepare_pictures(
    records: Iterable[Record], settings_for: Callable[[str, str], PanelSettings]
) -> list[PanelPicture]:
    """Every record of a run as a picture, with each (path, kind) pair's own settings."""
    return [picture_of(record, settings_for(record.path, record.kind)) for record in records]


def channel_statistics(values: np.ndarray) -> dict[str, float]:
    """Statistics of one channel for the channel view (computed on demand: one channel is cheap)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size == 0:
        return {"min": 0.0, "max": 0.0, "mean": 0.0, "std": 0.0, "zeros": 0.0}
    return {
        "min": float(flat.min()),
        "max": float(flat.max()),
        "mean": float(flat.mean()),
        "std": float(flat.std()),
        "zeros": float(np.count_nonzero(flat == 0) / flat.size),
    }
