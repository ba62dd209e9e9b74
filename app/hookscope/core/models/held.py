"""A model the caller holds in Python (``hookscope.capture``, ``hookscope.Viewer``), as the engine takes it.

No file, no trust question: the object is already in the caller's process. Its input preprocessing is given
(a :class:`Preprocess`, or torchvision weights such as ``ResNet18_Weights.DEFAULT``, whose class names come along)
or guessed as for a model opened from a file (``guess_preprocess``: ImageNet's statistics, the model's own input
size when it says one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.images import Preprocess
from hookscope.core.models.inputs import guess_preprocess
from hookscope.core.models.loaded import LoadedModel


def held_model(
    module: nn.Module,
    *,
    preprocess: Preprocess | Any = None,
    categories: Sequence[str] | None = None,
    name: str | None = None,
) -> LoadedModel:
    """``module`` as a :class:`LoadedModel` (source "object"), ready for the engine; nothing is copied or changed.

    ``preprocess``: a :class:`Preprocess`, torchvision weights (anything with ``transforms()``; their ``meta``'s
    class names are taken when ``categories`` is not given), or None for the guess. ``HookscopeError`` when
    ``module`` is not an ``nn.Module`` or ``preprocess`` is none of these."""
    if isinstance(module, LoadedModel):
        return module
    if not isinstance(module, nn.Module):
        raise HookscopeError(f"Hookscope looks inside a torch.nn.Module; got {type(module).__name__}.")
    origin = "as you gave it"
    if preprocess is None:
        preprocess, _ = guess_preprocess(module)
        origin = ""  # a guess, as for a model file
    elif not isinstance(preprocess, Preprocess):
        transforms = getattr(preprocess, "transforms", None)
        if not callable(transforms):
            raise HookscopeError(
                "preprocess takes a hookscope.Preprocess or torchvision weights (e.g. ResNet18_Weights.DEFAULT); "
                f"got {type(preprocess).__name__}."
            )
        meta = getattr(preprocess, "meta", None) or {}
        if categories is None and meta.get("categories"):
            categories = [str(c) for c in meta["categories"]]
        preprocess = Preprocess.from_torchvision(transforms())
        origin = "the weights' own transforms"
    return LoadedModel(
        name=name or type(module).__name__,
        module=module,
        weights="",
        pretrained=False,
        preprocess=preprocess,
        categories=list(categories) if categories is not None else None,
        source="object",
        preprocess_origin=origin,
    )
