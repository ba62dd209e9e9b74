"""What attention weights look like on the image: per-head maps of one query token over the patch grid, DINO's
thresholded view, attention rollout and its gradient-weighted form (the records of the Attn tick,
``hookscope.core.engine.attention``).

Tokens: a vision transformer's sequence is its prefix tokens (the class token, DINOv2's register tokens, a
distillation token) followed by the patches row by row; ``token_layout`` finds the prefix and the grid. The views:

* a head's map: row ``query`` of its (queries, keys) weights, over the patch keys (the prefix keys set aside);
* DINO's view (Caron et al. 2021, ``visualize_attention.py``): each map thresholded to keep the smallest set of
  patches that holds ``keep`` of its mass;
* rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): per layer the heads fused (mean,
  max or min), the lowest ``discard`` share of the fused weights set to 0 (the class token's own weight kept), the
  identity added for the residual connection and the rows renormalised, the layers multiplied from the first up;
  the class token's row over the patches is the map;
* gradient-weighted rollout (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability"): the same, each
  layer's heads fused as the mean of the positive part of (gradient x attention), the gradient being the run's
  target's with respect to the weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.capture import RunResult
from hookscope.core.pictures.views import under_centres

HEAD_FUSIONS = ("mean", "max", "min")
MAX_PREFIX = 8  # class token, distillation token, up to 4 (or more) registers: the prefixes looked for


@dataclass(frozen=True)
class TokenLayout:
    """``prefix`` tokens first (the class token, registers), then a ``height`` x ``width`` grid of patches."""

    prefix: int
    height: int
    width: int

    @property
    def patches(self) -> int:
        return self.height * self.width


def token_layout(tokens: int, grid: tuple[int, int] | None = None) -> TokenLayout:
    """The layout of a sequence of ``tokens``: on ``grid`` (rows, columns of patches) when known, else the smallest
    prefix that leaves a square grid (197: a class token and 14 x 14; 261: a class token, 4 registers and 16 x 16).
    ``HookscopeError`` when none fits."""
    if grid is not None:
        prefix = tokens - grid[0] * grid[1]
        if 0 <= prefix <= MAX_PREFIX:
            return TokenLayout(prefix, grid[0], grid[1])
    for prefix in range(MAX_PREFIX + 1):
        side = math.isqrt(max(tokens - prefix, 0))
        if side > 0 and side * side == tokens - prefix:
            return TokenLayout(prefix, side, side)
    raise HookscopeError(f"{tokens} tokens are not a square grid of patches after a few prefix tokens.")


@dataclass(frozen=True)
class AttentionLayer:
    """One attention record of a run: ``weights`` (heads, queries, keys) of the first image, ``gradient`` of the
    target with respect to them (None when the run took none)."""

    key: str
    weights: torch.Tensor
    gradient: torch.Tensor | None


def attention_layers(result: RunResult) -> list[AttentionLayer]:
    """The run's attention records in the order the model computed them, each with its gradient if recorded."""
    records = [r for r in result.records if r.kind == "attention"]
    grads = {r.key.removesuffix("/grad"): r.tensor for r in records if r.leaf.endswith("grad")}
    return [
        AttentionLayer(r.key, r.tensor[0].float(), grads[r.key][0].float() if r.key in grads else None)
        for r in records
        if not r.leaf.endswith("grad")
    ]


def fuse_heads(weights: torch.Tensor, how: str = "mean") -> torch.Tensor:
    """(heads, N, N) -> (N, N): the heads' mean, max or min."""
    if how == "mean":
        return weights.mean(0)
    if how == "max":
        return weights.amax(0)
    if how == "min":
        return weights.amin(0)
    raise HookscopeError(f"Heads are fused by {', '.join(HEAD_FUSIONS)}; not '{how}'.")


def _discarded(fused: torch.Tensor, discard: float) -> torch.Tensor:
    """The lowest ``discard`` share of the entries set to 0, the class token's weight on itself kept."""
    if discard <= 0:
        return fused
    if not 0 <= discard < 1:
        raise HookscopeError(f"The share of weights discarded is from 0 up to 1, not {discard}.")
    flat = fused.flatten().clone()
    lowest = torch.topk(flat, int(flat.numel() * discard), largest=False).indices
    flat[lowest[lowest != 0]] = 0
    return flat.view_as(fused)


def _rolled(fused_layers: Sequence[torch.Tensor], discard: float) -> torch.Tensor:
    if not fused_layers:
        raise HookscopeError("Rollout needs the attention of at least one layer: tick Attn and run again.")
    tokens = fused_layers[0].shape[-1]
    joint = torch.eye(tokens, dtype=torch.float64)
    for fused in fused_layers:
        if fused.shape != (tokens, tokens):
            raise HookscopeError(f"Rollout multiplies square attention of one sequence; got {tuple(fused.shape)}.")
        residual = _discarded(fused.double(), discard) + torch.eye(tokens, dtype=torch.float64)
        residual = residual / residual.sum(-1, keepdim=True)
        joint = residual @ joint
    return joint


