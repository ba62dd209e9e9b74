"""Attention weights through hooks: the (batch, heads, queries, keys) softmax of an attention module, also where
the model runs fused ``scaled_dot_product_attention`` and the weights never exist as a tensor.

How: ticking Attn on a module registers a forward pre-hook and a forward hook on it. While a run records, the
pre-hook enters a torch function mode (:class:`AttentionMode`) and the forward hook (``always_call=True``) leaves
it, so the mode sees only the torch calls made inside that one module; every module not ticked runs exactly as
before, fused. Inside, the mode

* computes ``F.scaled_dot_product_attention`` explicitly: ``softmax(Q K^T * scale + mask)``, keeps those weights
  and returns ``weights @ V`` to the model, so the weights are the eager computation's and the model's output
  goes through them (their gradient is the gradient of the objective with respect to the attention weights);
* keeps the output of a softmax over the last dimension (the eager path: timm with ``fused_attn=False``,
  transformers' ``eager_attention_forward``, ``nn.MultiheadAttention`` asked for its weights), as computed;
* runs ``F.multi_head_attention_forward`` (``nn.MultiheadAttention``) asking for its per-head weights, which it
  then computes explicitly whatever the caller asked, and hands the caller what it asked for (no weights, or their
  mean over heads). Its fast path is never taken while a torch function mode is active.

Which modules are attention modules is read from the model's classes (``attention_modules``): the innermost
module whose class name ends in "Attention" (timm's ``Attention``, transformers' ``ViTAttention``,
``CLIPAttention``, ``SiglipAttention``, ``Dinov2Attention``...) and ``nn.MultiheadAttention``. One whose weights
cannot be read exactly (a transformers model loaded with ``flash_attention_2`` or ``flex_attention``, a module whose
code calls neither a softmax nor ``scaled_dot_product_attention``) is listed with the reason, and refused.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

# What the hook inspector lists as the method of an Attn tick.
ATTENTION_METHOD = "register_forward_pre_hook + register_forward_hook (a torch function mode inside the module)"
# transformers' attention implementations whose weights this mode computes exactly (the others are kernels the mode
# never sees: flash attention, flex attention, paged attention...).
EXACT_IMPLEMENTATIONS = ("eager", "sdpa")
_SOFTMAXES = (F.softmax, torch.softmax, torch.Tensor.softmax)
_MULTI_HEAD = inspect.signature(F.multi_head_attention_forward)
_KERNEL_WORDS = ("flash_attn", "memory_efficient_attention", "flex_attention", "xformers")


@dataclass(frozen=True)
class AttentionSupport:
    """Whether Hookscope can capture a module's attention weights exactly, and why not (one sentence)."""

    capturable: bool
    reason: str = ""
    heads: int | None = None  # the module's number of heads, where it says (nn.MultiheadAttention's 3-D softmax)


def attention_modules(model: nn.Module) -> dict[str, AttentionSupport]:
    """The attention modules of ``model`` by path, in the model's order, each with what ``attention_support`` says:
    ``nn.MultiheadAttention``, and every module whose class name ends in "Attention" and that holds no such module
    itself (transformers' ``ViTAttention`` rather than a wrapper around it). Empty for a model without attention."""
    named = dict(model.named_modules())
    candidates = [path for path, module in named.items() if _looks_like_attention(module)]
    inner = [
        path
        for path in candidates
        if isinstance(named[path], nn.MultiheadAttention)
        or not any(other != path and (not path or other.startswith(f"{path}.")) for other in candidates)
    ]
    return {path: attention_support(named[path]) for path in inner}


def _looks_like_attention(module: nn.Module) -> bool:
    return isinstance(module, nn.MultiheadAttention) or type(module).__name__.endswith("Attention")


def attention_support(module: nn.Module) -> AttentionSupport:
    """Whether the attention weights of ``module`` can be captured exactly, and if not, why (in the words the tree's
    tooltip and the command line's refusal show)."""
    name = type(module).__name__
    if isinstance(module, nn.MultiheadAttention):
        return AttentionSupport(True, heads=module.num_heads)
    heads = _heads_of(module)
    config = getattr(module, "config", None)
    implementation = getattr(config, "_attn_implementation", None) if config is not None else None
    if isinstance(implementation, str):
        if implementation in EXACT_IMPLEMENTATIONS:
            return AttentionSupport(True, heads=heads)
        return AttentionSupport(
            False,
            f"{name} runs the '{implementation}' attention kernel, whose weights never exist and have no eager "
            "equivalent Hookscope can compute in its place; load the model with attn_implementation='sdpa' or "
            "'eager' to capture them",
            heads,
        )
    source = _forward_source(type(module))
    kernel = next((word for word in _KERNEL_WORDS if word in source), "")
    if kernel and "scaled_dot_product_attention" not in source and "softmax" not in source:
        return AttentionSupport(False, f"{name} computes its attention with {kernel}, a kernel with no eager "
                                       "equivalent, so its weights cannot be read exactly", heads)  # fmt: skip
    if "scaled_dot_product_attention" in source or "softmax" in source or hasattr(module, "fused_attn"):
        return AttentionSupport(True, heads=heads)
    return AttentionSupport(
        False,
        f"{name}'s code calls neither a softmax nor torch's scaled_dot_product_attention, so Hookscope cannot tell "
        "where its attention weights are",
        heads,
    )


