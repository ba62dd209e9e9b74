"""What a record panel draws, computed off the GUI thread.

No Qt: the worker turns every record of a run into a ``PanelPicture`` (channel order, tile layout, per-channel
ranges), with the values kept where the run left them (``display.DisplayChannels``: torch on the run's device);
the mosaic's pixels are drawn there when asked for, at the size a panel shows them (``state.rendering`` colours
them, still in the worker), so the GUI thread only paints one image per panel, and the full-resolution values
reach the CPU only when something reads ``channels.data`` (a hover, the channel view, an export).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from hookscope.core.common.resources import COLORMAPS
from hookscope.core.common.vocabulary import TERMS
from hookscope.core.engine.hooks import GRADIENT_KINDS, Record
from hookscope.core.pictures.display import DisplayChannels, display_channels, draw_mosaic
from hookscope.core.pictures.views import MosaicLayout, mosaic_layout, mosaic_size, sort_order

SCALINGS: dict[str, str] = {"channel": "per-channel scaling", "shared": "shared scaling"}
SORTS: tuple[str, ...] = ("none", "mean", "max", "diff", "dataset")  # "diff": by |A - B| with image B (else channel
# order); "dataset": the order a scan of a folder gives (its channel means, highest first; else channel order)
VIEWS: dict[str, str] = {"A": "A", "B": "B", "diff": "A − B"}  # with image B: what a panel draws (its drop-down)
KIND_LABELS: dict[str, str] = {terms.kind: terms.title for terms in TERMS}  # a panel's title: the vocabulary's
KIND_ORDER: dict[str, int] = {"pre": 0, "forward": 1, "backward": 2, "tensor": 3, "grad_input": 4}


@dataclass(frozen=True)
class PanelSettings:
    """How one (module, hook kind) pair is drawn; kept across runs."""

    colormap: str = "viridis"
    scaling: str = "channel"  # "channel" or "shared"
    sort: str = "none"  # "none", "mean" or "max" (descending); "diff" by |A − B| with image B
    view: str = "A"  # with image B set: "A", "B" or "diff" (A − B); kept while B is not set

    def __post_init__(self) -> None:
        if self.colormap not in COLORMAPS:
            raise ValueError(f"Unknown colormap '{self.colormap}'.")
        if self.scaling not in SCALINGS:
            raise ValueError(f"Unknown scaling '{self.scaling}'.")
        if self.sort not in SORTS:
            raise ValueError(f"Unknown sort '{self.sort}'.")
        if self.view not in VIEWS:
            raise ValueError(f"Unknown view '{self.view}'; use one of: {', '.join(VIEWS)}.")


@dataclass(frozen=True, eq=False)  # compared by identity: it holds arrays
class Arrangement:
    """The drawable form of a picture under one setting: a mosaic for maps, ordered values for vectors.

    The mosaic itself is drawn when asked for: the worker draws a sampled one at the size the panel shows it
    (``sampled``), and the full one (``image``) is made only for a zoom past that, an export or a test.
    """

    layout: MosaicLayout | None  # where each channel's tile is in the full mosaic (maps)
    order: np.ndarray | None  # channel order shown (None: natural order)
    values: np.ndarray | None  # vector values in display order
    draw: Callable[[int], np.ndarray] | None = None  # maps: the uint8 mosaic keeping every step-th pixel of a tile
    ranges: tuple[np.ndarray, np.ndarray] | None = None  # maps: per-channel (min, max)

    @cached_property
    def image(self) -> np.ndarray | None:
        """The full uint8 (H, W) mosaic for maps, None for vectors."""
        return self.draw(1) if self.draw is not None else None

    def sampled(self, step: int) -> np.ndarray | None:
        """The mosaic with every ``step``-th row and column of each tile (the full one for step 1)."""
        if self.draw is None:
            return None
        return self.image if step <= 1 else self.draw(step)

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the full mosaic; (0, 0) for vectors and empty maps."""
        return mosaic_size(self.layout) if self.layout is not None else (0, 0)


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
    channels: DisplayChannels  # values drawn (|grad| for gradient kinds), on the run's device; ``.data`` on demand
    flat: bool  # every value the same (often all-zero gradients): a picture would show nothing
    settings: PanelSettings
    arrangement: Arrangement
    # The mosaic through its colormap, ready to paint: a ``mosaic_item.RenderedMosaic`` the worker makes (Qt's
    # image type, so it is opaque here); the panel checks it still fits the arrangement and colormap it draws.
    rendered: object | None = None
    # The record as the hook captured it (the raw tensor, shared with the run's result, not copied): what a panel
    # exports as an array. Not compared: two pictures of equal content are equal whatever run they came from.
    record: Record | None = field(default=None, compare=False, repr=False)
    # The channel order of a dataset scan of this module (the "dataset" sort), when the window has one.
    dataset_order: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def is_gradient(self) -> bool:
        return self.kind in GRADIENT_KINDS

    @property
    def channel_count(self) -> int:
        return int(self.channels.shape[0])

    @property
    def high(self) -> float:
        return float(self.maxima.max()) if self.maxima.size else 0.0

    # Per-channel statistics (sorting, the flat-panel message): maxima from the ranges the worker has anyway, means
    # on the device when first needed (a full pass over the values the worker skips in the common case).
    @cached_property
    def maxima(self) -> np.ndarray:
        return self.channels.maxima()

    @cached_property
    def means(self) -> np.ndarray:
        return self.channels.means()

    def with_settings(self, settings: PanelSettings) -> PanelPicture:
        """The same values redrawn under other settings (only a colormap change keeps the mosaic)."""
        if (settings.scaling, settings.sort) == (self.settings.scaling, self.settings.sort):
            return replace(self, settings=settings)
        return replace(self, settings=settings, arrangement=arrange(self.channels, settings, self.dataset_order))


