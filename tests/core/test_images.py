"""read_image on real files of every awkward kind, and Preprocess against torchvision's own presets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms._presets import ImageClassification

from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.core.models.images import IMAGE_SUFFIXES, Preprocess, read_image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _pixel(image: Image.Image, xy: tuple[int, int]) -> tuple[int, ...]:
    return tuple(int(v) for v in image.getpixel(xy))


def _close(actual: tuple[int, ...], expected: tuple[int, ...], tol: int) -> bool:
    return all(abs(a - e) <= tol for a, e in zip(actual, expected, strict=True))


def _photo(width: int = 300, height: int = 200, seed: int = 0) -> Image.Image:
    """A smooth picture with some noise, so resizing differences would show."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 / width, yy * 255 / height, (xx + yy) * 127 / (width + height)], axis=-1)
    noisy = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(noisy)


# --- read_image: good files -------------------------------------------------------------------------


def test_exif_orientation_6_is_applied(tmp_path: Path) -> None:
    stored = Image.new("RGB", (40, 20), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 10, 10))  # red block in the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = tmp_path / "rotated.jpg"
    stored.save(path, exif=exif, quality=95)

    image = read_image(path)
    assert image.mode == "RGB"
    assert image.size == (20, 40)
    assert _close(_pixel(image, (15, 5)), (255, 0, 0), 40)  # now top-right
    assert _close(_pixel(image, (5, 5)), (0, 0, 255), 40)
    assert _close(_pixel(image, (15, 35)), (0, 0, 255), 40)


def test_grayscale_l(tmp_path: Path) -> None:
    path = tmp_path / "gray.png"
    Image.new("L", (4, 3), 100).save(path)
    image = read_image(path)
    assert image.mode == "RGB" and image.size == (4, 3)
    assert _pixel(image, (0, 0)) == (100, 100, 100)


def test_grayscale_with_alpha_la(tmp_path: Path) -> None:
    path = tmp_path / "la.png"
    source = Image.new("LA", (2, 1), (50, 255))
    source.putpixel((1, 0), (50, 0))
    source.save(path)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (50, 50, 50)
    assert _pixel(image, (1, 0)) == (255, 255, 255)


def test_palette_with_transparency(tmp_path: Path) -> None:
    path = tmp_path / "palette.png"
    source = Image.new("P", (2, 1), 0)
    source.putpalette([255, 0, 0, 0, 255, 0] + [0, 0, 0] * 254)
    source.putpixel((1, 0), 1)
    source.save(path, transparency=1)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (255, 0, 0)
    assert _pixel(image, (1, 0)) == (255, 255, 255)


def test_palette_without_transparency(tmp_path: Path) -> None:
    path = tmp_path / "palette.gif"
    source = Image.new("P", (2, 1), 0)
    source.putpalette([10, 20, 30, 200, 100, 0] + [0, 0, 0] * 254)
    source.putpixel((1, 0), 1)
    source.save(path)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (10, 20, 30)
    assert _pixel(image, (1, 0)) == (200, 100, 0)


def test_rgba_transparent_pixel_becomes_white(tmp_path: Path) -> None:
    path = tmp_path / "rgba.png"
    source = Image.new("RGBA", (3, 1), (0, 0, 0, 0))
    source.putpixel((1, 0), (10, 20, 30, 255))
    source.putpixel((2, 0), (0, 0, 0, 128))
    source.save(path)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (255, 255, 255)
    assert _pixel(image, (1, 0)) == (10, 20, 30)
    assert _close(_pixel(image, (2, 0)), (127, 127, 127), 1)


def test_cmyk(tmp_path: Path) -> None:
    path = tmp_path / "cmyk.tif"
    Image.new("CMYK", (4, 4), (0, 255, 255, 0)).save(path)
    image = read_image(path)
    assert image.mode == "RGB"
    assert _pixel(image, (1, 1)) == (255, 0, 0)


def test_16_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    path = tmp_path / "deep.png"
    values = np.array([[65535, 32768, 0, 257]], dtype=np.uint16)
    source = Image.fromarray(values)
    assert source.mode == "I;16"
    source.save(path)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (255, 255, 255)
    assert _close(_pixel(image, (1, 0)), (128, 128, 128), 1)
    assert _pixel(image, (2, 0)) == (0, 0, 0)
    assert _pixel(image, (3, 0)) == (1, 1, 1)


