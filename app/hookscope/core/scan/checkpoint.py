"""A scan's checkpoint: everything a scan has so far (``ScanState``), kept in ``scan.partial.json`` (written
atomically every ``CHECKPOINT_EVERY_S`` and when the scan stops), so that a stopped scan goes on where it stopped
(``resume``) with bit-identical results, and only when it is a scan of the same thing (``scan_fingerprint``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import write_json_atomically
from hookscope.core.scan.accumulators import ModulePartial, Moments, TopK, Unit
from hookscope.core.scan.results import CHECKPOINT_FILE, FORMAT_VERSION, Box, Layout, ScanSettings

CHECKPOINT_EVERY_S = 30.0


@dataclass
class ScanState:
    """Everything a scan has so far; a checkpoint is this, as JSON."""

    layouts: dict[str, Layout]
    tops: dict[str, TopK]
    moments: dict[str, Moments]
    next_batch: int = 0
    processed: int = 0
    skipped: list[tuple[int, str]] | None = None
    boxes: list[Box | None] | None = None  # in the order of ``final_units``, once the box phase has started
    scan_s: float = 0.0
    boxes_s: float = 0.0
    box_kinds: dict[str, str] | None = None  # per module, the definition its boxes follow (not checkpointed)

    def merge(self, number: int, skipped: list[tuple[int, str]], partials: dict[str, ModulePartial], k: int) -> None:
        for path, part in partials.items():
            if path not in self.layouts:
                self.layouts[path] = part.layout
                self.tops[path] = TopK.empty(part.layout.channels, k)
                self.moments[path] = Moments.empty(part.layout.channels)
            self.tops[path] = self.tops[path].merged(part.top, k)
            self.moments[path] = self.moments[path].merged(part.moments)
        self.skipped = (self.skipped or []) + list(skipped)
        self.processed += next(iter(partials.values())).moments.images if partials else 0
        self.next_batch = number + 1

    def final_units(self, modules: Sequence[str]) -> list[Unit]:
        """Every entry of the final top-k (empty slots left out), module by module (a chunk of one module's units
        stops its pass right after that module), then by image: neighbouring units share their image."""
        units: list[Unit] = []
        for path in modules:
            top = self.tops.get(path)
            if top is not None:
                units += sorted(top.units(path), key=lambda u: (u[2], u[1]))
        return units

    def to_json(self, fingerprint: dict[str, Any]) -> dict[str, Any]:
        return {
            "fingerprint": fingerprint,
            "next_batch": self.next_batch,
            "processed": self.processed,
            "skipped": [[i, r] for i, r in self.skipped or []],
            "boxes": None if self.boxes is None else [list(b) if b is not None else None for b in self.boxes],
            "scan_s": self.scan_s,
            "boxes_s": self.boxes_s,
            "modules": {path: {"layout": self.layouts[path].describe(), "top": self.tops[path].to_json(),
                               "moments": self.moments[path].to_json()} for path in self.layouts},
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScanState:
        modules = data["modules"]
        layouts = {p: Layout(**m["layout"]) for p, m in modules.items()}
        return cls(
            layouts=layouts,
            tops={p: TopK.from_json(m["top"]) for p, m in modules.items()},
            moments={p: Moments.from_json(m["moments"]) for p, m in modules.items()},
            next_batch=int(data["next_batch"]),
            processed=int(data["processed"]),
            skipped=[(int(i), str(r)) for i, r in data["skipped"]],
            boxes=None if data["boxes"] is None else [tuple(b) if b is not None else None for b in data["boxes"]],
            scan_s=float(data.get("scan_s", 0.0)),
            boxes_s=float(data.get("boxes_s", 0.0)),
        )


def _relative(image: Path, root: Path) -> str:
    try:
        return image.relative_to(root).as_posix()
    except ValueError:
        return image.as_posix()


def scan_fingerprint(loaded: LoadedModel, settings: ScanSettings, images: Sequence[Path], root: Path) -> dict:
    """What makes two scans' partial results interchangeable: a resume goes on only when it matches. The batch
    size is part of it: a different batching could round the last bit of a score differently."""
    names = "\n".join(_relative(p, root) for p in images)
    model = {k: v for k, v in loaded.describe().items() if k != "notice"}
    return {
        "version": FORMAT_VERSION,
        "model": model,
        "preprocessing": loaded.preprocess.describe(),
        "modules": list(settings.modules),
        "top": settings.top,
        "by": settings.by,
        "batch_size": settings.batch_size,
        "boxes": settings.boxes,
        "exact_boxes": settings.exact_boxes,
        **({"heads": list(settings.heads)} if settings.heads else {}),  # only then: earlier checkpoints still match
        "images": len(images),
        # surrogateescape: a name that is not UTF-8 hashes as its own bytes (a UTF-8 name is hashed as before)
        "images_sha256": hashlib.sha256(names.encode("utf-8", "surrogateescape")).hexdigest(),
    }


def _read_checkpoint(out: Path, fingerprint: dict) -> ScanState | None:
    file = out / CHECKPOINT_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise HookscopeError(f"The scan's checkpoint '{file}' cannot be read ({error}); start again without "
                             "resuming.", path=str(file)) from error  # fmt: skip
    if not isinstance(data, dict):
        raise HookscopeError(f"The scan's checkpoint '{file}' is damaged (it holds no scan); start again without "
                             "resuming.", path=str(file))  # fmt: skip
    if data.get("fingerprint") != fingerprint:
        old = data.get("fingerprint")
        old = old if isinstance(old, dict) else {}
        differs = [k for k in fingerprint if old.get(k) != fingerprint[k]]
        raise HookscopeError(
            f"'{out}' holds a scan of something else (its {', '.join(differs) or 'format'} differ); start again "
            "without resuming, or choose another output folder.", path=str(file),
        )  # fmt: skip
    try:
        state = ScanState.from_json(data)
        _check_state(state, fingerprint)
        return state
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
        raise HookscopeError(f"The scan's checkpoint '{file}' is damaged ({error}); start again without "
                             "resuming.", path=str(file)) from error  # fmt: skip


def _check_state(state: ScanState, fingerprint: dict) -> None:
    """A checkpoint that parsed but does not fit its own fingerprint (hand-edited, damaged) raises ValueError."""
    top, modules = fingerprint["top"], fingerprint["modules"]
    for path, layout in state.layouts.items():
        shapes = {tuple(t.shape) for t in (state.tops[path].score, state.tops[path].image, state.tops[path].position)}
        moments = state.moments[path]
        if (
            path not in modules
            or layout.channels < 1
            or shapes != {(layout.channels, top)}
            or any(len(a) != layout.channels for a in (moments.mean, moments.m2, moments.active))
        ):
            raise ValueError(f"the entry of '{path}' does not fit its layout")
    if not 0 <= state.processed <= fingerprint["images"] or state.next_batch < 0:
        raise ValueError("its counts are out of range")


class Checkpoint:
    """The checkpoint of one call of ``run_scan``: ``out`` / ``CHECKPOINT_FILE`` (None: no checkpoint), written at
    most every ``every_s`` seconds, and whenever forced (the scan stops, fails or finishes)."""

    def __init__(self, out: Path | None, fingerprint: dict[str, Any], every_s: float = CHECKPOINT_EVERY_S) -> None:
        self.out = out
        self.fingerprint = fingerprint
        self.every_s = every_s
        self.last_save = time.perf_counter()

    def start(self, resume: bool) -> ScanState:
        """The state to go on from (read back when ``resume``, else empty), with the output folder made."""
        out = self.out
        state = _read_checkpoint(out, self.fingerprint) if (resume and out is not None) else None
        state = state or ScanState({}, {}, {}, skipped=[])
        if out is not None:
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise HookscopeError(f"Cannot create the output folder '{out}': {error.strerror or error}.",
                                     path=str(out)) from error  # fmt: skip
        self.last_save = time.perf_counter()
        return state

    def save(self, state: ScanState, force: bool = False) -> None:
        out = self.out
        if out is not None and (force or time.perf_counter() - self.last_save >= self.every_s):
            try:
                write_json_atomically(state.to_json(self.fingerprint), out / CHECKPOINT_FILE)
            except OSError as error:  # the earlier checkpoint stays whole (written atomically)
                raise HookscopeError(
                    f"Cannot write the scan's checkpoint '{out / CHECKPOINT_FILE}': {error.strerror or error}.",
                    path=str(out / CHECKPOINT_FILE),
                ) from error
            self.last_save = time.perf_counter()