def arrange(channels: DisplayChannels, settings: PanelSettings, dataset_order: np.ndarray | None = None) -> Arrangement:
    """Order channels as ``settings.sort`` asks; maps get their tile layout and scaling ranges (the mosaic is drawn
    later, at the size it is shown), vectors their values in that order. ``dataset_order``: the "dataset" sort's
    order (a scan's), used only when it has one entry per channel."""
    order = None
    count = channels.shape[0] if channels.kind == "maps" else int(np.prod(channels.shape))
    if settings.sort == "dataset" and dataset_order is not None and len(dataset_order) == count:
        order = np.asarray(dataset_order, dtype=np.intp)
    elif settings.sort == "mean":
        order = sort_order(channels.means())
    elif settings.sort == "max":
        order = sort_order(channels.maxima())
    if channels.kind == "maps":
        return maps_arrangement(channels, settings.scaling, order)
    values = channels.data.reshape(-1)  # a vector's values: what its bar plot shows, small
    return Arrangement(None, order, values[order] if order is not None else values)


def maps_arrangement(
    channels: DisplayChannels,
    scaling: str,
    order: np.ndarray | None,
    drawer: Callable[..., tuple[np.ndarray, object]] = draw_mosaic,
) -> Arrangement:
    """(C, H, W) maps as a mosaic in ``order``: the layout now, the pixels when drawn (on the values' device) by
    ``drawer`` (``display.draw_mosaic``; the A − B views pass ``display.signed_mosaic``)."""
    shown = tuple(int(i) for i in order) if order is not None else None
    total, height, width = channels.shape
    layout = mosaic_layout(len(shown) if shown is not None else total, height, width, order=shown)

    def draw(step: int) -> np.ndarray:
        return drawer(channels, scaling, order, step)[0]

    return Arrangement(layout, order, None, draw, channels.ranges)


def _is_flat(channels: DisplayChannels) -> bool:
    """Every value the same (an all-zero gradient, say): from the maps' ranges, or the vector's values."""
    if not channels.values.numel():
        return False
    if channels.ranges is not None:
        low, high = channels.ranges
        return float(low.min()) == float(high.max())
    maxima = channels.maxima()
    return float(maxima.min()) == float(maxima.max())


def picture_of(record: Record, settings: PanelSettings, dataset_order: np.ndarray | None = None) -> PanelPicture:
    """One record as its panel will draw it: the values stay on the run's device (``record.data``)."""
    channels = display_channels(record.data, record.kind in GRADIENT_KINDS)
    return PanelPicture(
        path=record.path,
        kind=record.kind,
        key=record.key,
        call=record.call,
        leaf=record.leaf,
        method=record.method,
        shape=tuple(record.data.shape),
        channels=channels,
        flat=_is_flat(channels),
        settings=settings,
        arrangement=arrange(channels, settings, dataset_order),
        record=record,
        dataset_order=dataset_order,
    )


def prepare_pictures(
    records: Iterable[Record],
    settings_for: Callable[[str, str], PanelSettings],
    channel_orders: Mapping[str, np.ndarray] | None = None,
) -> list[PanelPicture]:
    """Every record of a run as a picture, with each (path, kind) pair's own settings. ``channel_orders``: a
    dataset scan's channel order per module path; it orders the module's output channels (its activations and
    their gradients), not its input's (a pre-hook's)."""
    orders = channel_orders or {}
    return [
        picture_of(
            record, settings_for(record.path, record.kind), None if record.kind == "pre" else orders.get(record.path)
        )
        for record in records
    ]
