"""Exporting what a panel shows: pictures at native size through the colormap, arrays, statistics."""

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import colormap_lut
from hookscope.core.outputs.panel_export import (
    SVG_NS,
    channel_image,
    export_channel_png,
    export_image_png,
    export_mosaic_png,
    export_npy,
    export_npz,
    export_stats_csv,
    export_svg,
    mosaic_image,
    read_stats_csv,
    svg_embedded_png,
)
from hookscope.core.pictures.views import as_channels, channel_stats, mosaic


@pytest.fixture
def maps():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(10, 7, 5)).astype(np.float32)
    values[2] = 0.0  # a flat channel
    values[4, :3] = 0.0  # some exact zeros
    return values


@pytest.mark.parametrize("colormap", ["viridis", "magma", "gray"])
@pytest.mark.parametrize("scaling", ["channel", "shared"])
def test_mosaic_png_has_the_mosaics_pixel_size_and_colormap(tmp_path, maps, colormap, scaling):
    expected, layout = mosaic(maps, scaling=scaling)
    path = tmp_path / "mosaic.png"
    written = export_mosaic_png(as_channels(maps[np.newaxis]), path, colormap, scaling)
    np.testing.assert_array_equal(written, expected)
    with Image.open(path) as png:
        assert png.format == "PNG" and png.mode == "RGB"
        # 10 channels: 4 columns x 3 rows of 5x7 tiles with 1-pixel gaps
        assert png.size == (layout.cols * 6 - 1, layout.rows * 8 - 1) == (expected.shape[1], expected.shape[0])
        pixels = np.asarray(png)
    np.testing.assert_array_equal(pixels, colormap_lut(colormap)[expected])


def test_mosaic_png_follows_the_panels_channel_order(tmp_path, maps):
    order = np.argsort(-maps.mean(axis=(1, 2)))
    written = export_mosaic_png(maps, tmp_path / "sorted.png", "viridis", "channel", order=order)
    np.testing.assert_array_equal(written, mosaic(maps, scaling="channel", order=order)[0])
    assert not np.array_equal(written, mosaic(maps)[0])


def test_channel_png_is_one_map_at_native_size(tmp_path, maps):
    path = tmp_path / "channel.png"
    export_channel_png(maps[4], path, "inferno")
    with Image.open(path) as png:
        assert png.size == (5, 7)
        pixels = np.asarray(png)
    np.testing.assert_array_equal(pixels, colormap_lut("inferno")[channel_image(maps[4])])
    assert channel_image(maps[4]).min() == 0 and channel_image(maps[4]).max() == 255


def test_a_file_without_suffix_is_still_png_and_write_errors_are_one_line(tmp_path, maps):
    export_image_png(mosaic_image(maps), tmp_path / "noext", "gray")
    assert Image.open(tmp_path / "noext").format == "PNG"
    with pytest.raises(HookscopeError, match=r"^Cannot write '.*missing.*x\.png': No such file or directory\.$"):
        export_mosaic_png(maps, tmp_path / "missing" / "x.png")
    with pytest.raises(ValueError, match="Unknown colormap"):
        export_mosaic_png(maps, tmp_path / "y.png", "rainbow")
    assert not (tmp_path / "y.png").exists()


@pytest.mark.parametrize("title", [None, "layer1.0.conv1 <activations> & more"])
def test_svg_parses_and_embeds_the_same_pixels(tmp_path, maps, title):
    image = mosaic_image(maps, "shared")
    path = tmp_path / "mosaic.svg"
    export_svg(image, path, "magma", title=title)
    text = path.read_text(encoding="utf-8")
    root = ET.fromstring(text)
    assert root.tag == f"{{{SVG_NS}}}svg"
    node = root.find(f"{{{SVG_NS}}}image")
    assert node is not None
    assert node.get("width") == str(image.shape[1]) and node.get("height") == str(image.shape[0])
    assert "image-rendering: pixelated" in node.get("style")
    titles = [t.text for t in root.iter(f"{{{SVG_NS}}}text")]
    assert titles == ([] if title is None else [title])
    if title:
        assert int(root.get("height")) > image.shape[0] and node.get("y") != "0"
    with svg_embedded_png(text) as embedded:
        assert embedded.size == (image.shape[1], image.shape[0])
        np.testing.assert_array_equal(np.asarray(embedded.convert("RGB")), colormap_lut("magma")[image])


def test_npy_and_npz_keep_values_dtype_and_keys(tmp_path, maps):
    export_npy(maps, tmp_path / "maps.npy")
    loaded = np.load(tmp_path / "maps.npy")
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, maps)
    arrays = {"layer1": maps, "layer1.0.relu#1": maps[:2] * 2, "attn/0": np.arange(4)}
    export_npz(arrays, tmp_path / "all.npz")
    with np.load(tmp_path / "all.npz") as archive:
        assert set(archive.files) == set(arrays)
        for key, value in arrays.items():
            np.testing.assert_array_equal(archive[key], value)


def test_stats_csv_round_trips_against_channel_stats(tmp_path, maps):
    path = tmp_path / "stats.csv"
    export_stats_csv(as_channels(maps), path)
    header = path.read_text().splitlines()[0]
    assert header == "channel,mean,max,min,std,zero_fraction"
    expected = channel_stats(maps)
    got = read_stats_csv(path)
    for name, values in expected.items():
        np.testing.assert_array_equal(got[name], values)  # full precision: exact
    assert got["zero_fraction"][2] == 1.0 and 0 < got["zero_fraction"][4] < 1
