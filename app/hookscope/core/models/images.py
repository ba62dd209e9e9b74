"""Reading image files safely and turning them into model inputs.

Every failure to read a file becomes one readable :class:`ImageError` line that names the file, so the
command line and the window can show it as is instead of a raw Pillow traceback.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from hookscope.core.common.errors import ImageError

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
)

_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")  # torchvision's InterpolationMode values


def _transforms() -> Any:
    """torchvision's functional transforms, imported when a picture is first fitted: torchvision's import takes about
    a second (it brings torch._dynamo), which ``hookscope.capture`` of a tensor on a model of one's own never needs."""
    from torchvision.transforms import functional

    return functional


def _mode(name: str) -> Any:
    from torchvision.transforms import InterpolationMode

    return InterpolationMode(name)


_PIL_RESAMPLING: dict[str, Image.Resampling] = {
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "nearest": Image.Resampling.NEAREST,
}

# A picture whose resized longer side would be more than this many times the model's input size has only the part
# the centre crop keeps resized (Preprocess._resize); up to it, torchvision's resize itself is used.
MAX_RESIZED_ASPECT = 8

_BOMB_NUMBERS = re.compile(r"\((\d+) pixels\).*?limit of (\d+) pixels")


def _display_name(path: str | os.PathLike) -> str:
    """The path as the user gave it, on one line (a newline in a file name must not split the message)."""
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    return name.replace("\r", " ").replace("\n", " ")


def _fail(path: str | os.PathLike, reason: str) -> ImageError:
    """The one-line error for an image file that cannot be read; ``path`` is kept as given, in a field."""
    return ImageError(f"Cannot read '{_display_name(path)}': {reason}", path=os.fsdecode(path))


def _bomb_reason(error: Exception) -> str:
    """Pillow's bomb message carries the numbers; keep them but say it in our words."""
    match = _BOMB_NUMBERS.search(str(error))
    if match:
        pixels, limit = match.groups()
    else:
        pixels, limit = "?", str(Image.MAX_IMAGE_PIXELS)
    return f"the image is too large ({pixels} pixels; the limit is {limit}): it may be a decompression bomb."


_SIGNATURES: tuple[bytes, ...] = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",
    b"GIF87a",
    b"GIF89a",
    b"BM",
    b"II*\x00",
    b"MM\x00*",
)


def _has_image_signature(path: str | os.PathLike) -> bool:
    """A damaged file that starts like an image is 'corrupt', not 'not an image'."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
    except OSError:
        return False
    return head.startswith(_SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def _alpha_onto_white(image: Image.Image) -> Image.Image:
    """Transparent pixels become white, as a viewer shows them, not black as a plain convert does."""
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def _gray_array_to_rgb(values: np.ndarray) -> Image.Image:
    gray = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    return Image.fromarray(gray).convert("RGB")


def _scale_min_max(values: np.ndarray) -> np.ndarray:
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        return np.zeros_like(values)
    return (values - lo) * (255.0 / (hi - lo))


def _to_rgb(image: Image.Image) -> Image.Image:
    """Any Pillow mode to 8-bit RGB without losing the picture: wide modes are scaled, not clipped."""
    mode = image.mode
    if mode == "RGB":
        return image.copy()
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in image.info):
        return _alpha_onto_white(image)
    if mode.startswith("I;16"):
        values = np.asarray(image).astype(np.float64)
        return _gray_array_to_rgb(values / 257.0)
    if mode == "I":
        values = np.asarray(image).astype(np.float64)
        if values.size and values.min() >= 0 and values.max() <= 65535:
            # A 16-bit file (PNG, PGM, TIFF) loaded as 32-bit 'I': its real depth is 16 bits.
            return _gray_array_to_rgb(values / 257.0)
        return _gray_array_to_rgb(_scale_min_max(values) if values.size else values)
    if mode == "F":
        values = np.asarray(image).astype(np.float64)
        values = np.where(np.isfinite(values), values, 0.0)
        if values.size and values.min() >= 0 and values.max() <= 1:
            return _gray_array_to_rgb(values * 255.0)
        return _gray_array_to_rgb(_scale_min_max(values) if values.size else values)
    return image.convert("RGB")


def _check_file(path: str | os.PathLike) -> None:
    """The problems a file has before Pillow sees it: missing, a folder, empty, not openable."""
    if not os.path.exists(path):
        raise _fail(path, "the file does not exist.")
    if os.path.isdir(path):
        raise _fail(path, "it is a folder, not an image file.")
    try:
        if os.path.getsize(path) == 0:
            raise _fail(path, "the file is empty.")
    except OSError as error:
        raise _fail(path, f"the file cannot be opened ({error.strerror or type(error).__name__}).") from error


@contextmanager
def _reading(path: str | os.PathLike) -> Iterator[None]:
    """Pillow's many failures as one :class:`ImageError` line each (decompression bombs included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            yield
        except ImageError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            raise _fail(path, _bomb_reason(error)) from error
        except UnidentifiedImageError as error:
            if _has_image_signature(path):
                raise _fail(path, "the file is truncated or corrupt.") from error
            raise _fail(path, "it is not an image file (or its format is not supported).") from error
        except PermissionError as error:
            raise _fail(path, "permission denied.") from error
        except MemoryError as error:
            raise _fail(path, "there is not enough memory to load it.") from error
        except Exception as error:  # noqa: BLE001 - Pillow reports damaged files with many exception types
            raise _fail(path, "the file is truncated or corrupt.") from error


