"""What the lessons run on for one model: images A and B preprocessed at a small size, and the modules to use."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from hookscope.core.engine.blame import model_pass
from hookscope.core.engine.capture import _objective
from hookscope.core.engine.tree import survey
from hookscope.core.teaching.lessons.base import device_of, first_line
from hookscope.core.teaching.lessons.plan import Picks, plan

SMALL_SIZE = 112  # pixels: enough for every lesson, and a --run-all of resnet18 in seconds on a CPU


@dataclass(frozen=True)
class LessonInputs:
    """What the lessons run on for one model: image A and B as the model takes them, and the modules to use."""

    x: torch.Tensor
    other: torch.Tensor
    picks: Picks
    note: str = ""  # e.g. that the model needed its own input size


def lesson_inputs(
    model: nn.Module, preprocess: Any, image: Any, other: Any, size: int | None = SMALL_SIZE
) -> LessonInputs:
    """Preprocess images A and B (PIL images) for ``model`` at ``size`` pixels (None or 0: the model's own size),
    survey the model once and pick the lessons' modules. A model that cannot run at ``size`` (a ViT's fixed patch
    grid) is run at its own size, and ``note`` says so."""
    device = device_of(model)
    own = preprocess
    if size and size < preprocess.crop:
        preprocess = replace(preprocess, crop=size, resize=None if preprocess.resize is None else size * 256 // 224)
    note = ""
    x = preprocess.to_tensor(image).to(device)
    try:
        known = model_pass("forward", survey, model, x)
    except Exception as error:  # noqa: BLE001  (any failure at the small size: the model's own size is the fix)
        if preprocess is own:
            raise
        note = f"{size} pixels did not fit the model ({first_line(error)}); the lessons use its own {own.crop}."
        preprocess = own
        x = preprocess.to_tensor(image).to(device)
        known = model_pass("forward", survey, model, x)
    _check_backward(model, x)
    return LessonInputs(x, preprocess.to_tensor(other).to(device), plan(model, known), note)


def _check_backward(model: nn.Module, x: torch.Tensor) -> None:
    """The model's own backward failure (an in-place op autograd needed) is one error, in export's words, before
    the lessons start: not half the lessons failing with it."""
    with torch.enable_grad():
        xin = x.detach().clone().requires_grad_(True)
        score, _, _ = _objective(model_pass("forward", model, xin), "top1")
        if score.requires_grad:
            model_pass("backward", torch.autograd.grad, score, [xin], allow_unused=True)
