"""Reading the scan's images: a batch of image indexes (the scan phase) or a chunk of units (the box phase) read as
batch export reads them (``read_image``, then the model's own preprocessing); an image that cannot be read is
skipped with its one-line reason.

Each reader has two halves: the fitting (Pillow only, so that a read-ahead thread can do it without starting a
second OpenMP team) and the stacking into a tensor (torch: on the thread that runs the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from PIL import Image

from hookscope.core.common.errors import ImageError
from hookscope.core.models.images import Preprocess, read_image
from hookscope.core.scan.accumulators import Unit

FittedBatch = tuple[list[Image.Image], list[int], list[tuple[int, str]]]
FittedUnits = tuple[dict[int, Image.Image], dict[int, tuple[int, int]]]
UnitsInput = tuple[torch.Tensor | None, list[int], dict[int, tuple[int, int]]]


def fit_batch(paths: Sequence[Path], preprocess: Preprocess, indexes: Sequence[int]) -> FittedBatch:
    """Read the images ``indexes`` and fit them to the model's input (``Preprocess.fitted``: Pillow only, so a
    read-ahead thread can do it without starting a second OpenMP team): the pictures that could be read, their
    indexes, and (index, one-line reason) for those that could not."""
    pictures, kept, skipped = [], [], []
    for index in indexes:
        try:
            pictures.append(preprocess.fitted(read_image(paths[index])))
            kept.append(index)
        except ImageError as error:
            skipped.append((index, str(error)))
    return pictures, kept, skipped


def stacked(preprocess: Preprocess, pictures: Sequence[Image.Image]) -> torch.Tensor | None:
    """Fitted pictures as one normalised input batch (torch: on the thread that runs the model)."""
    return torch.cat([preprocess.as_input(picture) for picture in pictures]) if pictures else None


def read_batch(paths: Sequence[Path], preprocess: Preprocess, indexes: Sequence[int]
               ) -> tuple[torch.Tensor | None, list[int], list[tuple[int, str]]]:  # fmt: skip
    """Read and preprocess the images ``indexes``: the stacked batch of those that could be read, their indexes,
    and (index, one-line reason) for those that could not."""
    pictures, kept, skipped = fit_batch(paths, preprocess, indexes)
    return stacked(preprocess, pictures), kept, skipped


def fit_units(paths: Sequence[Path], preprocess: Preprocess, units: Sequence[Unit]) -> FittedUnits:
    """Each image of a chunk of units read once and fitted (Pillow only, as ``fit_batch``), and each image's size
    as read (width, height); (0, 0) for one that cannot be read any more."""
    pictures: dict[int, Image.Image] = {}
    sizes: dict[int, tuple[int, int]] = {}
    for _path, _channel, image, _position in units:
        if image not in pictures and image not in sizes:
            try:
                picture = read_image(paths[image])
            except ImageError:
                sizes[image] = (0, 0)  # gone since the scan: no box
                continue
            sizes[image] = picture.size
            pictures[image] = preprocess.fitted(picture)
    return pictures, sizes


def units_input(preprocess: Preprocess, units: Sequence[Unit], fitted: FittedUnits) -> UnitsInput:
    """The input batch for a chunk of units (one element per unit), the units whose image could be read, and the
    images' sizes: what ``boxes.chunk_boxes`` takes."""
    pictures, sizes = fitted
    kept = [i for i, unit in enumerate(units) if unit[2] in pictures]
    return stacked(preprocess, [pictures[units[i][2]] for i in kept]), kept, sizes


def read_units(paths: Sequence[Path], preprocess: Preprocess, units: Sequence[Unit]) -> UnitsInput:
    """The input batch for a chunk of units (one element per unit, each image read once), the units whose image
    could be read, and each image's size as read (width, height)."""
    return units_input(preprocess, units, fit_units(paths, preprocess, units))
