"""A dataset scan's results (``hookscope.core.scan.run`` computes them): per module and channel the top images with their
scores, positions and receptive-field boxes, and the channel's statistics over the whole set; scan.json written and
read back; patches of the top images cut out of the original files, and PNG strips of them.

scan.json::

    {"model": {...}, "images": [path, ...],
     "modules": {PATH: {"channels": C,
                        "top": [[{"image": index, "score": float, "y": int, "x": int, "box": [x0, y0, x1, y1]}, ...]
                                per channel, best first],
                        "stats": {"mean": [...], "std": [...], "active": [...]}}},
     "scan": {how it was made: top, by, batch_size, preprocessing, layouts, processed, skipped, timings}}

Boxes are in the pixels of the image as read (upright per EXIF), the end exclusive (PIL's crop box). Each module says
which definition its boxes follow (``"boxes"``: one of ``BOX_DEFINITIONS``, or null without boxes): "receptive
field" (the default where the architecture allows it: every pixel the unit is connected to, ``hookscope.core.scan.fields``)
or "gradient" (``--exact-boxes``, and any module the field cannot be carried to: the pixels whose change changes the
unit in that image). A box is null where boxes were not computed or a gradient box is empty (the unit's gradient is
zero everywhere). A score that is not finite is null.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.core.models.images import read_image
from hookscope.core.models.loaded import model_title, untrained_note
from hookscope.core.outputs.batch import write_json_atomically

SCAN_FILE = "scan.json"
CHECKPOINT_FILE = "scan.partial.json"  # a stopped (or finished, not yet written) scan: ``run_scan`` keeps it
FORMAT_VERSION = 1
MAX_SCAN_BYTES = 1 << 30  # a scan.json of every channel of a large model is tens of MB
RANKINGS = ("max", "mean")
FIELD, GRADIENT = "receptive field", "gradient"
BOX_DEFINITIONS = {
    FIELD: "the bounding box of every input pixel the unit is connected to through the network (its receptive "
    "field, from the architecture: the gradient box with every ReLU passing and every max-pool open); the same for "
    "every image",
    GRADIENT: "the bounding box of the input pixels where the unit's gradient in that image is nonzero (a pixel is "
    "in it iff changing it changes the unit, to first order); null where the gradient is zero everywhere",
}
# What a head's score is (``scan --attention``; computed by ``heads.concentration``), written into scan.json.
HEAD_SCORE = (
    "how concentrated the class token's attention over the patches is in that image: 1 - H(p) / log(P), p its "
    "attention over the P patch keys (class token and registers set aside, renormalised), H the entropy; 1: all on "
    "one patch, 0: spread evenly (without a class token, the mean of every token's attention)"
)

Box = tuple[int, int, int, int]  # (x0, y0, x1, y1), pixels, the end exclusive (as PIL's crop takes it)


@dataclass(frozen=True)
class ScanSettings:
    """What to scan: ``modules`` (paths), ``top`` images per channel ranked ``by`` "max" or "mean", ``batch_size``
    images per forward pass (and units per gradient pass), ``boxes``: compute the boxes; ``exact_boxes``: every box
    by the gradient definition (else the receptive field where the architecture allows it). ``heads``: the attention
    modules among ``modules`` whose heads are ranked instead of their output's channels (``heads``: a head's score
    is of the whole image, so it has no box)."""

    modules: tuple[str, ...]
    top: int = 9
    by: str = "max"
    batch_size: int = 32
    boxes: bool = True
    exact_boxes: bool = False
    heads: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "modules", tuple(dict.fromkeys(self.modules)))
        object.__setattr__(self, "heads", tuple(dict.fromkeys(self.heads)))
        if not self.modules:
            raise HookscopeError("Name at least one module to scan.")
        if not set(self.heads) <= set(self.modules):
            raise HookscopeError("The modules whose heads are ranked must be among the modules scanned.")
        if self.top < 1:
            raise HookscopeError(f"The number of top images per channel must be at least 1, not {self.top}.")
        if self.batch_size < 1:
            raise HookscopeError(f"The batch size must be at least 1, not {self.batch_size}.")
        if self.by not in RANKINGS:
            raise HookscopeError(f"Rank images by 'max' or 'mean', not '{self.by}'.")


@dataclass(frozen=True)
class Layout:
    """How a module's output is read as channels and positions, as the window reads it: ``maps`` (N, C, H, W),
    ``maps-last`` (N, H, W, C: a square grid with more channels than rows, as Swin's), ``tokens`` (N, L, C; the
    position's y is the token, x is 0) and ``vector`` (N, C; one position); ``heads`` (N, heads; one position): an
    attention module's heads, each scored per image (``heads.concentration``), its "channels" heads."""

    kind: str
    channels: int
    height: int
    width: int

    @property
    def positions(self) -> int:
        return self.height * self.width

    def yx(self, position: int) -> tuple[int, int]:
        y, x = divmod(int(position), self.width)
        return y, x

    def view(self, tensor: torch.Tensor) -> torch.Tensor:
        """The output as (N, C, positions); a view where the layout allows."""
        if self.kind == "maps":
            return tensor.flatten(2)
        if self.kind == "maps-last":
            return tensor.flatten(1, 2).transpose(1, 2)
        if self.kind == "tokens":
            return tensor.transpose(1, 2)
        return tensor.unsqueeze(2)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "channels": self.channels, "height": self.height, "width": self.width}

    @property
    def unit(self) -> str:
        """What one of its channels is called: "head" for an attention module's heads, else "channel"."""
        return "head" if self.kind == "heads" else "channel"


