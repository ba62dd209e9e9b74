"""What a scan must hold in memory at once, at least (``engine.memory_fit``'s rule: a lower bound, never a guess that
could refuse what works), so that the command line refuses a ``--size``, ``--batch-size`` or ``--top`` that cannot
fit before the first image is read, with the largest value that would."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hookscope.core.engine.memory_fit import activation_bytes
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.scan.accumulators import SLOT_BYTES
from hookscope.core.scan.hook_pass import layout_of
from hookscope.core.scan.results import ScanSettings

JSON_SLOT_BYTES = 3 * 8  # a slot in the checkpoint's JSON lists: a pointer in each of its three lists, at least


@dataclass(frozen=True)
class ScanMemory:
    """The bytes a scan needs: ``need(size, batch)`` for its images (``memory_need``), and ``top(k)`` for its
    top-k of ``channels`` channels in all (the largest module has ``widest``)."""

    need: Callable[[int, int], float]
    channels: int
    widest: int
    local: bool = True  # the running top-k of the scanner is in this process too (not on Ray's actors)

    def top(self, k: int) -> float:
        """Per channel ``k`` slots, held from the first batch to the end: the scan's own top-k and (in this
        process) the scanner's running one, the checkpoint's lists of them while it is written, and the widest
        module's two top-k side by side while a batch is merged."""
        copies = 2 if self.local else 1
        return self.channels * k * (copies * SLOT_BYTES + JSON_SLOT_BYTES) + self.widest * 2 * k * SLOT_BYTES


def scan_memory(loaded: LoadedModel, settings: ScanSettings, images: int, local: bool = True) -> ScanMemory:
    """The scan's memory (one forward pass of a small probe measures the model's activations)."""
    preprocess = loaded.preprocess
    per_pixel = activation_bytes(loaded.module, preprocess.channels, settings.modules)
    # A module whose heads are ranked keeps a top-k per head, fewer than its output's channels: left out (the need
    # stays a lower bound).
    widths = [layout_of(shape, path).channels for path, shape in per_pixel.shapes.items()
              if 2 <= len(shape) <= 4 and path not in settings.heads]  # fmt: skip
    ratio = (preprocess.resize or preprocess.crop) / preprocess.crop  # the resize's shorter side, per crop pixel
    tensor = preprocess.channels * 4
    entries = max(1, sum(widths)) * min(settings.top, images) if settings.boxes else 0

    def need(size: int, batch: int) -> float:
        """A batch of the scan: per image the decoded picture resized (uint8), its input tensor and the model's
        largest output; a chunk of the boxes (with gradients): per top-k entry its input and what autograd keeps
        as far as the first of the modules."""
        resized = int(size * ratio)
        scan = min(batch, images) * (resized * resized * 3 + (tensor + per_pixel.largest) * size * size)
        return max(scan, min(batch, entries) * (tensor + per_pixel.upto) * size * size)

    return ScanMemory(need, sum(widths), max(widths, default=0), local)
