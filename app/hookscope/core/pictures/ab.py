"""Image A against image B, computed off the GUI thread: B's pictures, the difference A − B, channels ranked by it.

No Qt (the worker runs it). When image B is set, each run runs B through the same registry right after
A, so both see the same hooks and edits; every record both runs have gets three pictures (A, B, A − B), and all
three carry the channel order "by difference" (mean |A − B| per channel, largest first).

The difference is of the values as captured (signed, for gradients too) and is drawn through a diverging colormap
with zero in the middle: blue where B is larger, orange where A is larger. It is taken in numpy from both records'
CPU tensors (``record.tensor``: on a GPU run, copies of both); A's and B's own pictures, and the difference's mosaic,
are drawn as every panel's are (``hookscope.core.pictures.display``), at the size shown.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from hookscope.core.common.resources import colormap_lut
from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.hooks import GRADIENT_KINDS
from hookscope.core.pictures.compare import as_array, pair_records
from hookscope.core.pictures.display import DisplayChannels, display_of_array, signed_mosaic
from hookscope.core.pictures.panels import (
    VIEWS,
    Arrangement,
    PanelPicture,
    PanelSettings,
    arrange,
    maps_arrangement,
    picture_of,
)
from hookscope.core.pictures.views import ChannelData, as_channels

DIFF_SORT = "diff"


@cache
def diverging_lut() -> np.ndarray:
    """(256, 3) uint8: index 0 is the mosaic's padding (the plot background); 1 is -max (blue), 128 zero (dark
    grey, so what did not change recedes on the dark theme), 255 +max (orange)."""
    negative = np.array([70, 140, 235], dtype=np.float64)
    middle = np.array([36, 38, 43], dtype=np.float64)
    positive = np.array([245, 150, 50], dtype=np.float64)
    t = np.linspace(-1.0, 1.0, 255)[:, None]
    ramp = middle + np.where(t < 0, negative - middle, positive - middle) * np.abs(t) ** 0.8
    lut = np.vstack([[22, 24, 28], ramp])
    return np.clip(np.round(lut), 0, 255).astype(np.uint8)


def arrange_view(
    channels: DisplayChannels, settings: PanelSettings, view: str, diff_order: np.ndarray | None
) -> Arrangement:
    """``pictures.arrange`` for one view: "by difference" uses ``diff_order``; the difference view is signed."""
    order = diff_order if settings.sort == DIFF_SORT else None
    if view != "diff":
        if order is None:
            return arrange(channels, settings)
        if channels.kind == "maps":
            return maps_arrangement(channels, settings.scaling, order)
        values = channels.data.reshape(-1)
        return Arrangement(None, order, values[order])
    if channels.kind == "maps":
        if order is None and settings.sort in ("mean", "max"):
            order = arrange(channels, settings).order
        return signed_arrangement(channels, settings.scaling, order)
    if order is None and settings.sort in ("mean", "max"):
        order = arrange(channels, settings).order
    values = channels.data.reshape(-1)
    return Arrangement(None, order, values[order] if order is not None else values)


def signed_arrangement(channels: DisplayChannels, scaling: str, order: np.ndarray | None) -> Arrangement:
    """Signed maps (A − B) as a mosaic through the diverging table (``display.signed_mosaic``), drawn when asked
    for, at the size the panel shows it, as ``pictures.maps_arrangement`` draws the others."""
    return maps_arrangement(channels, scaling, order, drawer=signed_mosaic)


@dataclass(frozen=True, eq=False)
class ComparedPicture(PanelPicture):
    """A panel picture of one of the three views of a record, with the record's channel order by difference."""

    view: str = "A"  # "A", "B" or "diff"
    diff_order: np.ndarray | None = None  # channels by mean |A - B|, largest first

    @property
    def is_gradient(self) -> bool:
        return self.view != "diff" and self.kind in GRADIENT_KINDS

    def with_settings(self, settings: PanelSettings) -> ComparedPicture:
        if (settings.scaling, settings.sort) == (self.settings.scaling, self.settings.sort):
            return replace(self, settings=settings)
        return replace(
            self, settings=settings, arrangement=arrange_view(self.channels, settings, self.view, self.diff_order)
        )