def read_image(path: str | os.PathLike) -> Image.Image:
    """Read an image file as RGB, upright per EXIF; any problem is one :class:`ImageError` line, with ``path``
    (as given) in its ``path`` field."""
    _check_file(path)
    with _reading(path), Image.open(path) as opened:
        opened.load()
        try:
            upright = ImageOps.exif_transpose(opened)
        except Exception:  # noqa: BLE001 - a broken EXIF block must not make the picture unreadable
            upright = opened
        if upright is None:
            upright = opened
        try:
            return _to_rgb(upright)
        except (ValueError, OSError) as error:
            raise _fail(path, f"its colour mode '{upright.mode}' is not supported.") from error


def probe_image(path: str | os.PathLike) -> tuple[int, int]:
    """The image's (width, height) from its header, without decoding it: cheap whatever the file's size (a 3 GB
    file that is no image is refused after reading its first bytes). Raises the :class:`ImageError` that
    :func:`read_image` would for a missing file, a non-image or a decompression bomb; a file whose pixels are
    damaged further in passes here and fails when read."""
    _check_file(path)
    with _reading(path), Image.open(path) as opened:
        return opened.size


@functools.lru_cache(maxsize=16)
def _normalising_table(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """(C, 256) float32: ``(v / 255 - mean) / std`` for every uint8 value ``v``, each step in float32 as torchvision
    computes it (correctly rounded in both), so a lookup gives its exact result."""
    values = np.arange(256, dtype=np.float32) / np.float32(255)
    means = np.asarray(mean, np.float32)[:, None]
    stds = np.asarray(std, np.float32)[:, None]
    return ((values[None, :] - means) / stds).astype(np.float32)


@dataclass(frozen=True)
class Preprocess:
    """How a model wants its input: the same steps as torchvision's ``ImageClassification`` preset."""

    resize: int | None
    crop: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    channels: int = 3
    interpolation: str = "bilinear"
    # The whole picture resized to a square of ``resize`` (None: ``crop``) pixels, its aspect ratio not kept, then
    # centre-cropped: transformers' image processors whose ``size`` is a height and a width (ViT's 224 x 224,
    # BEiT's 256 x 256 then a 224 crop). Off: torchvision's steps (the shorter side to ``resize``).
    squash: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if self.channels not in (1, 3):
            raise ValueError(f"Preprocess channels must be 1 or 3, not {self.channels}.")
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise ValueError(
                f"Preprocess mean and std need {self.channels} values each, got {len(self.mean)} and {len(self.std)}."
            )
        if any(s == 0 for s in self.std):
            raise ValueError("Preprocess std values must not be zero.")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"Unknown interpolation '{self.interpolation}'; use one of {', '.join(_INTERPOLATIONS)}.")
        if self.crop <= 0 or (self.resize is not None and self.resize <= 0):
            raise ValueError("Preprocess sizes must be positive.")

    def to_tensor(self, image: Image.Image) -> torch.Tensor:
        """A (1, channels, crop, crop) float32 batch, identical to the torchvision preset's output (of a very wide or
        tall picture only the part the crop keeps is resized, to within one grey level: see ``_resize``)."""
        return self.as_input(self.fitted(image))

    def fitted(self, image: Image.Image) -> Image.Image:
        """The first half of ``to_tensor``: the picture in the model's colour mode, resized and centre-cropped.

        Pillow only, no torch: a thread that reads images ahead (``batch.read_ahead``) does this part, and a torch
        operation there would start a second OpenMP thread team, whose mere presence makes the model's own threads
        sleep between operations instead of waiting ready (ResNet-18's forward+backward a third slower).
        """
        F = _transforms()
        wanted = "L" if self.channels == 1 else "RGB"
        img = image if image.mode == wanted else image.convert(wanted)
        if self.squash:
            side = self.resize or self.crop
            img = F.resize(img, [side, side], interpolation=_mode(self.interpolation), antialias=True)
            return img if side == self.crop else F.center_crop(img, [self.crop])
        if self.resize is not None:
            img = self._resize(img, self.resize)
        return F.center_crop(img, [self.crop])

    def as_input(self, fitted: Image.Image) -> torch.Tensor:
        """The second half of ``to_tensor``: a ``fitted`` picture as the normalised (1, C, crop, crop) batch.

        A table lookup per channel, in numpy: bit for bit torchvision's ``convert_image_dtype`` and ``normalize``
        (the table holds their float32 results for each of the 256 values), without a torch operation. Called on
        a run's thread beside the model (a live video's every frame), torch's three small operations each woke its
        thread team, 3 ms a frame in the window against 0.5 ms here.
        """
        pixels = np.asarray(fitted)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        table = _normalising_table(self.mean, self.std)
        out = np.empty((pixels.shape[2],) + pixels.shape[:2], np.float32)
        for channel in range(pixels.shape[2]):
            np.take(table[channel], pixels[:, :, channel], out=out[channel])
        return torch.from_numpy(out).unsqueeze(0)

    def _resize(self, image: Image.Image, resize: int) -> Image.Image:
        """The shorter side scaled to ``resize`` as torchvision does, and of a very wide (or tall) picture only the
        part the centre crop keeps.

        The resize scales the shorter side to ``resize`` and the longer one in proportion, and the crop then keeps
        ``crop`` pixels of the longer side: a 30000x1 PNG of a few hundred bytes would become a 7.68 million x 256
        picture (6 GB) to keep 224 columns of it. So when the resized longer side would exceed
        ``MAX_RESIZED_ASPECT`` times the larger of the two sizes, Pillow resamples only the source region under
        those ``crop`` pixels (``Image.resize(box=...)``: the same scale, filter and sample positions as the whole
        resize, to one grey level: the box's floating-point positions round a few pixels otherwise). Memory then
        follows the model's input size whatever the aspect ratio; pictures up to that ratio take torchvision's path
        itself, exactly.
        """
        F = _transforms()
        mode = _mode(self.interpolation)
        width, height = image.size
        short, long = min(width, height), max(width, height)
        new_long = int(resize * long / short) if short else 0  # torchvision's rounding
        if short == 0 or new_long <= MAX_RESIZED_ASPECT * max(resize, self.crop):
            return F.resize(image, [resize], interpolation=mode, antialias=True)
        first = int(round((new_long - self.crop) / 2.0))  # where F.center_crop starts along the longer side
        scale = long / new_long
        if width > height:
            box, size = (first * scale, 0.0, (first + self.crop) * scale, float(height)), (self.crop, resize)
        else:
            box, size = (0.0, first * scale, float(width), (first + self.crop) * scale), (resize, self.crop)
        return image.resize(size, _PIL_RESAMPLING[self.interpolation], box=box)

    def shown(self, fitted: Image.Image) -> np.ndarray:
        """A ``fitted`` picture as uint8 (H, W, 3): exactly what ``to_display`` gives of ``as_input(fitted)``
        (the normalisation undone rounds back to each pixel's own value), without the round trip (0.7 ms of a
        window's run, every frame of a video)."""
        pixels = np.asarray(fitted)
        if pixels.ndim == 2:
            pixels = np.repeat(pixels[:, :, None], 3, axis=2)
        return np.ascontiguousarray(pixels)

    def to_display(self, tensor: torch.Tensor) -> np.ndarray:
        """Undo the normalisation: the image as the model sees it, as uint8 HxWx3."""
        data = tensor.detach().to("cpu", torch.float32)
        if data.ndim == 4:
            if data.shape[0] != 1:
                raise ValueError(f"to_display takes one image, got a batch of {data.shape[0]}.")
            data = data[0]
        if data.ndim != 3 or data.shape[0] != self.channels:
            raise ValueError(f"to_display expects ({self.channels}, H, W), got {tuple(tensor.shape)}.")
        # numpy, not torch: a handful of small operations, each of which costs torch more to dispatch than to do.
        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1, 1, 1)
        std = np.asarray(self.std, dtype=np.float32).reshape(-1, 1, 1)
        pixels = (data.numpy() * std + mean) * np.float32(255.0)
        pixels = np.clip(np.rint(np.nan_to_num(pixels, nan=0.0)), 0, 255).astype(np.uint8)
        array = pixels.transpose(1, 2, 0)
        if array.shape[2] == 1:
            array = np.repeat(array, 3, axis=2)
        return np.ascontiguousarray(array)

    def describe(self) -> dict[str, Any]:
        """All fields as plain JSON values, for run records and the command line."""
        data = asdict(self)
        if not self.squash:  # records and sessions of torchvision-style preprocessing stay as they were
            del data["squash"]
        data["mean"] = list(self.mean)
        data["std"] = list(self.std)
        return data

    @classmethod
    def from_torchvision(cls, transforms: Any, size: int | None = None) -> Preprocess:
        """Sizes and statistics of a torchvision preset (``weights.transforms()``). ``ImageClassification``: its
        resize and centre crop. ``SemanticSegmentation`` resizes the shorter side and crops nothing: here a square
        of that side, so that every run of the model has the same input size. ``ObjectDetection`` only converts
        to [0, 1] (the detector resizes and normalises inside): mean 0, std 1, at ``size`` (the side the model's
        own transform resizes to; required, as the preset does not say it)."""
        if type(transforms).__name__ == "ObjectDetection":
            if size is None:
                raise ValueError("An ObjectDetection preset has no size (the detector resizes inside): give size.")
            return cls(resize=size, crop=size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
        if type(transforms).__name__ == "SemanticSegmentation" and getattr(transforms, "resize_size", None):
            resize = transforms.resize_size
            side = int(resize[0] if isinstance(resize, (list, tuple)) else resize)
            interpolation = transforms.interpolation
            return cls(
                resize=side,
                crop=side,
                mean=tuple(float(v) for v in transforms.mean),
                std=tuple(float(v) for v in transforms.std),
                interpolation=getattr(interpolation, "value", None) or str(interpolation),
            )

        def first(value: Any) -> int | None:
            if value is None:
                return None
            if isinstance(value, (list, tuple)):
                if len(value) != 1:
                    raise ValueError(f"Only a single shorter-side size is supported, got {list(value)}.")
                return int(value[0])
            return int(value)

        crop = first(transforms.crop_size)
        if crop is None:
            raise ValueError("The torchvision transforms have no crop size.")
        interpolation = transforms.interpolation
        name = getattr(interpolation, "value", None) or str(interpolation)  # an InterpolationMode, or its name
        mean = tuple(float(v) for v in transforms.mean)
        return cls(
            resize=first(transforms.resize_size),
            crop=crop,
            mean=mean,
            std=tuple(float(v) for v in transforms.std),
            channels=len(mean),
            interpolation=name,
        )
