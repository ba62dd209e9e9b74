"""The scan's work on one model in one process: a batch of images to per-module partial results (the entries that
can still enter a top-k and the batch's moments), and units to input-pixel boxes by the gradient definition.

Batched forward passes under ``torch.no_grad`` with forward hooks only (``hook_pass``); each hook reduces its
module's output to (images x channels) numbers on the spot (max, sum, sum of squares; the position of the maximum
only for the entries that can still enter a top-k), so nothing of the size of a feature map is kept, and a later
in-place op (ResNet's ``ReLU(inplace=True)``) cannot change what was read. The gradient boxes run the units as one
batch with gradients, one unit per batch element (batch elements do not mix in eval mode), stopping after the
deepest module the batch needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.scan.accumulators import NO_IMAGE, ModulePartial, Moments, TopK, Unit, rank_order
from hookscope.core.scan.geometry import bounding_box
from hookscope.core.scan.hook_pass import PassHooks, eval_mode, layout_of
from hookscope.core.scan.results import Box, Layout, ScanSettings


class ChannelScanner:
    """The scan's work on one model in one process: a batch of images to per-module partial results, and units to
    input-pixel boxes. Used by ``LocalScan`` and by the Ray actors alike, so both compute the same numbers."""

    def __init__(self, model: nn.Module, settings: ScanSettings, device: str | torch.device = "cpu") -> None:
        self.model = model
        self.settings = settings
        self.device = torch.device(device)
        self.layouts: dict[str, Layout] = {}
        self.running: dict[str, TopK] = {}  # this scanner's own top-k so far: its floor spares most argmax work
        self._hooks: PassHooks | None = None  # the scan's hooks while ``scanning`` holds them

    @contextmanager
    def scanning(self) -> Iterator[None]:
        """Hold the scan's forward hooks and eval mode over many batches: ``partial`` called inside registers no
        hooks and switches no mode per batch (each costs a walk over every module of the model). Between batches
        the hooks do nothing; the model is in eval mode throughout. Outside, ``partial`` does both itself."""
        if self._hooks is not None:
            yield
            return
        hooks = PassHooks(self.model, self.settings.modules, lambda _path, _tensor: None, self.settings.heads)
        self._hooks = hooks
        try:
            with eval_mode(self.model):
                yield
        finally:
            self._hooks = None
            hooks.remove()

    def _layout(self, path: str, tensor: torch.Tensor) -> Layout:
        layout = layout_of(tensor.shape, path)
        if path in self.settings.heads:  # (N, heads): one score per image and head (``heads.concentration``)
            layout = Layout("heads", layout.channels, 1, 1)
        known = self.layouts.setdefault(path, layout)
        if known != layout:
            raise HookscopeError(
                f"{path}'s output changed shape between images ({known.describe()} then {layout.describe()}); "
                "the scan needs one shape for every image.",
                module_path=path,
            )
        return known

    def partial(self, x: torch.Tensor, images: Sequence[int]) -> dict[str, ModulePartial]:
        """Run a batch (image indexes ``images``) and reduce every scanned module's output to a ``ModulePartial``:
        the batch's entries that can still enter this scanner's top-k (the others certainly cannot enter any top-k
        this scanner's results are merged into), and the batch's moments."""
        reduced: dict[str, tuple[Layout, TopK, tuple[torch.Tensor, ...]]] = {}
        by_mean = self.settings.by == "mean"
        k = self.settings.top
        device_ids = torch.as_tensor(list(images), dtype=torch.int64, device=self.device)

        def take(path: str, tensor: torch.Tensor) -> None:
            layout = self._layout(path, tensor)
            values = layout.view(tensor).float()  # (N, C, P); float32 for half-precision models too
            # Three fast reductions (a max with its position costs ten times an amax on the CPU) ...
            peak = values.amax(dim=2)
            total = values.sum(dim=2)
            squares = torch.linalg.vector_norm(values, dim=2).square()
            key = (total / layout.positions if by_mean else peak).T  # (C, N)
            # ... and the position of the maximum only where an entry can still take a place.
            image = device_ids.expand(layout.channels, -1)
            order = rank_order(key, image, k)  # (C, min(k, N))
            score = key.gather(1, order)
            running = self.running.get(path)
            floor = running.floor().to(score.device) if running is not None else torch.full_like(score[:, 0], -math.inf)
            keep = (score >= floor.unsqueeze(1)) | torch.isneginf(floor).unsqueeze(1)
            channel, rank = torch.nonzero(keep, as_tuple=True)
            position = torch.zeros_like(order)
            position[channel, rank] = values[order[channel, rank], channel].argmax(dim=1)
            top = TopK(torch.where(keep, score, torch.full_like(score, -math.inf)),
                       torch.where(keep, image.gather(1, order), torch.full_like(order, NO_IMAGE)), position)  # fmt: skip
            reduced[path] = (layout, top, (total, squares, peak))

        with self.scanning():
            hooks = self._hooks
            assert hooks is not None
            hooks.take = take
            try:
                with torch.no_grad():
                    hooks.run(self.model, x.to(self.device))
            finally:
                hooks.take = lambda _path, _tensor: None  # nothing of this batch kept alive by the hooks
        partials = {}
        for path, (layout, top, tensors) in reduced.items():
            top = TopK(*(t.to("cpu") for t in (top.score, top.image, top.position)))
            total, squares, peak = (t.to("cpu") for t in tensors)
            running = self.running.get(path) or TopK.empty(layout.channels, k)
            self.running[path] = running.merged(top, k)
            partials[path] = ModulePartial(layout, top, Moments.of_batch(total, squares, peak, layout.positions))
        return partials

    def unit_boxes(self, x: torch.Tensor, units: Sequence[Unit]) -> list[Box | None]:
        """For batch element i (an image) and ``units[i]`` (path, channel, image, position), the bounding box in
        input pixels of the nonzero gradient of that one unit with respect to the input; None where the gradient is
        zero everywhere (e.g. a unit at 0 behind a ReLU)."""
        if not units:
            return []
        rows: dict[str, list[int]] = {}
        for index, (path, _channel, _image, _position) in enumerate(units):
            rows.setdefault(path, []).append(index)
        picked: list[torch.Tensor] = []

        def take(path: str, tensor: torch.Tensor) -> None:
            values = self._layout(path, tensor).view(tensor)
            index = rows[path]
            # Picked here, before anything later in the network changes the tensor in place.
            picked.append(values[torch.tensor(index, device=values.device),
                                 torch.tensor([units[i][1] for i in index], device=values.device),
                                 torch.tensor([units[i][3] for i in index], device=values.device)].sum())  # fmt: skip

        paths = list(rows)
        x = x.detach().to(self.device).clone().requires_grad_(True)
        hooks = PassHooks(self.model, paths, take, self.settings.heads)
        try:
            with torch.enable_grad(), eval_mode(self.model):
                hooks.run(self.model, x)
                wanted = [p for p in picked if p.requires_grad]
                grad = torch.autograd.grad(torch.stack(wanted).sum(), x, allow_unused=True)[0] if wanted else None
        finally:
            hooks.remove()
        if grad is None:
            return [None] * len(units)
        support = (grad != 0).any(dim=1).to("cpu")  # (B, H, W)
        return [bounding_box(support[i]) for i in range(len(units))]
