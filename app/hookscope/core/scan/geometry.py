"""Box geometry: a box in the model input's pixels back to the pixels of the image as read (the preprocessing's
centre crop and resize undone), an image's upright size from its header, and the bounding box of a mask."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from hookscope.core.models.images import Preprocess, probe_image
from hookscope.core.scan.results import Box


def bounding_box(mask: torch.Tensor) -> Box | None:
    """The (x0, y0, x1, y1) box, end exclusive, of a (H, W) mask's true pixels; None when there is none."""
    rows = torch.nonzero(mask.any(dim=1)).flatten()
    cols = torch.nonzero(mask.any(dim=0)).flatten()
    if rows.numel() == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def resized_size(size: tuple[int, int], preprocess: Preprocess) -> tuple[int, int]:
    """(width, height) after the preprocessing's resize (torchvision's rule: the shorter side to ``resize``)."""
    width, height = size
    if preprocess.squash:  # the whole picture to a square (transformers' height x width resize)
        side = preprocess.resize or preprocess.crop
        return side, side
    if preprocess.resize is None:
        return width, height
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = preprocess.resize, int(preprocess.resize * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def original_box(box: Box, size: tuple[int, int], preprocess: Preprocess) -> Box | None:
    """A box in the model input's pixels as a box in the pixels of the image (``size``: width, height) it was
    made from: the centre crop (and the padding torchvision adds when the crop is larger) undone, then the resize
    (pixel areas scaled; the resize filter's blur of a pixel or two is not added). None when the box lies
    entirely in the crop's padding."""
    width, height = size
    resized_w, resized_h = resized_size(size, preprocess)
    crop = preprocess.crop
    pad_left = (crop - resized_w) // 2 if crop > resized_w else 0
    pad_top = (crop - resized_h) // 2 if crop > resized_h else 0
    padded_w, padded_h = max(resized_w, crop), max(resized_h, crop)
    left = int(round((padded_w - crop) / 2.0)) - pad_left  # torchvision's center_crop, to the letter
    top = int(round((padded_h - crop) / 2.0)) - pad_top
    x0, y0, x1, y1 = box
    x0, x1 = max(0, x0 + left), min(resized_w, x1 + left)
    y0, y1 = max(0, y0 + top), min(resized_h, y1 + top)
    if x0 >= x1 or y0 >= y1:
        return None
    # Integer arithmetic: floor for the start, ceiling for the end, never off by one from rounding.
    return (x0 * width // resized_w, y0 * height // resized_h,
            -(-x1 * width // resized_w), -(-y1 * height // resized_h))  # fmt: skip


def upright_size(path: Path) -> tuple[int, int]:
    """An image's (width, height) as ``read_image`` gives it (upright per EXIF), from its header: not decoded."""
    width, height = probe_image(path)
    try:
        with Image.open(path) as opened:
            orientation = opened.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - a broken EXIF block: read_image keeps the picture as stored
        orientation = 1
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)
