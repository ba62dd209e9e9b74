"""Where a scan's work runs, behind one small interface (``ScanBackend``): batches of image indexes in, partial top-k
and moments out; chunks of units in, boxes out. ``LocalScan`` runs in this process, a reader thread reading the next
batches while the model runs this one (``batch.read_ahead``, as batch export does); ``hookscope.core.scan.on_ray``
runs the same code on a Ray cluster."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Protocol

from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import READ_AHEAD, read_ahead
from hookscope.core.scan.accumulators import ModulePartial, Unit
from hookscope.core.scan.boxes import chunk_boxes
from hookscope.core.scan.channel_scanner import ChannelScanner
from hookscope.core.scan.reading import FittedBatch, FittedUnits, fit_batch, fit_units, stacked, units_input
from hookscope.core.scan.results import Box, ScanSettings

ScanBatch = tuple[int, list[tuple[int, str]], dict[str, ModulePartial]]  # batch number, skipped, partials
BoxChunk = tuple[int, list[Box | None]]  # chunk number, boxes in the original image's pixels


class ScanBackend(Protocol):
    """Where the work runs: batches of image indexes in (in order), partials out; chunks of units in, boxes out."""

    def scan(self, batches: Sequence[Sequence[int]], start: int) -> Iterator[ScanBatch]: ...

    def boxes(self, chunks: Sequence[Sequence[Unit]], start: int) -> Iterator[BoxChunk]: ...


class LocalScan:
    """The scan in this process: a reader thread reads the next batches while the model runs this one."""

    def __init__(self, loaded: LoadedModel, settings: ScanSettings, paths: Sequence[Path], device: str = "cpu") -> None:
        self.preprocess = loaded.preprocess
        self.paths = list(paths)
        loaded.module.to(device)
        self.scanner = ChannelScanner(loaded.module, settings, device)

    def scan(self, batches: Sequence[Sequence[int]], start: int) -> Iterator[ScanBatch]:
        # The reader thread only decodes and fits (Pillow); the tensors are made here, on the model's thread.
        def read(number: int) -> FittedBatch:
            return fit_batch(self.paths, self.preprocess, batches[number])

        # The hooks and eval mode are set once for the whole scan, not once per batch (the scanner's ``scanning``).
        with self.scanner.scanning(), closing(read_ahead(range(start, len(batches)), read, READ_AHEAD,
                                                         "hookscope-scan-read")) as reads:  # fmt: skip
            for number, future in reads:
                pictures, kept, skipped = future.result()
                x = stacked(self.preprocess, pictures)
                yield number, skipped, (self.scanner.partial(x, kept) if x is not None else {})

    def boxes(self, chunks: Sequence[Sequence[Unit]], start: int) -> Iterator[BoxChunk]:
        def read(number: int) -> FittedUnits:
            return fit_units(self.paths, self.preprocess, chunks[number])

        with closing(read_ahead(range(start, len(chunks)), read, READ_AHEAD, "hookscope-scan-read")) as reads:
            for number, future in reads:
                read_input = units_input(self.preprocess, chunks[number], future.result())
                yield number, chunk_boxes(self.scanner, self.preprocess, chunks[number], read_input)
