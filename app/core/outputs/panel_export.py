"""Saving what one panel shows: the mosaic or one channel as PNG or SVG, the arrays, the per-channel statistics.

Pictures are written at their native resolution (one image pixel per file pixel) through the same colormap
lookup table the window draws with, so an exported mosaic is exactly what was on screen. Every function returns
nothing a caller must keep (PNG helpers return the uint8 image they wrote, handy for tests and previews) and
turns a failed write into one readable :class:`~app.core.common.errors.HookscopeError` line.
"""

from __future__ import annotations

import base64
import csv
import io
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image

from app.core.common.errors import HookscopeError
from app.core.common.resources import apply_colormap, colormap_lut
from app.core.outputs.export import picture_image, write_png
from app.core.pictures.views import ChannelData, channel_stats, to_uint8

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
STATS_COLUMNS = ("channel", "mean", "max", "min", "std", "zero_fraction")
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
    height, width = image.shape
    buffer = io.BytesIO()
    Image.fromarray(apply_colormap(image, colormap)).save(buffer, format="PNG")
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
    with _writing(path) as target:
        np.savez(target, **{str(key): np.asarray(value) for key, value in arrays.items()})


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


def _checked_uint8(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 2:
        raise ValueError(f"Expected a uint8 (H, W) picture, got {image.dtype} {image.shape}.")
    if image.size == 0:
        raise HookscopeError("There is nothing to export: the picture is empty.")
    return np.ascontiguousarray(image)
