"""The one way to run an image: ``run_image`` preprocesses it (a file is read first) and runs it forward and backward
through the hooked model with its class names. ``hookscope.capture``, the window, ``export`` (images, folders,
sessions, video), ``live``, batches, lessons and benchmarks all come here; nothing else calls ``capture_run``.

It imports nothing that opens models (the catalogue, torchvision's model zoo): ``hookscope.capture`` on a model the
caller built loads only what it runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import torch
from PIL import Image
from torch import nn

from hookscope.core.engine.capture import RunResult, capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.objectives import with_reference
from hookscope.core.engine.target_words import Target, parse_target
from hookscope.core.models.held import held_model
from hookscope.core.models.images import read_image
from hookscope.core.models.loaded import LoadedModel


def model_input(loaded: LoadedModel, image: Image.Image | str | os.PathLike) -> torch.Tensor:
    """The (1, C, H, W) tensor ``loaded`` takes for ``image`` (a file is read first: ``ImageError`` with ``path``)."""
    if isinstance(image, (str, os.PathLike)):
        image = read_image(image)
    return loaded.preprocess.to_tensor(image)


def run_image(
    loaded: LoadedModel | nn.Module,
    registry: HookRegistry,
    image: Image.Image | torch.Tensor | str | os.PathLike,
    *,
    device: str = "cpu",
    target: Target = "top1",
    others: Mapping[str, torch.Tensor] | None = None,
    baseline: bool = False,
    cancelled: Callable[[], bool] | None = None,
) -> RunResult:
    """Run one image through ``loaded.module`` forward and backward, recording through ``registry``'s hooks: the one
    place that runs an image (``hookscope.capture``, the window, ``export``, ``live``, batches and lessons all come
    here; nothing else calls ``capture_run``).

    ``loaded`` is an opened model, or a plain module (then the predictions have no names and a file or picture is
    preprocessed as ``held_model`` guesses). ``image`` is a file (read and preprocessed), a picture (preprocessed) or a tensor already preprocessed, fed as
    it is. The predictions are named by ``loaded.categories``. A ``similar:``/``text:`` target gets the embedding
    it compares with here (once: a target that has it already is used as it is). ``others`` are the mix edits'
    other images (:func:`other_images`); ``baseline`` also scores the image with every edit off (see
    ``capture_run``). Failures raise ``ImageError`` (``path``), ``DeviceError`` or ``RunError`` (``edit_spec``
    and ``module_path`` when an edit made the run fail).
    """
    if not isinstance(loaded, LoadedModel):  # a plain module (the lessons, the benchmarks): nothing to look up
        if isinstance(image, torch.Tensor) and not parse_target(target).needs_reference:
            return capture_run(loaded, registry, image, device=device, target=target, cancelled=cancelled,
                               others=others, baseline=baseline)  # fmt: skip
        loaded = held_model(loaded)
    x = image if isinstance(image, torch.Tensor) else model_input(loaded, image)
    return capture_run(
        loaded.module,
        registry,
        x,
        device=device,
        target=with_reference(target, loaded),
        categories=loaded.categories,
        cancelled=cancelled,
        others=others,
        baseline=baseline,
    )
