"""The scan's own forward pass: hooks that hand each scanned module's output to a function and stop the pass once
every scanned module has run (the rest of the network is not needed), eval mode around it, and how a module's
output is read as channels and positions (``layout_of``).

The scan does not use the window's hook registry: its hooks are registered once for a scan and do nothing outside
its passes, so they can stay on a model over many batches without touching any other use of it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.structure import tensor_leaves
from hookscope.core.scan.heads import register_head_hooks
from hookscope.core.scan.results import Layout


def layout_of(shape: Sequence[int], path: str) -> Layout:
    """The layout of a batched output shape; any other rank is one clear error naming the module."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 4:
        _, a, b, c = shape
        if a == b and c > a:
            return Layout("maps-last", c, a, b)
        return Layout("maps", a, b, c)
    if len(shape) == 3:
        return Layout("tokens", shape[2], shape[1], 1)
    if len(shape) == 2:
        return Layout("vector", shape[1], 1, 1)
    raise HookscopeError(
        f"{path or 'The model'}'s output is {'x'.join(map(str, shape[1:])) or 'a scalar'} per image; the scan reads "
        "(C, H, W) maps, (tokens, C) sequences and (C,) vectors.",
        module_path=path,
    )


def output_tensor(output: Any, path: str) -> torch.Tensor:
    """The tensor a module's output is scanned by: the output itself, or the first floating-point leaf of a tuple,
    dict or dataclass (as the window's first record of it)."""
    for _leaf, tensor in tensor_leaves(output):
        if tensor.is_floating_point():
            return tensor
    raise HookscopeError(f"{path or 'The model'} gives no floating-point tensor to scan.", module_path=path)


class _StopForward(Exception):
    """Raised by the last hook a pass needs: the rest of the network need not run."""


class PassHooks:
    """Forward hooks on ``paths``, one pass at a time: during ``run`` the first call of each module goes to
    ``take(path, tensor)`` (a module called twice, as ResNet's ``relu``, is read at its first call); once every
    module has been read, the pass stops. Outside ``run`` the hooks do nothing, so they can stay registered over
    many passes (a scan registers them once, not once per batch) without touching any other use of the model.

    A path in ``heads`` (an attention module, ``scan --attention``) hands ``take`` its heads' scores, (N, heads),
    instead of its output: the Attn tick's hooks (``heads.register_head_hooks``) read its attention weights."""

    def __init__(self, model: nn.Module, paths: Sequence[str], take: Callable[[str, torch.Tensor], None],
                 heads: Collection[str] = ()) -> None:  # fmt: skip
        modules = dict(model.named_modules())
        missing = [p for p in paths if p not in modules]
        if missing:
            raise HookscopeError(
                f"The model has no module named {', '.join(repr(m) for m in missing)}.", module_path=missing[0]
            )
        self.paths = list(paths)
        self.take = take
        self.seen: set[str] = set()
        self.running = False
        self._handles = []
        for path in self.paths:
            if path in heads:
                self._handles += register_head_hooks(modules[path], lambda: self.running, self._reader(path))
            else:
                self._handles.append(modules[path].register_forward_hook(self._hook(path)))

    def _hook(self, path: str) -> Callable:
        read = self._reader(path)

        def hook(_module: nn.Module, _args: tuple, output: Any) -> None:
            if self.running and path not in self.seen:
                read(output_tensor(output, path))

        return hook

    def _reader(self, path: str) -> Callable[[torch.Tensor], None]:
        def read(tensor: torch.Tensor) -> None:
            if not self.running or path in self.seen:
                return
            self.seen.add(path)
            self.take(path, tensor)
            if len(self.seen) == len(self.paths):
                raise _StopForward

        return read

    def run(self, model: nn.Module, x: torch.Tensor) -> None:
        self.seen = set()
        self.running = True
        try:
            model(x)
        except _StopForward:
            pass
        finally:
            self.running = False
        not_run = [p for p in self.paths if p not in self.seen]
        if not_run:
            raise HookscopeError(
                f"{not_run[0] or 'The model'} did not run in the forward pass, so it cannot be scanned.",
                module_path=not_run[0],
            )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode while scanning (batch elements must not mix, as training-mode batch norm would make them)."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)
