"""The model a window's scan runs: a copy of the live model that nothing the window does reaches."""

from __future__ import annotations

import copy
from typing import Any

from torch import nn


def copy_without_hooks(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with none of its hooks: the copy runs the plain network, whatever the live model's
    hook registry and edits do meanwhile, and nothing the copy does reaches them."""
    memo: dict[int, Any] = {}
    for module in model.modules():
        for name, value in vars(module).items():
            if "_hooks" in name and isinstance(value, dict):
                memo[id(value)] = type(value)()  # every hook dict (and its bookkeeping) copies as an empty one
    return copy.deepcopy(model, memo)