def floats(values: torch.Tensor | np.ndarray) -> list:
    """Numbers for JSON: float32 and float64 values round-trip exactly; NaN and infinities become None."""
    array = values.numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    return [_float(v) for v in array.astype(np.float64).reshape(-1)] if array.ndim <= 1 else [floats(r) for r in array]


def _float(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def unfloats(values: list, missing: float = math.nan) -> list:
    """Back from JSON: None (a value that was not finite) becomes ``missing`` (-inf for a score: it ranks last)."""
    return [(missing if v is None else v) if not isinstance(v, list) else unfloats(v, missing) for v in values]


@dataclass(frozen=True)
class TopImage:
    """One of a channel's top images: its index in ``ScanResult.images``, the score it ranked by, the position
    of the channel's maximum and the box (original pixels; None when not computed or the gradient was zero)."""

    image: int
    score: float
    y: int
    x: int
    box: Box | None


@dataclass
class ModuleScan:
    """One module's scan: per channel its top images (best first) and its statistics over the whole set."""

    path: str
    layout: Layout
    top: list[list[TopImage]]
    mean: np.ndarray
    std: np.ndarray
    active: np.ndarray  # fraction of images where the channel's maximum is > 0
    boxes: str | None = None  # the definition its boxes follow (BOX_DEFINITIONS), None without boxes

    @property
    def channels(self) -> int:
        return self.layout.channels


@dataclass
class ScanResult:
    """A finished (or stopped: ``complete`` False) scan; ``to_json`` gives scan.json."""

    model: dict[str, Any]
    images: list[str]
    root: str
    settings: ScanSettings
    preprocessing: dict[str, Any]
    modules: dict[str, ModuleScan]
    processed: int  # images that went through the model (over every call, when resumed)
    skipped: list[tuple[int, str]]
    complete: bool
    scan_s: float = 0.0
    boxes_s: float = 0.0

    def top(self, path: str, channel: int) -> list[TopImage]:
        return self.modules[path].top[channel]

    def to_json(self) -> dict[str, Any]:
        modules = {}
        for path, module in self.modules.items():
            modules[path] = {
                "channels": module.channels,
                "boxes": module.boxes,
                "top": [[{"image": t.image, "score": _float(t.score), "y": t.y, "x": t.x,
                          "box": list(t.box) if t.box is not None else None} for t in channel]
                        for channel in module.top],
                "stats": {"mean": floats(module.mean), "std": floats(module.std), "active": floats(module.active)},
            }  # fmt: skip
        return {
            "model": self.model,
            "images": self.images,
            "modules": modules,
            "scan": {
                "version": FORMAT_VERSION,
                "root": self.root,
                "top": self.settings.top,
                "by": self.settings.by,
                "batch_size": self.settings.batch_size,
                "boxes": self.settings.boxes,
                "exact_boxes": self.settings.exact_boxes,
                "box_definitions": BOX_DEFINITIONS if self.settings.boxes else {},
                **({"heads": list(self.settings.heads), "head_score": HEAD_SCORE} if self.settings.heads else {}),
                "preprocessing": self.preprocessing,
                "layouts": {path: m.layout.describe() for path, m in self.modules.items()},
                "processed": self.processed,
                "skipped": [{"image": index, "reason": reason} for index, reason in self.skipped],
                "complete": self.complete,
                "scan_s": round(self.scan_s, 3),
                "boxes_s": round(self.boxes_s, 3),
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "scan.json") -> ScanResult:
        """A scan read back (scan.json); anything malformed (a number out of range, an image index that is not one
        of its images, counts that disagree) is one ``HookscopeError`` naming ``where``."""
        try:
            extra = data.get("scan", {})
            images = [_text(p) for p in data["images"]]
            layouts = extra.get("layouts", {})
            heads = tuple(path for path in data["modules"] if (layouts.get(path) or {}).get("kind") == "heads")
            settings = ScanSettings(tuple(data["modules"]), _count(extra.get("top", 9)), str(extra.get("by", "max")),
                                    _count(extra.get("batch_size", 32)), bool(extra.get("boxes", True)),
                                    bool(extra.get("exact_boxes", False)), heads)  # fmt: skip
            modules = {}
            for path, entry in data["modules"].items():
                shape = layouts.get(path) or {"kind": "maps", "height": 0, "width": 0}
                if shape["kind"] not in LAYOUTS:
                    raise ValueError(f"'{path}' has a layout of unknown kind {shape['kind']!r}")
                layout = Layout(shape["kind"], _count(entry["channels"]), _count(shape["height"], 0),
                                _count(shape["width"], 0))  # fmt: skip
                if len(entry["top"]) != layout.channels:
                    raise ValueError(f"'{path}' says {layout.channels} channels and lists {len(entry['top'])}")
                top = [[_top_image(t, layout, len(images)) for t in channel] for channel in entry["top"]]
                stats = [np.array([math.nan if v is None else float(v) for v in entry["stats"][k]], dtype=np.float64)
                         for k in ("mean", "std", "active")]  # fmt: skip
                if any(len(values) != layout.channels for values in stats):
                    raise ValueError(f"the statistics of '{path}' are not one per channel")
                definition = entry.get("boxes", GRADIENT if settings.boxes else None)  # before: always the gradient
                if definition is not None and definition not in BOX_DEFINITIONS:
                    raise ValueError(f"'{path}' has boxes of unknown definition {definition!r}")
                mean, std, active = stats
                modules[path] = ModuleScan(path, layout, top, mean, std, active, boxes=definition)
            skipped = [(_index(s["image"], len(images)), str(s["reason"])) for s in extra.get("skipped", [])]
            return cls(
                model=data.get("model", {}), images=images, root=str(extra.get("root", "")),
                settings=settings, preprocessing=extra.get("preprocessing", {}), modules=modules,
                processed=_count(extra.get("processed", 0), 0), skipped=skipped,
                complete=bool(extra.get("complete", True)), scan_s=float(extra.get("scan_s", 0.0)),
                boxes_s=float(extra.get("boxes_s", 0.0)),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, HookscopeError) as error:
            raise HookscopeError(f"'{where}' is not a Hookscope scan ({type(error).__name__}: {error}).",
                                 path=where) from error  # fmt: skip


LAYOUTS = ("maps", "maps-last", "tokens", "vector", "heads")
MAX_COUNT = 2**31  # channels, positions, pixels: more than any real model has, small enough to hold


def _count(value: object, least: int = 1) -> int:
    """A whole number from JSON in [least, MAX_COUNT); 1e999 (inf), 2.5, true or "3" are not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{value!r} is not a whole number")
    if not least <= int(value) < MAX_COUNT:
        raise ValueError(f"{int(value)} is out of range")
    return int(value)


def _index(value: object, length: int) -> int:
    index = _count(value, 0)
    if index >= length:
        raise ValueError(f"image index {index} is not one of its {length} images")
    return index


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a file name")
    return value


def _top_image(entry: dict[str, Any], layout: Layout, images: int) -> TopImage:
    y, x = _count(entry["y"], 0), _count(entry["x"], 0)
    if layout.height and layout.width and not (y < layout.height and x < layout.width):
        raise ValueError(f"position (y {y}, x {x}) is outside the {layout.height}x{layout.width} map")
    box = entry.get("box")
    if box is not None:
        box = tuple(_count(v, 0) for v in box)
        if len(box) != 4 or not (box[0] < box[2] and box[1] < box[3]):
            raise ValueError(f"box {list(box)} is not [x0, y0, x1, y1]")
    score = entry["score"]
    return TopImage(_index(entry["image"], images), -math.inf if score is None else float(score), y, x, box)


def write_scan(result: ScanResult, out_dir: str | Path) -> Path:
    """``out_dir``/scan.json, written atomically. A complete scan's checkpoint there goes only now, once scan.json
    is safely on disk (a full disk must not lose the scan: ``--resume`` writes it then)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomically(result.to_json(), out / SCAN_FILE)
    except OSError as error:
        raise HookscopeError(f"Cannot write '{out / SCAN_FILE}': {error.strerror or error}.",
                             path=str(out)) from error  # fmt: skip
    if result.complete:
        (out / CHECKPOINT_FILE).unlink(missing_ok=True)
    return out / SCAN_FILE


def read_scan(path: str | Path) -> ScanResult:
    """A scan.json file (or a folder holding one) as a ``ScanResult``."""
    file = Path(path)
    if file.is_dir():
        file = file / SCAN_FILE
    try:
        if not stat.S_ISREG(file.stat().st_mode):  # /dev/zero, a FIFO: never read whole
            raise HookscopeError(f"Cannot read the scan '{file}': it is not a file.", path=str(file))
        with open(file, "rb") as stream:
            text = stream.read(MAX_SCAN_BYTES + 1)  # bounded, whatever the size said
        if len(text) > MAX_SCAN_BYTES:
            raise HookscopeError(f"Cannot read the scan '{file}': it is larger than a scan.json can be "
                                 f"({MAX_SCAN_BYTES // 10**6} MB).", path=str(file))  # fmt: skip
        data = json.loads(text.decode("utf-8"))
    except FileNotFoundError as error:
        raise HookscopeError(f"There is no scan at '{file}'.", path=str(file)) from error
    except (OSError, ValueError, RecursionError) as error:
        raise HookscopeError(f"Cannot read the scan '{file}': {error}.", path=str(file)) from error
    if not isinstance(data, dict):
        raise HookscopeError(f"'{file}' is not a Hookscope scan.", path=str(file))
    return ScanResult.from_json(data, str(file))


def _clamped(box: Box, size: tuple[int, int]) -> Box | None:
    """The box inside the image (a scan.json edited by hand, or an image replaced by a smaller one); None when
    nothing of it is."""
    x0, y0 = max(0, box[0]), max(0, box[1])
    x1, y1 = min(size[0], box[2]), min(size[1], box[3])
    return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None


class PatchReader:
    """Reads the images of a scan (a few kept, as neighbouring channels share top images) and cuts patches."""

    def __init__(self, result: ScanResult, keep: int = 16) -> None:
        self.result = result
        self._images: OrderedDict[int, Image.Image | None] = OrderedDict()
        self._keep = keep

    def image(self, index: int) -> Image.Image | None:
        if index in self._images:
            self._images.move_to_end(index)
            return self._images[index]
        try:
            picture: Image.Image | None = read_image(self.result.images[index])
        except (ImageError, IndexError):
            picture = None
        self._images[index] = picture
        while len(self._images) > self._keep:
            self._images.popitem(last=False)
        return picture

    def patch(self, entry: TopImage, size: int = 96) -> np.ndarray:
        """The entry's box (the whole image when it has none) fitted into ``size`` x ``size``, on dark grey;
        uint8 RGB. An image that cannot be read any more is a flat grey tile."""
        tile = Image.new("RGB", (size, size), (40, 40, 40))
        picture = self.image(entry.image)
        box = _clamped(entry.box, picture.size) if picture is not None and entry.box is not None else None
        if picture is not None:
            part = picture.crop(box) if box is not None else picture
            scale = size / max(part.width, part.height)
            fitted = part.resize((max(1, round(part.width * scale)), max(1, round(part.height * scale))),
                                 Image.Resampling.BILINEAR)  # fmt: skip
            tile.paste(fitted, ((size - fitted.width) // 2, (size - fitted.height) // 2))
        return np.asarray(tile)

    def strip(self, path: str, channel: int, size: int = 96, gap: int = 2, labels: bool = True) -> np.ndarray:
        """The channel's top patches side by side, best first (uint8 RGB, height ``size``), each with its score and
        its image's file name under it (``labels``: a band of ``LABEL_HEIGHT`` pixels)."""
        entries = self.result.top(path, channel)
        count = max(1, len(entries))
        band = LABEL_HEIGHT if labels else 0
        strip = np.full((size + band, count * size + (count - 1) * gap, 3), 255, dtype=np.uint8)
        for rank, entry in enumerate(entries):
            strip[:size, rank * (size + gap) : rank * (size + gap) + size] = self.patch(entry, size)
        if not labels:
            return strip
        picture = Image.fromarray(strip)
        draw = ImageDraw.Draw(picture)
        font = ImageFont.load_default()
        for rank, entry in enumerate(entries):
            left = rank * (size + gap) + 2
            name = fit_text(shown_name(self.result.images[entry.image]), draw, font, size - 4)
            draw.text((left, size + 2), f"{entry.score:.4g}", fill=(0, 0, 0), font=font)
            draw.text((left, size + 15), name, fill=(70, 70, 70), font=font)
        return np.asarray(picture)


LABEL_HEIGHT = 28  # two lines under each patch: its score, its image's file name


def shown_text(text: str) -> str:
    """A file name or path as the scan shows it (strip captions, the HTML page, the window's tooltips): whatever
    the file system allowed, on one line and legible. A character that cannot be printed is written as Python
    writes it in a string (a newline as ``\\n``); a byte of a name that is not UTF-8 (which Python keeps as a lone
    surrogate) as ``\\xNN``."""
    return "".join(_shown_character(c) for c in text)


def _shown_character(character: str) -> str:
    if character.isprintable():
        return character
    if "\udc80" <= character <= "\udcff":  # os.fsdecode's surrogateescape: the byte it could not decode
        return f"\\x{ord(character) - 0xDC00:02x}"
    return repr(character)[1:-1]


def shown_name(path: str | os.PathLike) -> str:
    """The file name (last part) of ``path`` as the scan shows it (``shown_text``)."""
    return shown_text(Path(path).name)


def fit_text(
    text: str, draw: ImageDraw.ImageDraw, font: ImageFont.ImageFont | ImageFont.FreeTypeFont, width: int
) -> str:
    """``text`` as it fits in ``width`` pixels: whole, or its start and end around an ellipsis (the extension
    stays)."""
    if draw.textlength(text, font=font) <= width:
        return text
    keep = len(text)
    while keep > 2:
        keep -= 1
        head, tail = text[: (keep + 1) // 2], text[len(text) - keep // 2 :]
        if draw.textlength(f"{head}…{tail}", font=font) <= width:
            return f"{head}…{tail}"
    return text[:1] + "…"


def module_folder_name(path: str) -> str:
    """A module path as a folder name ("layer1.0.conv1" stays, the whole model is "(model)")."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in path) or "(model)"


NOTE_HEIGHT = 14  # the line above a strip of an untrained model's channel: "untrained: random weights, seed 0"


def _with_note(strip: np.ndarray, note: str) -> np.ndarray:
    """``strip`` under a line saying ``note`` (that the model's weights are random), as much of it as fits."""
    picture = Image.new("RGB", (strip.shape[1], strip.shape[0] + NOTE_HEIGHT), (255, 255, 255))
    picture.paste(Image.fromarray(strip), (0, NOTE_HEIGHT))
    draw = ImageDraw.Draw(picture)
    font = ImageFont.load_default()
    words = [note, note.partition(",")[0], note.partition(":")[0]]  # shorter forms for a narrow strip
    fitting = next((w for w in words if draw.textlength(w, font=font) <= strip.shape[1] - 4), words[-1])
    draw.text((2, 1), fitting, fill=(170, 0, 0), font=font)
    return np.asarray(picture)


def write_strips(result: ScanResult, out_dir: str | Path, size: int = 96,
                 progress: Callable[[int, int], None] | None = None,
                 cancelled: Callable[[], bool] | None = None) -> int:  # fmt: skip
    """One PNG strip of top patches per channel, each patch labelled with its score and image file name:
    ``out_dir``/png/MODULE/channel-0007.png. Returns the count."""
    reader = PatchReader(result)
    total = sum(m.channels for m in result.modules.values())
    title, note = model_title(result.model), untrained_note(result.model)
    written = 0
    for path, module in result.modules.items():
        folder = Path(out_dir) / "png" / module_folder_name(path)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise HookscopeError(f"Cannot create '{folder}': {error.strerror or error}.", path=str(folder)) from error
        for channel in range(module.channels):
            if cancelled is not None and cancelled():
                return written
            target = folder / f"{module.layout.unit}-{channel:04d}.png"
            try:
                strip = reader.strip(path, channel, size)
                picture = Image.fromarray(_with_note(strip, note) if note else strip)
                info = PngInfo()  # the model, as the page titles it, in the file's own Title
                info.add_text("Title", f"{path or '(model)'} {module.layout.unit} {channel} of {title}")
                picture.save(target, pnginfo=info)
            except OSError as error:
                target.unlink(missing_ok=True)  # no half-written strip left behind
                raise HookscopeError(f"Cannot write '{target}': {error.strerror or error}.",
                                     path=str(target)) from error  # fmt: skip
            written += 1
            if progress is not None:
                progress(written, total)
    return written
