"""Saving what one panel shows: the mosaic or one channel as PNG or SVG, the arrays, the per-channel statistics.

Pictures are written at their native resolution (one image pixel per file pixel) through the same lookup table
the window draws with (``ab.picture_lut``: the picture's colormap, the diverging one for A − B), so an exported
mosaic is exactly what was on screen. Every function returns nothing a caller must keep (PNG helpers return the
uint8 image they wrote, handy for tests and previews) and turns a failed write into one readable
:class:`~hookscope.core.common.errors.HookscopeError` line.

``PANEL_EXPORTS`` declares what a panel can export (the menu's words, the file's suffix, the function that writes
it from the panel's picture); the panel's Export button lists them and asks where to write.
"""

from __future__ import annotations

import base64
import csv
import io
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import apply_colormap, colormap_lut
from hookscope.core.common.vocabulary import TERMS_OF_KIND
from hookscope.core.outputs.export import file_stem, picture_image, write_png
from hookscope.core.pictures.ab import picture_lut, view_of
from hookscope.core.pictures.display import signed_channel
from hookscope.core.pictures.panels import KIND_LABELS, PanelPicture
from hookscope.core.pictures.views import STATS_KEYS, ChannelData, channel_stats, to_uint8

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
STATS_COLUMNS = ("channel", *STATS_KEYS)
TITLE_BAND = 22  # pixels above the picture for an SVG title

PathLike = str | os.PathLike


@contextmanager
def _writing(path: PathLike) -> Iterator[Path]:
    """Say in one line which file could not be written, and why, instead of an OSError traceback."""
    target = Path(path)
    try:
        yield target
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise HookscopeError(f"Cannot write '{target}': {reason}.") from error


def mosaic_image(
    source: ChannelData | np.ndarray, scaling: str = "channel", order: np.ndarray | None = None
) -> np.ndarray:
    """The uint8 picture a panel draws: ``source`` is a panel's ChannelData or raw maps (C, H, W) / one map (H, W)."""
    if isinstance(source, ChannelData):
        return picture_image(source, scaling=scaling, order=order)
    maps = np.asarray(source)
    if maps.ndim not in (2, 3):
        raise ValueError(f"Maps must be (C, H, W) or (H, W), got shape {maps.shape}.")
    return picture_image(ChannelData("maps", maps if maps.ndim == 3 else maps[np.newaxis]), scaling, order)


def export_image_png(image: np.ndarray, path: PathLike, colormap: str = "viridis") -> np.ndarray:
    """Write a uint8 (H, W) picture (e.g. the mosaic a panel already shows) through ``colormap`` as RGB PNG."""
    image = _checked_uint8(image)
    colormap_lut(colormap)  # an unknown name fails before a file is created
    with _writing(path) as target:
        write_png(image, target, colormap)
    return image


def export_mosaic_png(
    source: ChannelData | np.ndarray,
    path: PathLike,
    colormap: str = "viridis",
    scaling: str = "channel",
    order: np.ndarray | None = None,
) -> np.ndarray:
    """Write the mosaic of ``source`` (every channel a tile, 1-pixel gaps) as PNG at its native size."""
    return export_image_png(mosaic_image(source, scaling, order), path, colormap)


