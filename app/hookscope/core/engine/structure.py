"""Walking the tensors inside a module's inputs or outputs.

Outputs are not always tensors: ViT's attention returns a tuple, detection heads return dicts, some models return
namedtuples or dataclasses. Each tensor leaf gets a name from its path in the structure ("0", "logits",
"aux.1"), so one record can be kept per leaf and named the same way everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch


def tensor_leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(leaf_name, tensor)`` for every tensor inside ``value``; a bare tensor has the name ``""``."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple: name leaves by field
        for field in value._fields:
            yield from tensor_leaves(getattr(value, field), _join(prefix, field))
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from tensor_leaves(item, _join(prefix, str(index)))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from tensor_leaves(item, _join(prefix, str(key)))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from tensor_leaves(getattr(value, field.name), _join(prefix, field.name))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
