"""The boxes of a scan's top-k entries, in the pixels of the image as read (upright per EXIF), by either definition
(``results.BOX_DEFINITIONS``):

- the receptive field (``fields``), where the architecture allows it: no model run, the same box for every image,
  each image's header read once for its size;
- the gradient: the bounding box of the nonzero gradient of that one unit with respect to the input (exact for any
  architecture: whatever the network does, a pixel is in the box iff changing it changes the unit, to first order),
  computed by ``ChannelScanner.unit_boxes`` for chunks of units, only for the final top-k.

Either is mapped back through the preprocessing's crop and resize (``geometry.original_box``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hookscope.core.common.errors import ImageError
from hookscope.core.models.images import Preprocess
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.scan.accumulators import Unit
from hookscope.core.scan.channel_scanner import ChannelScanner
from hookscope.core.scan.fields import Field, receptive_fields
from hookscope.core.scan.geometry import original_box, upright_size
from hookscope.core.scan.reading import UnitsInput, read_units
from hookscope.core.scan.results import Box, Layout, ScanResult, ScanSettings, TopImage

EntryBoxes = dict[tuple[str, int, int], Box | None]  # (module path, channel, image index) -> box


def chunk_boxes(scanner: ChannelScanner, preprocess: Preprocess, units: Sequence[Unit],
                read: UnitsInput) -> list[Box | None]:  # fmt: skip
    """Boxes in original pixels for a chunk of units, from what ``reading.read_units`` read."""
    x, kept, sizes = read
    boxes: list[Box | None] = [None] * len(units)
    if x is None:
        return boxes
    found = scanner.unit_boxes(x, [units[i] for i in kept])
    for i, box in zip(kept, found):
        boxes[i] = original_box(box, sizes[units[i][2]], preprocess) if box is not None else None
    return boxes


def module_fields(loaded: LoadedModel, layouts: dict[str, Layout], modules: Sequence[str]) -> dict[str, Field]:
    """The receptive fields of the scanned modules the architecture allows, at the scan's input size (a module
    whose field does not match the layout the scan read keeps the gradient definition)."""
    preprocess = loaded.preprocess
    found, _reasons = receptive_fields(loaded.module, [p for p in modules if p in layouts],
                                       (preprocess.channels, preprocess.crop, preprocess.crop))  # fmt: skip
    fields = {}
    for path, field in found.items():
        layout = layouts[path]
        if field.whole or (layout.kind == "maps" and (len(field.rows), len(field.cols)) == (layout.height,
                                                                                             layout.width)):  # fmt: skip
            fields[path] = field
    return fields


def field_boxes(paths: Sequence[Path], preprocess: Preprocess, units: Sequence[Unit], fields: dict[str, Field]
                ) -> EntryBoxes:  # fmt: skip
    """Receptive-field boxes in original pixels: no model run, each image's header read once for its size."""
    sizes: dict[int, tuple[int, int] | None] = {}
    boxes: EntryBoxes = {}
    for path, channel, image, position in units:
        if image not in sizes:
            try:
                sizes[image] = upright_size(paths[image])
            except ImageError:
                sizes[image] = None  # gone since the scan: no box
        field, size = fields[path], sizes[image]
        y, x = divmod(position, max(1, len(field.cols))) if not field.whole else (0, 0)
        box = field.box(y, x) if size is not None else None
        boxes[(path, channel, image)] = (
            original_box(box, size, preprocess) if box is not None and size is not None else None
        )
    return boxes


def channel_boxes(
    loaded: LoadedModel, result: ScanResult, path: str, channel: int, device: str = "cpu"
) -> list[TopImage]:
    """One channel's top images with their boxes computed now, as the scan's box phase would (one gradient pass for
    the channel's k units): the window scans without boxes and computes them for the channel the user looks at.
    ``loaded`` must be the model the scan ran (its preprocessing is taken from the scan)."""
    module = result.modules[path]
    entries = result.top(path, channel)
    units: list[Unit] = [(path, channel, t.image, t.y * module.layout.width + t.x) for t in entries]
    if not units:
        return []
    preprocess = Preprocess(**result.preprocessing) if result.preprocessing else loaded.preprocess
    heads = (path,) if module.layout.kind == "heads" else ()
    scanner = ChannelScanner(loaded.module.to(device), ScanSettings((path,), top=len(units), heads=heads), device)
    paths = [Path(p) for p in result.images]
    boxes = chunk_boxes(scanner, preprocess, units, read_units(paths, preprocess, units))
    return [TopImage(t.image, t.score, t.y, t.x, box) for t, box in zip(entries, boxes)]