def channel_image(map2d: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """One channel (H, W) as uint8, scaled between ``lo`` and ``hi`` (its own min and max by default)."""
    values = np.asarray(map2d)
    if values.ndim != 2:
        raise ValueError(f"A channel must be a 2-D map, got shape {values.shape}.")
    return to_uint8(values, lo, hi)


def export_channel_png(
    map2d: np.ndarray, path: PathLike, colormap: str = "viridis", lo: float | None = None, hi: float | None = None
) -> np.ndarray:
    """Write one channel through ``colormap`` as PNG at its native size."""
    return export_image_png(channel_image(map2d, lo, hi), path, colormap)


def svg_document(image: np.ndarray, colormap: str = "viridis", title: str | None = None) -> str:
    """An SVG holding ``image`` colormapped as an embedded PNG at native size, drawn without smoothing."""
    image = _checked_uint8(image)
    return rgb_svg_document(apply_colormap(image, colormap), title)


def rgb_svg_document(rgb: np.ndarray, title: str | None = None) -> str:
    """An SVG holding an (H, W, 3) uint8 picture as an embedded PNG at native size, drawn without smoothing."""
    height, width = rgb.shape[:2]
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    top = TITLE_BAND if title else 0
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    svg = ET.Element(
        f"{{{SVG_NS}}}svg",
        {
            "version": "1.1",
            "width": str(width),
            "height": str(height + top),
            "viewBox": f"0 0 {width} {height + top}",
        },
    )
    if title:
        ET.SubElement(svg, f"{{{SVG_NS}}}title").text = title
        text = ET.SubElement(
            svg,
            f"{{{SVG_NS}}}text",
            {"x": "2", "y": str(TITLE_BAND - 6), "font-family": "sans-serif", "font-size": "14", "fill": "#000000"},
        )
        text.text = title
    ET.SubElement(
        svg,
        f"{{{SVG_NS}}}image",
        {
            "x": "0",
            "y": str(top),
            "width": str(width),
            "height": str(height),
            "preserveAspectRatio": "none",
            "image-rendering": "optimizeSpeed",
            "style": "image-rendering: pixelated; image-rendering: crisp-edges",
            f"{{{XLINK_NS}}}href": f"data:image/png;base64,{encoded}",
        },
    )
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(svg, encoding="unicode") + "\n"


def export_svg(image: np.ndarray, path: PathLike, colormap: str = "viridis", title: str | None = None) -> None:
    """Write a uint8 (H, W) picture (a mosaic or one channel) as SVG, for papers and slides."""
    document = svg_document(image, colormap, title)
    with _writing(path) as target:
        target.write_text(document, encoding="utf-8")


def svg_embedded_png(document: str) -> Image.Image:
    """The PNG embedded in an SVG written by :func:`svg_document` (for checks and round trips)."""
    root = ET.fromstring(document)
    node = root.find(f"{{{SVG_NS}}}image")
    if node is None:
        raise ValueError("The SVG holds no <image>.")
    href = node.get(f"{{{XLINK_NS}}}href") or node.get("href") or ""
    prefix = "data:image/png;base64,"
    if not href.startswith(prefix):
        raise ValueError("The SVG's <image> does not embed a PNG.")
    return Image.open(io.BytesIO(base64.b64decode(href[len(prefix) :])))


def export_npy(array: np.ndarray, path: PathLike) -> None:
    """Write one array as ``.npy`` (dtype and shape kept, loadable with ``np.load``)."""
    with _writing(path) as target:
        np.save(target, np.asarray(array))


def export_npz(arrays: Mapping[str, np.ndarray], path: PathLike) -> None:
    """Write several named arrays as one uncompressed ``.npz`` (keys as given, e.g. record keys)."""
    named = {str(key): np.asarray(value) for key, value in arrays.items()}
    with _writing(path) as target:
        # numpy's stub types the keyword arrays as if one could be its allow_pickle flag
        np.savez(target, **named)  # type: ignore[arg-type]


def export_stats_csv(maps: ChannelData | np.ndarray, path: PathLike) -> None:
    """Per-channel statistics (channel, mean, max, min, std, zero_fraction) as CSV, full float precision."""
    values = maps.data if isinstance(maps, ChannelData) else np.asarray(maps)
    stats = channel_stats(values)
    count = len(stats["mean"])
    with _writing(path) as target, open(target, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(STATS_COLUMNS)
        for channel in range(count):
            writer.writerow([channel, *(repr(float(stats[name][channel])) for name in STATS_COLUMNS[1:])])


def read_stats_csv(path: PathLike) -> dict[str, np.ndarray]:
    """The statistics written by :func:`export_stats_csv`, as channel_stats returns them."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return {name: np.array([float(row[name]) for row in rows]) for name in STATS_COLUMNS[1:]}


# ---- a panel's picture, as its Export menu writes it -------------------------------------------------------------
def picture_mosaic(picture: PanelPicture) -> np.ndarray:
    """The uint8 picture a panel draws: its mosaic (its order and scaling), or a one-row strip for a vector."""
    image = picture.arrangement.image
    if image is None:
        image = picture_image(picture.channels, picture.settings.scaling, picture.arrangement.order)
    return image


def picture_title(picture: PanelPicture) -> str:
    """The SVG's title: the record's key and hook kind, and "A − B" for the difference view."""
    title = f"{picture.key or '(model)'} · {KIND_LABELS.get(picture.kind, picture.kind)}"
    return title + (" · A − B" if view_of(picture) == "diff" else "")


def raw_array(picture: PanelPicture) -> np.ndarray:
    """The raw tensor the hook captured (it travels with the picture), or for the B and A − B views the values
    drawn."""
    record = picture.record if view_of(picture) == "A" else None
    return record.tensor.numpy() if record is not None else picture.channels.data


def export_picture_png(picture: PanelPicture, path: PathLike) -> np.ndarray:
    """The mosaic exactly as drawn, through the panel's lookup table, one mosaic pixel per file pixel."""
    return _write_rgb_png(picture_mosaic(picture), picture_lut(picture), path)


def export_picture_svg(picture: PanelPicture, path: PathLike) -> None:
    """The mosaic as drawn, in an SVG titled with the record's key and hook kind."""
    rgb = picture_lut(picture)[_checked_uint8(picture_mosaic(picture))]
    document = rgb_svg_document(rgb, picture_title(picture))
    with _writing(path) as target:
        target.write_text(document, encoding="utf-8")


def channel_exportable(picture: PanelPicture, channel: int | None) -> bool:
    """Whether ``channel`` is one of the picture's maps (vectors have no channel pictures)."""
    return picture.channels.kind == "maps" and channel is not None and 0 <= channel < picture.channel_count


def export_picture_channel_png(picture: PanelPicture, channel: int, path: PathLike) -> np.ndarray:
    """One channel at its native size, scaled as the panel draws its tile: its own range or the shared one, and
    for A − B signed, zero at 128, through the diverging table."""
    if not channel_exportable(picture, channel):
        raise HookscopeError(f"This panel has no channel {channel} to export as a picture.")
    scaling = picture.settings.scaling
    if view_of(picture) == "diff":
        return _write_rgb_png(signed_channel(picture.channels, channel, scaling), picture_lut(picture), path)
    data = picture.channels.data
    lo = hi = None
    if scaling == "shared":  # the range the panel draws every tile with
        lo, hi = float(np.nanmin(data)), float(np.nanmax(data))
    return export_channel_png(data[channel], path, picture.settings.colormap, lo, hi)


def export_picture_npy(picture: PanelPicture, path: PathLike) -> None:
    export_npy(raw_array(picture), path)


def export_picture_npz(picture: PanelPicture, path: PathLike) -> None:
    """The raw tensor under its record key, and the values drawn (``shown``: |grad| for gradients)."""
    export_npz({picture.key or "(model)": raw_array(picture), "shown": picture.channels.data}, path)


def export_picture_stats(picture: PanelPicture, path: PathLike) -> None:
    """Per-channel statistics of the values drawn (|grad| for gradients)."""
    export_stats_csv(picture.channels, path)


@dataclass(frozen=True)
class PanelExport:
    """One entry of a panel's Export menu. ``label`` and ``extra`` (added to the suggested file name's stem) may
    hold ``{channel}``; ``write`` is ``write(picture, path)``, or ``write(picture, channel, path)`` for a
    ``per_channel`` export (listed once a channel was clicked). A separator goes between sections."""

    label: str
    suffix: str  # the file's suffix, added to a name given without one
    pattern: str  # the file dialog's filter
    write: Callable[..., object]
    extra: str = ""
    per_channel: bool = False
    section: int = 0

    def listed(self, picture: PanelPicture | None, channel: int | None) -> bool:
        """In the menu: always (disabled with nothing to export), a channel's export once one was clicked."""
        return not self.per_channel or (picture is not None and channel_exportable(picture, channel))

    def menu_label(self, channel: int | None) -> str:
        return self.label.format(channel=channel)

    def file_name(self, stem: str, channel: int | None) -> str:
        return f"{stem}{self.extra.format(channel=channel)}.{self.suffix}"

    def export(self, picture: PanelPicture, path: PathLike, channel: int | None = None) -> object:
        return self.write(picture, channel, path) if self.per_channel else self.write(picture, path)


def panel_file_stem(key: str, kind: str) -> str:
    """The name a panel's exports suggest, without suffix: the record's key and what the vocabulary calls its kind,
    as an export names its archive (``layer1.0.conv1_gradients``)."""
    terms = TERMS_OF_KIND.get(kind)
    return f"{file_stem(key or 'model')}_{terms.files if terms is not None else kind}"


PANEL_EXPORTS: tuple[PanelExport, ...] = (
    PanelExport("Mosaic as PNG…", "png", "PNG image (*.png)", export_picture_png),
    PanelExport("Mosaic as SVG…", "svg", "SVG image (*.svg)", export_picture_svg),
    PanelExport(
        "Channel {channel} as PNG…",
        "png",
        "PNG image (*.png)",
        export_picture_channel_png,
        extra="_channel{channel}",
        per_channel=True,
    ),
    PanelExport("Array as .npy…", "npy", "NumPy array (*.npy)", export_picture_npy, section=1),
    PanelExport("Arrays as .npz (raw and drawn)…", "npz", "NumPy archive (*.npz)", export_picture_npz, section=1),
    PanelExport("Statistics as CSV…", "csv", "CSV (*.csv)", export_picture_stats, extra="_stats", section=1),
)


def _write_rgb_png(image: np.ndarray, lut: np.ndarray, path: PathLike) -> np.ndarray:
    """A uint8 (H, W) picture through a (256, 3) lookup table as RGB PNG at its native size."""
    image = _checked_uint8(image)
    with _writing(path) as target:
        Image.fromarray(lut[image]).save(target, format="PNG")
    return image


def _checked_uint8(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 2:
        raise ValueError(f"Expected a uint8 (H, W) picture, got {image.dtype} {image.shape}.")
    if image.size == 0:
        raise HookscopeError("There is nothing to export: the picture is empty.")
    return np.ascontiguousarray(image)