def rollout(layers: Sequence[torch.Tensor], head_fusion: str = "mean", discard: float = 0.0) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020) of ``layers``' (heads, N, N) weights, first layer first: the (N, N)
    float64 joint attention."""
    return _rolled([fuse_heads(weights.double(), head_fusion) for weights in layers], discard)


def gradient_rollout(
    layers: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor], discard: float = 0.0
) -> torch.Tensor:
    """Gradient-weighted rollout (Chefer et al. 2021): each layer's heads fused as the mean over heads of
    max(gradient x weights, 0)."""
    if len(gradients) != len(layers):
        raise HookscopeError("Gradient-weighted rollout needs the gradient of every layer's attention.")
    fused = [(g.double() * a.double()).clamp(min=0).mean(0) for a, g in zip(layers, gradients, strict=True)]
    return _rolled(fused, discard)


def query_map(matrix: torch.Tensor, layout: TokenLayout, query: int = 0) -> np.ndarray:
    """Row ``query`` of an (N, N) attention (or rollout) over the patch keys, (height, width) float32, scaled so
    that its maximum is 1 (all zero stays zero)."""
    row = matrix[query, layout.prefix :].double()
    grid = row.reshape(layout.height, layout.width)
    top = float(grid.max())
    return (grid / top if top > 0 else grid).float().numpy()


def head_maps(weights: torch.Tensor, layout: TokenLayout, query: int = 0) -> np.ndarray:
    """(heads, N, N) -> (heads, height, width): each head's attention of token ``query`` over the patches, as
    computed (not rescaled: a head's share of attention on the patches is part of what it shows)."""
    rows = weights[:, query, layout.prefix :].float()
    return rows.reshape(-1, layout.height, layout.width).numpy()


def dino_masks(maps: np.ndarray, keep: float = 0.6) -> np.ndarray:
    """DINO's view: per map (heads, h, w), True on the fewest patches that hold ``keep`` of the map's mass
    (``visualize_attention.py``'s ``--threshold``)."""
    if not 0 < keep <= 1:
        raise HookscopeError(f"The share of attention kept is above 0 and at most 1, not {keep}.")
    flat = maps.reshape(maps.shape[0], -1).astype(np.float64)
    order = np.argsort(flat, axis=1)  # ascending, as DINO sorts
    ranked = np.take_along_axis(flat, order, axis=1)
    mass = np.cumsum(ranked, axis=1) / np.maximum(ranked.sum(axis=1, keepdims=True), 1e-30)
    kept_sorted = mass > 1 - keep
    masks = np.zeros_like(kept_sorted)
    np.put_along_axis(masks, order, kept_sorted, axis=1)
    return masks.reshape(maps.shape)


def rollout_maps(
    result: RunResult, head_fusion: str = "mean", discard: float = 0.0, grid: tuple[int, int] | None = None
) -> dict[str, np.ndarray]:
    """The run's rollout maps of the class token over the patch grid, float32 scaled to a maximum of 1:
    ``rollout`` always, ``gradient_rollout`` when the run kept every layer's gradient. Empty when the run holds no
    attention, or attention of more than one sequence length (the layers of one stack only are rolled out)."""
    layers = attention_layers(result)
    if not layers:
        return {}
    tokens = layers[0].weights.shape[-1]
    if any(layer.weights.shape[-2:] != (tokens, tokens) for layer in layers):
        return {}
    layout = token_layout(tokens, grid)
    maps = {"rollout": query_map(rollout([la.weights for la in layers], head_fusion, discard), layout)}
    grads = [layer.gradient for layer in layers]
    if all(g is not None for g in grads):
        joint = gradient_rollout([la.weights for la in layers], [g for g in grads if g is not None], discard)
        maps["gradient_rollout"] = query_map(joint, layout)
    return maps


def as_token_maps(array: np.ndarray) -> np.ndarray | None:
    """A transformer's (1, N, C) or (N, C) tokens as (C, height, width) maps over the patch grid, the prefix tokens
    dropped (Grad-CAM of a transformer, as pytorch-grad-cam's ``reshape_transform`` for ViT does); None when the
    array is not tokens on a grid."""
    tokens = array[0] if array.ndim == 3 and array.shape[0] == 1 else array
    if tokens.ndim != 2:
        return None
    try:
        layout = token_layout(int(tokens.shape[0]))
    except HookscopeError:
        return None
    if layout.prefix == 0 and array.ndim == 3:
        return None  # (1, H, W) is a one-channel map, not tokens
    patches = tokens[layout.prefix :]
    return np.ascontiguousarray(patches.T.reshape(tokens.shape[1], layout.height, layout.width))


# ---- what the Attention panel draws ------------------------------------------------------------------------------
# The panel's views, in its menu's order, and their words.
VIEWS: dict[str, str] = {
    "heads": "Heads",
    "mean": "Heads' mean",
    "dino": "DINO: each head's top share",
    "rollout": "Rollout (all layers)",
    "gradient_rollout": "Gradient-weighted rollout",
}


@dataclass(frozen=True)
class AttentionPicture:
    """One view of a run's attention: ``tiles`` (n, h, w) float32, each tile's maximum 1 (one per head for
    ``heads`` and ``dino``, one otherwise), ``overlay`` (h, w) float32 in [0, 1] to lay over the input, on the patch
    grid of ``layout``, and ``caption`` in words."""

    tiles: np.ndarray
    overlay: np.ndarray
    layout: TokenLayout
    query: int | None
    caption: str


def _to_one(maps: np.ndarray) -> np.ndarray:
    """Each map scaled to a maximum of 1 (an all-zero map stays zero)."""
    top = maps.reshape(maps.shape[0], -1).max(axis=1).reshape(-1, 1, 1)
    return np.divide(maps, top, out=np.zeros_like(maps), where=top > 0).astype(np.float32)


def query_name(layout: TokenLayout, query: int | None) -> str:
    """``the class token``, ``register 2``, ``patch (3, 5)``, or ``every token`` (None: the mean over queries)."""
    if query is None:
        return "every token (their mean)"
    if query == 0 and layout.prefix:
        return "the class token"
    if query < layout.prefix:
        return f"prefix token {query} (a register)"
    row, column = divmod(query - layout.prefix, layout.width)
    return f"patch (row {row}, column {column})"


def attention_picture(
    result: RunResult,
    key: str,
    view: str = "heads",
    query: int | None = 0,
    keep: float = 0.6,
    grid: tuple[int, int] | None = None,
) -> AttentionPicture:
    """The ``view`` (``VIEWS``) of the attention record ``key`` of ``result`` (the rollouts use every layer's), for
    token ``query`` (0: the class token; None: the mean over every query). The keys are the patches: the prefix
    tokens (class token, registers) are set aside. ``HookscopeError`` names what is missing."""
    if view not in VIEWS:
        raise HookscopeError(f"The attention views are {', '.join(VIEWS)}; not '{view}'.")
    layers = attention_layers(result)
    layer = next((la for la in layers if la.key == key), None)
    if layer is None:
        raise HookscopeError(f"The run kept no attention of '{key}': tick its Attn box and run again.")
    layout = token_layout(int(layer.weights.shape[-1]), grid)
    if query is not None and not 0 <= query < layer.weights.shape[-2]:
        raise HookscopeError(f"Token {query} is not a query of '{key}' ({layer.weights.shape[-2]} tokens).")
    if query == 0 and layout.prefix == 0:
        query = None  # no class token: what every token attends to, on average
    who = query_name(layout, query)
    if view in ("rollout", "gradient_rollout"):
        same = [la for la in layers if la.weights.shape == layer.weights.shape]
        if view == "rollout":
            joint = rollout([la.weights for la in same])
        else:
            if any(la.gradient is None for la in same):
                raise HookscopeError("Gradient-weighted rollout needs the gradient of the attention: run again.")
            joint = gradient_rollout(
                [la.weights for la in same], [la.gradient for la in same if la.gradient is not None]
            )
        rows = joint[:, layout.prefix :] if query is None else joint[query : query + 1, layout.prefix :]
        one = rows.mean(0).reshape(1, layout.height, layout.width).float().numpy()
        tiles = _to_one(one)
        caption = f"{VIEWS[view]} of {len(same)} layers: what {who} draws from each patch"
        return AttentionPicture(tiles, tiles[0], layout, query, caption)
    weights = layer.weights
    if query is None:
        maps = weights[:, :, layout.prefix :].mean(1).reshape(-1, layout.height, layout.width).numpy()
    else:
        maps = head_maps(weights, layout, query)
    heads = maps.shape[0]
    if view == "heads":
        tiles = _to_one(maps)
        caption = f"{key}: each of {heads} heads' attention of {who} over the patches (each tile to its maximum)"
        return AttentionPicture(tiles, _to_one(maps.mean(0, keepdims=True))[0], layout, query, caption)
    if view == "mean":
        tiles = _to_one(maps.mean(0, keepdims=True))
        return AttentionPicture(tiles, tiles[0], layout, query, f"{key}: the {heads} heads' mean attention of {who}")
    masks = dino_masks(maps, keep).astype(np.float32)
    caption = f"{key}: per head, the fewest patches holding {keep:.0%} of {who}'s attention (DINO's view)"
    return AttentionPicture(masks, masks.mean(0), layout, query, caption)


def patch_query(layout: TokenLayout, x: float, y: float, width: int, height: int) -> int | None:
    """The token of the patch under pixel (x, y) of an input ``width`` x ``height``; None outside it."""
    if not (0 <= x < width and 0 <= y < height):
        return None
    row = min(int(y * layout.height / height), layout.height - 1)
    column = min(int(x * layout.width / width), layout.width - 1)
    return layout.prefix + row * layout.width + column


def on_input(grid_map: np.ndarray, height: int, width: int) -> np.ndarray:
    """A (h, w) patch-grid map at the input's (height, width), each patch a block (nearest, as DINO upsamples)."""
    rows = under_centres(grid_map.shape[0], height)
    columns = under_centres(grid_map.shape[1], width)
    return np.ascontiguousarray(grid_map[np.ix_(rows, columns)], dtype=np.float32)