def test_32_bit_int_with_16_bit_values(tmp_path: Path) -> None:
    path = tmp_path / "int32.tif"
    Image.fromarray(np.array([[65535, 0]], dtype=np.int32)).save(path)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (255, 255, 255)
    assert _pixel(image, (1, 0)) == (0, 0, 0)


def test_float_image(tmp_path: Path) -> None:
    path = tmp_path / "float.tif"
    Image.fromarray(np.array([[1.0, 0.5, 0.0]], dtype=np.float32)).save(path)
    image = read_image(path)
    assert _pixel(image, (0, 0)) == (255, 255, 255)
    assert _close(_pixel(image, (1, 0)), (128, 128, 128), 1)
    assert _pixel(image, (2, 0)) == (0, 0, 0)


def test_returned_image_outlives_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain.png"
    Image.new("RGB", (5, 5), (1, 2, 3)).save(path)
    image = read_image(str(path))
    path.unlink()
    assert _pixel(image, (4, 4)) == (1, 2, 3)


def test_suffixes() -> None:
    assert {".png", ".jpg", ".jpeg", ".tif", ".webp", ".pgm"} <= IMAGE_SUFFIXES
    assert all(s.startswith(".") and s == s.lower() for s in IMAGE_SUFFIXES)


# --- read_image: bad files ---------------------------------------------------------------------------


def _read_error(path: Path, *words: str) -> str:
    with pytest.raises(ImageError) as info:
        read_image(path)
    message = str(info.value)
    assert isinstance(info.value, HookscopeError)
    assert "\n" not in message
    assert message.startswith("Cannot read ")
    assert str(path) in message
    for word in words:
        assert word in message
    return message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    _read_error(path, "empty")


def test_text_file_named_png(tmp_path: Path) -> None:
    path = tmp_path / "notes.png"
    path.write_text("this is not a picture\nsecond line\n")
    _read_error(path, "not an image file")


