"""The scan's ranking of attention heads (``hookscope scan --attention``, issue 43): per image and head of an
attention module, how concentrated the class token's attention is on the patches, a number from 0 (spread evenly
over every patch) to 1 (all of it on one patch). The scan keeps each head's top images by it, as it keeps a
channel's by its maximum: a head is a "channel" of layout ``heads`` (``results.Layout``), one value per image.

The score: ``p`` the class token's row of the head's attention weights over the P patch keys, the prefix keys
(class token, registers) set aside and the row renormalised to sum to 1; ``1 - H(p) / log(P)``, ``H`` its entropy.
For a sequence without a class token (no prefix) ``p`` is the mean of every query's row, as the Attention panel's
default query is then. The weights are the Attn tick's (``hookscope.core.engine.attention``): exact, also where the
model runs fused attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.attention import AttentionHooks, attention_modules
from hookscope.core.pictures.attention import token_layout
from hookscope.core.scan.results import HEAD_SCORE

__all__ = ["HEAD_SCORE", "capturable_heads", "check_head_modules", "concentration", "register_head_hooks"]


def concentration(weights: torch.Tensor) -> torch.Tensor:
    """(batch, heads, queries, keys) attention weights -> (batch, heads) float32 scores (see the module's
    docstring); differentiable, so that a gradient can be taken through it."""
    if weights.ndim != 4:
        raise HookscopeError(f"Attention weights are (batch, heads, queries, keys), not {tuple(weights.shape)}.")
    layout = token_layout(int(weights.shape[-1]))
    keys = weights[..., layout.prefix :].double()  # 1 - H / log(P) cancels: a float32 entropy loses the score
    rows = keys[:, :, 0] if layout.prefix and weights.shape[-2] > 0 else keys.mean(dim=2)
    if layout.patches < 2:
        return torch.ones(rows.shape[:2], dtype=torch.float32, device=rows.device)  # one patch holds it all
    p = rows / rows.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -torch.special.xlogy(p, p).sum(dim=-1)
    return (1 - entropy / math.log(layout.patches)).float()


def check_head_modules(model: nn.Module, paths: list[str]) -> None:
    """``HookscopeError`` (one line) for a path that is not an attention module, or one whose weights cannot be
    read exactly (with the reason)."""
    supports = attention_modules(model)
    for path in paths:
        support = supports.get(path)
        if support is None:
            known = list(supports)
            where = f"its attention modules are {', '.join(known[:3])}{' ...' if len(known) > 3 else ''}" if known \
                else "the model has none"  # fmt: skip
            raise HookscopeError(f"Only the heads of attention modules are ranked: '{path}' is not one; {where}.",
                                 module_path=path)  # fmt: skip
        if not support.capturable:
            raise HookscopeError(f"The attention weights of '{path}' cannot be captured: {support.reason}.",
                                 module_path=path)  # fmt: skip


def capturable_heads(model: nn.Module) -> list[str]:
    """Every attention module of ``model`` whose weights can be read exactly (every layer, for heads)."""
    paths = [path for path, support in attention_modules(model).items() if support.capturable]
    if not paths:
        raise HookscopeError(
            "The model has no attention module whose weights can be captured: it has no heads to rank."
        )
    return paths


def register_head_hooks(
    module: nn.Module, running: Callable[[], bool], take: Callable[[torch.Tensor], None]
) -> list[torch.utils.hooks.RemovableHandle]:
    """The Attn tick's two hooks on ``module``, for the scan: while ``running()``, each call's attention weights are
    reduced on the spot to ``concentration`` and handed to ``take`` (the weights themselves are not kept)."""

    def record(kept: list[torch.Tensor]) -> None:
        if kept:
            take(concentration(kept[0]))

    hooks = AttentionHooks(running, record)
    return [module.register_forward_pre_hook(hooks.pre), module.register_forward_hook(hooks.post, always_call=True)]
