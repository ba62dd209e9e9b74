"""What excites a channel: over a folder of images, per channel of each module, the images (and the part of each)
that excite it most, and how it behaves over the whole set. This module runs a scan's two phases on a backend
(``backends``) and makes its ``ScanResult``; the parts are in their own modules:

- ``accumulators``: per channel the top-k images by the channel's maximum over its positions (or by its mean,
  ``by="mean"``), with the score and the position (y, x) of the maximum, and running statistics over every image
  (mean, standard deviation, the fraction of images in which the channel is active);
- ``hook_pass`` and ``channel_scanner``: batched forward passes under ``torch.no_grad`` with forward hooks that
  reduce each output on the spot, a pass stopping once every scanned module has run;
- ``reading``: the images read as batch export reads them, found with the same listing and skip rules
  (``batch.find_images``);
- ``boxes`` and ``geometry``: the region of the image each top-k entry's position sees, computed only for the final
  top-k and mapped back through the preprocessing's crop and resize to the pixels of the image as read;
- ``checkpoint``: ``scan.partial.json``, so that a stopped scan goes on where it stopped, bit-identical;
- ``memory``: what a scan must hold at once, for refusing a size, a batch or a top-k that cannot fit.

Nothing here prints; progress goes to a callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.scan.accumulators import NO_IMAGE, Unit
from hookscope.core.scan.backends import LocalScan, ScanBackend
from hookscope.core.scan.boxes import EntryBoxes, field_boxes, module_fields
from hookscope.core.scan.checkpoint import CHECKPOINT_EVERY_S, Checkpoint, ScanState, scan_fingerprint
from hookscope.core.scan.results import FIELD, GRADIENT, Box, ModuleScan, ScanResult, ScanSettings, TopImage


@dataclass(frozen=True)
class ScanProgress:
    """Where a scan stands: ``phase`` "scan" counts images, "boxes" counts units (one per top-k entry)."""

    phase: str
    done: int
    total: int
    processed: int  # images run through the model in this call
    skipped: int  # images that could not be read (so far)
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Images per second run in this call (scan phase)."""
        return self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0


def run_scan(
    backend: ScanBackend,
    loaded: LoadedModel,
    images: Sequence[str | Path],
    settings: ScanSettings,
    *,
    root: str | Path | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[ScanProgress], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    checkpoint_every_s: float = CHECKPOINT_EVERY_S,
) -> ScanResult:
    """Scan ``images`` on ``backend``; ``loaded`` names the model and its preprocessing (the backend runs it).

    ``out_dir``: where the checkpoint lives (None: no checkpoint); ``resume`` goes on from it (it must match:
    same model, preprocessing, settings and image list). ``cancelled`` is asked before each batch and chunk; a
    stopped scan writes its checkpoint and comes back with ``complete`` False; a finished one writes it too, and
    ``write_scan`` removes it once scan.json is on disk. An unreadable image is skipped with
    its reason; a scan in which no image could be read is an error.
    """
    paths = [Path(p) for p in images]
    if not paths:
        raise HookscopeError("There are no images to scan.")
    base = Path(root) if root is not None else Path(paths[0]).parent
    checkpoint = Checkpoint(Path(out_dir) if out_dir is not None else None,
                            scan_fingerprint(loaded, settings, paths, base), checkpoint_every_s)  # fmt: skip
    state = checkpoint.start(resume)
    call = _Call(backend, loaded, paths, settings, state, checkpoint, progress, cancelled)
    boxes: EntryBoxes = {}
    try:
        if not call.scan_phase():
            return scan_result(loaded, paths, base, settings, state, complete=False)
        if not state.tops:
            reasons = state.skipped or []
            first = f": {reasons[0][1]}" if reasons else ""
            raise HookscopeError(f"None of the {len(paths)} images could be read{first}")
        complete = call.box_phase(boxes) if settings.boxes else True
        return scan_result(loaded, paths, base, settings, state, complete=complete, boxes=boxes)
    finally:
        # stopped, cancelled, interrupted or failed: a resume goes on from here; finished: kept until write_scan
        # has scan.json on disk, so that a full disk loses nothing
        checkpoint.save(state, force=True)