@pytest.mark.parametrize("fmt, suffix", [("PNG", ".png"), ("JPEG", ".jpg")])
def test_truncated_file(tmp_path: Path, fmt: str, suffix: str) -> None:
    whole = tmp_path / f"whole{suffix}"
    _photo(64, 64).save(whole, fmt)
    data = whole.read_bytes()
    path = tmp_path / f"half{suffix}"
    path.write_bytes(data[: len(data) // 2])
    _read_error(path, "truncated or corrupt")


def test_folder(tmp_path: Path) -> None:
    path = tmp_path / "pictures.png"
    path.mkdir()
    _read_error(path, "folder")


def test_missing_file(tmp_path: Path) -> None:
    _read_error(tmp_path / "nowhere.jpg", "does not exist")


@pytest.mark.parametrize("side", [40, 100])  # 1600 px: Pillow warns; 10000 px: Pillow raises
def test_decompression_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side: int) -> None:
    path = tmp_path / "bomb.png"
    Image.new("RGB", (side, side)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    message = _read_error(path, "too large", "decompression bomb", f"{side * side} pixels", "1000")
    assert "DOS" not in message


# --- Preprocess ---------------------------------------------------------------------------------------


def test_matches_resnet18_weights_transforms() -> None:
    image = _photo(300, 200)
    preset = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.transforms()
    expected = preset(image).unsqueeze(0)

    manual = Preprocess(resize=256, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    converted = Preprocess.from_torchvision(preset)
    assert converted == manual
    for pre in (manual, converted):
        tensor = pre.to_tensor(image)
        assert tensor.shape == (1, 3, 224, 224)
        assert tensor.dtype == torch.float32
        assert torch.allclose(tensor, expected, atol=1e-6)


@pytest.mark.parametrize("interpolation", ["bicubic", "nearest"])
def test_matches_other_presets(interpolation: str) -> None:
    image = _photo(257, 333, seed=1)
    preset = ImageClassification(crop_size=224, resize_size=232, interpolation=InterpolationMode(interpolation))
    pre = Preprocess.from_torchvision(preset)
    assert pre.interpolation == interpolation and pre.resize == 232
    assert torch.allclose(pre.to_tensor(image), preset(image).unsqueeze(0), atol=1e-6)


def test_grayscale_model() -> None:
    pre = Preprocess(resize=256, crop=224, mean=(0.5,), std=(0.25,), channels=1)
    tensor = pre.to_tensor(_photo())
    assert tensor.shape == (1, 1, 224, 224)
    display = pre.to_display(tensor)
    assert display.shape == (224, 224, 3) and display.dtype == np.uint8
    assert np.array_equal(display[..., 0], display[..., 2])


def test_to_display_round_trip() -> None:
    image = _photo(224, 224, seed=3)
    pre = Preprocess(resize=None, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    tensor = pre.to_tensor(image)
    for batch in (tensor, tensor[0]):
        display = pre.to_display(batch)
        assert display.shape == (224, 224, 3) and display.dtype == np.uint8
        difference = np.abs(display.astype(int) - np.asarray(image).astype(int))
        assert difference.max() <= 1


def test_to_display_clips() -> None:
    pre = Preprocess(resize=None, crop=2, mean=(0.5,), std=(0.5,), channels=1)
    display = pre.to_display(torch.tensor([[[[-10.0, 10.0], [0.0, float("nan")]]]]))
    assert display[..., 0].tolist() == [[0, 255], [128, 0]]


def test_describe_is_json() -> None:
    pre = Preprocess(resize=232, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="bicubic")
    described = json.loads(json.dumps(pre.describe()))
    assert described == {
        "resize": 232,
        "crop": 224,
        "mean": list(IMAGENET_MEAN),
        "std": list(IMAGENET_STD),
        "channels": 3,
        "interpolation": "bicubic",
    }


def test_rejects_inconsistent_settings() -> None:
    with pytest.raises(ValueError):
        Preprocess(resize=256, crop=224, mean=(0.5,), std=(0.5,), channels=3)
    with pytest.raises(ValueError):
        Preprocess(resize=256, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="lanczos")


def test_png_cut_inside_its_header(tmp_path: Path) -> None:
    whole = tmp_path / "whole.png"
    Image.new("RGB", (30, 30)).save(whole)
    path = tmp_path / "header.png"
    path.write_bytes(whole.read_bytes()[:40])
    _read_error(path, "truncated or corrupt")


@pytest.mark.parametrize(
    "channels, mean, std",
    [(3, IMAGENET_MEAN, IMAGENET_STD), (3, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), (1, (0.1307,), (0.3081,))],
)
def test_the_normalising_lookup_is_torchvision_bit_for_bit(channels: int, mean: tuple, std: tuple) -> None:
    """``as_input`` looks values up in a table instead of running torch's operations (no thread team woken beside
    the model): every uint8 value of every channel must give torchvision's float32 result exactly."""
    from torchvision.transforms import functional as F

    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (224, 224, channels), dtype=np.uint8)
    pixels[0, : 256 % 224] = np.arange(256 % 224)[:, None]  # make sure low values appear...
    pixels[1, :] = np.arange(32, 256)[:, None]  # ...and the rest of the 256
    image = Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels)
    expected = F.normalize(F.convert_image_dtype(F.pil_to_tensor(image), torch.float), mean=list(mean), std=list(std))
    pre = Preprocess(resize=None, crop=224, mean=mean, std=std, channels=channels)
    assert torch.equal(pre.as_input(image), expected.unsqueeze(0))


@pytest.mark.parametrize("channels", [3, 1])
def test_the_shown_picture_is_the_input_undone(channels: int) -> None:
    """The window shows the input as the model sees it from the fitted picture itself: it must be what undoing the
    normalisation of the very tensor the model got gives, pixel for pixel."""
    mean, std = (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.1307,), (0.3081,))
    pre = Preprocess(resize=256, crop=224, mean=mean, std=std, channels=channels)
    fitted = pre.fitted(_photo(300, 200, seed=3))
    shown = pre.shown(fitted)
    assert shown.shape == (224, 224, 3) and shown.dtype == np.uint8
    assert np.array_equal(shown, pre.to_display(pre.as_input(fitted)))
