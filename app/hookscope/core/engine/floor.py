"""The plain-PyTorch floor every benchmark and the live loop measure against: a bare forward+backward to the input,
and the hooks a careful script without Hookscope would register to see the same things (``bench.hooks`` says why)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.core.common.vocabulary import HookKind
from hookscope.core.engine.hooks import full_backward_obstacle
from hookscope.core.engine.structure import tensor_leaves
from hookscope.core.engine.tree import ModelSurvey


def bare_run(model: nn.Module, x: torch.Tensor) -> None:
    """The same work as ``capture_run`` without any hook: forward, top-1 logit, backward to the input."""
    with torch.enable_grad():
        xin = x.detach().clone().requires_grad_(True)
        out = model(xin)
        objective = out[0, out[0].argmax()]
        torch.autograd.backward(objective, inputs=[xin])


def floor_hooks(
    model: nn.Module, paths: list[str], kinds: tuple[HookKind, ...], known: ModelSurvey, kept: list[torch.Tensor]
) -> list[RemovableHandle]:
    """Plain PyTorch hooks that keep into ``kept`` what Hookscope's hooks of ``kinds`` record, with the copies the
    survey says are needed (see the module's docstring). Returns their handles."""
    modules = dict(model.named_modules())
    handles = []

    def keep_output(copy: bool) -> Callable:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            for _, tensor in tensor_leaves(output):
                kept.append(tensor.detach().clone() if copy else tensor.detach())

        return hook

    def keep_input(copy: bool) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            for _, tensor in tensor_leaves(args):
                kept.append(tensor.detach().clone() if copy else tensor.detach())

        return hook

    def grad_of(which: str) -> Callable:
        def hook(module: nn.Module, args: tuple, output: object = None) -> None:
            for _, tensor in tensor_leaves(output if which == "output" else args):
                if tensor.requires_grad:
                    tensor.register_hook(kept.append)

        return hook

    def full_backward(which: int) -> Callable:
        def hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
            kept.extend(g for g in (grad_input, grad_output)[which] if g is not None)

        return hook

    for path in paths:
        module, run = modules[path], known.run_of(path)
        # Where a full backward hook would raise or never fire, a careful script uses tensor hooks, as Hookscope does.
        full_works = not full_backward_obstacle(run)
        for kind in kinds:
            if kind == "attention":  # attention modules only; its cost is measured by core.bench.attention
                continue
            if kind == "forward":
                handles.append(module.register_forward_hook(keep_output(run.output_modified_later)))
            elif kind == "pre":
                handles.append(module.register_forward_pre_hook(keep_input(run.modifies_input)))
            elif kind == "tensor" or (kind == "backward" and not full_works):
                handles.append(module.register_forward_hook(grad_of("output")))
            elif kind == "grad_input" and not full_works:
                handles.append(module.register_forward_pre_hook(grad_of("input")))
            else:
                handles.append(module.register_full_backward_hook(full_backward(1 if kind == "backward" else 0)))
    return handles