class _Call:
    """One call of ``run_scan``: its state, checkpoint and callbacks, and the two phases it runs."""

    def __init__(self, backend: ScanBackend, loaded: LoadedModel, paths: list[Path], settings: ScanSettings,
                 state: ScanState, checkpoint: Checkpoint, progress: Callable[[ScanProgress], None] | None,
                 cancelled: Callable[[], bool] | None) -> None:  # fmt: skip
        self.backend, self.loaded, self.paths, self.settings = backend, loaded, paths, settings
        self.state, self.checkpoint, self.progress, self.cancelled = state, checkpoint, progress, cancelled
        batch = settings.batch_size
        self.batches = [list(range(i, min(i + batch, len(paths)))) for i in range(0, len(paths), batch)]
        self.start = time.perf_counter()
        self.processed_here = 0

    def tell(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(ScanProgress(phase, done, total, self.processed_here, len(self.state.skipped or []),
                                       time.perf_counter() - self.start))  # fmt: skip

    def stopped(self) -> bool:
        return self.cancelled is not None and self.cancelled()

    def scan_phase(self) -> bool:
        """Every image once, batched, no gradients; True once every batch is in (False: stopped)."""
        state, batches, count, batch = self.state, self.batches, len(self.paths), self.settings.batch_size
        if state.next_batch >= len(batches):
            return True
        phase_start = time.perf_counter()
        self.tell("scan", min(state.next_batch * batch, count), count)
        scan = self.backend.scan(batches, state.next_batch)
        try:
            while not self.stopped():
                item = next(scan, None)
                if item is None:
                    break
                number, skipped, partials = item
                state.merge(number, skipped, partials, self.settings.top)
                self.processed_here += len(batches[number]) - len(skipped)
                self.tell("scan", min((number + 1) * batch, count), count)
                self.checkpoint.save(state)
            return state.next_batch >= len(batches)
        finally:
            scan.close()  # type: ignore[attr-defined]
            state.scan_s += time.perf_counter() - phase_start

    def box_phase(self, boxes: EntryBoxes) -> bool:
        """The boxes of the final top-k into ``boxes``: by the receptive field where the architecture allows it,
        else by the gradient (checkpointed: ``state.boxes`` holds them in the order of these units); True once
        every box is in (False: stopped)."""
        state, settings, loaded = self.state, self.settings, self.loaded
        boxed = [path for path in settings.modules if path not in settings.heads]  # a head's score has no position
        units = state.final_units(boxed)
        phase_start = time.perf_counter()
        self.tell("boxes", 0, len(units))
        fields = {} if settings.exact_boxes else module_fields(loaded, state.layouts, boxed)
        boxes.update(field_boxes(self.paths, loaded.preprocess, [u for u in units if u[0] in fields], fields))
        gradient = [u for u in units if u[0] not in fields]
        found: list[Box | None] = list(state.boxes or [])
        state.boxes = found
        state.box_kinds = {p: (FIELD if p in fields else GRADIENT) for p in boxed}
        chunks = [gradient[i : i + settings.batch_size] for i in range(len(found), len(gradient), settings.batch_size)]
        done_fields = len(units) - len(gradient)
        state.boxes_s += time.perf_counter() - phase_start
        self.tell("boxes", done_fields + len(found), len(units))
        if chunks:
            self._gradient_boxes(chunks, found, done_fields, len(units))
        boxes.update({(u[0], u[1], u[2]): box for u, box in zip(gradient, found)})
        return len(found) >= len(gradient)

    def _gradient_boxes(self, chunks: list[list[Unit]], found: list[Box | None], done: int, total: int) -> None:
        """The chunks of units on the backend, their boxes appended to ``found`` (the state's), until stopped."""
        phase_start = time.perf_counter()
        work = self.backend.boxes(chunks, 0)
        try:
            while not self.stopped():
                chunk = next(work, None)
                if chunk is None:
                    break
                found.extend(chunk[1])
                self.tell("boxes", done + len(found), total)
                self.checkpoint.save(self.state)
        finally:
            work.close()  # type: ignore[attr-defined]
            self.state.boxes_s += time.perf_counter() - phase_start


def scan_result(loaded: LoadedModel, paths: list[Path], root: Path, settings: ScanSettings, state: ScanState,
                complete: bool, boxes: EntryBoxes | None = None) -> ScanResult:  # fmt: skip
    """The ``ScanResult`` of what ``state`` holds: each module's top images (empty slots left out) with their
    ``boxes`` (None where not computed), its statistics, and how the scan was made."""
    boxes = boxes or {}
    modules = {}
    for path in settings.modules:
        if path not in state.tops:
            continue
        layout, top, moments = state.layouts[path], state.tops[path], state.moments[path]
        channels = []
        for channel in range(layout.channels):
            entries = []
            for score, image, position in zip(top.score[channel].tolist(), top.image[channel].tolist(),
                                               top.position[channel].tolist()):  # fmt: skip
                if image == NO_IMAGE:
                    continue
                y, x = layout.yx(position)
                entries.append(TopImage(int(image), float(score), y, x, boxes.get((path, channel, int(image)))))
            channels.append(entries)
        modules[path] = ModuleScan(path, layout, channels, moments.mean.copy(), moments.std,
                                   moments.active_fraction, (state.box_kinds or {}).get(path))  # fmt: skip
    return ScanResult(
        model={k: v for k, v in loaded.describe().items() if k != "notice"},
        images=[str(p) for p in paths],
        root=str(root),
        settings=settings,
        preprocessing=loaded.preprocess.describe(),
        modules=modules,
        processed=state.processed,
        skipped=list(state.skipped or []),
        complete=complete,
        scan_s=state.scan_s,
        boxes_s=state.boxes_s,
    )


def scan_images(
    loaded: LoadedModel,
    images: Sequence[str | Path],
    settings: ScanSettings,
    *,
    device: str = "cpu",
    root: str | Path | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[ScanProgress], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    checkpoint_every_s: float = CHECKPOINT_EVERY_S,
) -> ScanResult:
    """Scan ``images`` with ``loaded.module`` in this process (see ``run_scan``). The module is moved to ``device``
    and run in eval mode; its hooks are registered once for the scan phase and removed after it."""
    backend = LocalScan(loaded, settings, [Path(p) for p in images], device)
    return run_scan(backend, loaded, images, settings, root=root, out_dir=out_dir, resume=resume, progress=progress,
                    cancelled=cancelled, checkpoint_every_s=checkpoint_every_s)  # fmt: skip