def _heads_of(module: nn.Module) -> int | None:
    for attribute in ("num_heads", "num_attention_heads", "n_heads", "heads"):
        value = getattr(module, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _forward_source(cls: type) -> str:
    """The source of ``cls.forward`` (what the module calls for its attention); "" where Python cannot read it."""
    try:
        return inspect.getsource(cls.forward)  # type: ignore[attr-defined]
    except (OSError, TypeError):
        return ""


Keep = Callable[[torch.Tensor], None]


class AttentionMode(TorchFunctionMode):
    """Inside one attention module's call: computes ``scaled_dot_product_attention`` explicitly and hands each
    attention's weights, (batch, heads, queries, keys), to ``keep``. See the module's docstring."""

    def __init__(self, keep: Keep) -> None:
        super().__init__()
        self.keep = keep

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self._explicit(*args, **kwargs)
        if func is F.multi_head_attention_forward:
            return self._multi_head(func, args, kwargs)
        output = func(*args, **kwargs)
        if func in _SOFTMAXES and isinstance(output, torch.Tensor) and output.ndim == 4:
            if _over_last_dim(args, kwargs, output.ndim):
                self.keep(output)
        return output

    def _multi_head(self, func: Any, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        bound = _MULTI_HEAD.bind(*args, **kwargs)
        bound.apply_defaults()
        wanted, average = bound.arguments["need_weights"], bound.arguments["average_attn_weights"]
        bound.arguments["need_weights"], bound.arguments["average_attn_weights"] = True, False
        output, weights = func(*bound.args, **bound.kwargs)
        self.keep(weights if weights.ndim == 4 else weights.unsqueeze(0))  # an unbatched call: (heads, L, S)
        if not wanted:
            return output, None
        return output, weights.mean(dim=-3) if average else weights

    def _explicit(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        weights = attention_weights(query, key, attn_mask, is_causal, scale, enable_gqa)
        self.keep(weights if weights.ndim == 4 else weights.unsqueeze(-3))
        if enable_gqa and value.ndim >= 3 and value.shape[-3] != query.shape[-3]:
            value = value.repeat_interleave(query.shape[-3] // value.shape[-3], dim=-3)
        used = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
        return used @ value


def attention_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``softmax(Q K^T * scale + mask)`` over the keys, as ``scaled_dot_product_attention`` defines it (a boolean
    mask keeps where True, a float mask is added, ``is_causal`` keeps the lower triangle; ``enable_gqa`` repeats
    the key heads for grouped queries) and as transformers' eager attention computes it (product, then scale)."""
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
    factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * factor
    if is_causal:
        length, keys = query.shape[-2], key.shape[-2]
        causal = torch.ones(length, keys, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return torch.softmax(scores, dim=-1)


def _over_last_dim(args: tuple, kwargs: dict, ndim: int) -> bool:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    return isinstance(dim, int) and ndim >= 3 and dim in (-1, ndim - 1)


class AttentionHooks:
    """The two hooks of one Attn tick: ``pre`` enters an :class:`AttentionMode` when ``recording()`` says a run is
    recording, ``post`` (registered with ``always_call=True``, so it runs even when the module raises) leaves it
    and hands the call's weights to ``record(weights)``. The modes live per thread: a model run on another thread
    meanwhile is not seen."""

    def __init__(self, recording: Callable[[], bool], record: Callable[[list[torch.Tensor]], None]) -> None:
        self._recording = recording
        self._record = record
        self._open = threading.local()

    def pre(self, module: nn.Module, args: tuple) -> None:
        if not self._recording():
            return
        kept: list[torch.Tensor] = []
        mode = AttentionMode(kept.append)
        stack = self._stack()
        mode.__enter__()
        stack.append((mode, kept))

    def post(self, module: nn.Module, args: tuple, output: Any) -> None:
        stack = self._stack()
        if not stack:
            return
        mode, kept = stack.pop()
        mode.__exit__(None, None, None)
        self._record(kept)

    def _stack(self) -> list[tuple[AttentionMode, list[torch.Tensor]]]:
        stack = getattr(self._open, "stack", None)
        if stack is None:
            stack = self._open.stack = []
        return stack