def _compared(picture: PanelPicture, view: str, diff_order: np.ndarray | None) -> ComparedPicture:
    fields = {name: getattr(picture, name) for name in PanelPicture.__dataclass_fields__}
    if picture.settings.sort == DIFF_SORT and diff_order is not None:
        fields["arrangement"] = arrange_view(picture.channels, picture.settings, view, diff_order)
    return ComparedPicture(**fields, view=view, diff_order=diff_order)


def view_of(picture: PanelPicture) -> str:
    """Which view a picture is: "A" (every picture without image B), "B" or "diff" (A − B)."""
    return picture.view if isinstance(picture, ComparedPicture) else "A"


def picture_lut(picture: PanelPicture) -> np.ndarray:
    """The (256, 3) uint8 lookup table a panel draws ``picture``'s mosaic through: the diverging one for A − B (its
    signed values, zero at 128), the picture's colormap otherwise."""
    return diverging_lut() if view_of(picture) == "diff" else colormap_lut(picture.settings.colormap)


def difference_channels(a: ChannelData, b: ChannelData) -> ChannelData:
    """A − B of two records' values in the panels' channel layout (signed, gradients included)."""
    return ChannelData(a.kind, np.ascontiguousarray(a.data - b.data, dtype=np.float32), a.note)


def channel_order_by_difference(difference: ChannelData) -> np.ndarray:
    """Channels by mean |A − B|, largest first; ties keep channel order (as ``rank_channels_by_difference``)."""
    data = difference.data
    count = data.shape[0] if difference.kind == "maps" else data.size
    scores = np.abs(data).reshape(count, -1).mean(axis=1)
    return np.argsort(-scores, kind="stable")


@dataclass(frozen=True)
class Comparison:
    """What image B adds to a run: its result and display, and per record (kind, key) the three views."""

    result: RunResult  # image B's run
    input_display: np.ndarray  # uint8 (H, W, 3): B as the model sees it
    views: dict[tuple[str, str], dict[str, ComparedPicture]]


def compare_runs(
    result_a: RunResult,
    result_b: RunResult,
    pictures_a: list[PanelPicture],
    display_b: np.ndarray,
) -> tuple[list[PanelPicture], Comparison]:
    """A's pictures with their channel order by difference, and the B and A − B views of each record."""
    by_ident = {(p.kind, p.key): p for p in pictures_a}
    views: dict[tuple[str, str], dict[str, ComparedPicture]] = {}
    for pair in pair_records(result_a, result_b):
        picture = by_ident.get((pair.kind, pair.key))
        if picture is None or pair.a is None or pair.b is None:
            continue
        settings = picture.settings
        picture_b = picture_of(pair.b, settings, picture.dataset_order)  # B in A's dataset order too
        diff_order = None
        entry: dict[str, ComparedPicture] = {}
        if tuple(pair.a.tensor.shape) == tuple(pair.b.tensor.shape):
            raw_a, raw_b = as_channels(as_array(pair.a)), as_channels(as_array(pair.b))
            difference = display_of_array(difference_channels(raw_a, raw_b))
            diff_order = channel_order_by_difference(difference)
            if diff_order.size != picture.channel_count:
                diff_order = None
            arrangement = arrange_view(difference, settings, "diff", diff_order)
            flat = not difference.data.size or float(np.abs(difference.data).max()) == 0.0
            entry["diff"] = ComparedPicture(
                path=picture.path,
                kind=picture.kind,
                key=picture.key,
                call=picture.call,
                leaf=picture.leaf,
                method=picture.method,
                shape=picture.shape,
                channels=difference,
                flat=flat,
                settings=settings,
                arrangement=arrangement,
                view="diff",
                diff_order=diff_order,
            )
        entry["A"] = _compared(picture, "A", diff_order)
        entry["B"] = _compared(picture_b, "B", diff_order)
        views[(pair.kind, pair.key)] = {key: entry[key] for key in VIEWS if key in entry}
    pictures = [views[(p.kind, p.key)]["A"] if (p.kind, p.key) in views else p for p in pictures_a]
    return pictures, Comparison(result_b, display_b, views)
