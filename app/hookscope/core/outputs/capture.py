"""``hookscope.capture``: one image through a model the caller holds, with hooks named in the tree's words, and
what they saw as a :class:`Capture`.

The run itself is the engine's one way to run an image (``engine.run.run_image``), the same the window,
``export``, ``live`` and batches use, so a capture here and a capture there are the same arrays. Around it: the
hooks are registered for the run and removed after it (the caller's own hooks are never touched), the model runs
in eval mode on the device asked for and comes back in the mode and on the device it was lent in
(``engine.lending``).
"""

from __future__ import annotations

import base64
import html
import io
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.core.common.resources import apply_colormap
from hookscope.core.common.vocabulary import HOOK_WORDS, WORD_OF_KIND, HookKind, kinds_of_words, title_of
from hookscope.core.engine.capture import Prediction, RunResult
from hookscope.core.engine.devices import resolve_device
from hookscope.core.engine.hooks import HookRegistry, Record
from hookscope.core.engine.lending import lent
from hookscope.core.engine.run import run_image
from hookscope.core.engine.target_words import Target
from hookscope.core.engine.tree import ModelSurvey, default_ticks, module_tree
from hookscope.core.models.held import held_model
from hookscope.core.models.images import Preprocess, read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.export import picture_image, record_picture, write_run
from hookscope.core.pictures.attention import rollout_maps

__all__ = ["Capture", "CapturedRecord", "capture"]

DEFAULT_WORDS = ("act", "grad")  # what the window ticks on a module by default: Act and Grad
PICTURE_WIDTH = (256, 768)  # an inline picture is enlarged (whole pixels) to at least the first, at most the second

Hooks = Mapping[str, "str | Iterable[str]"] | Iterable[str]


class CapturedRecord:
    """One tensor a hook saw: ``name`` (the module, ``#1`` for its second call, ``/leaf`` inside a structured
    value), ``word`` (``act``, ``in``, ``grad``, ``grad_in``) and ``tensor``. In Jupyter it shows as the window's
    panel shows it: one tile per channel, each scaled on its own (gradients as magnitudes), through viridis."""

    def __init__(self, record: Record) -> None:
        self._record = record
        self.name = record.key
        self.word = WORD_OF_KIND.get(record.kind, record.kind)
        self.hook = record.method  # the PyTorch hook that saw it

    @property
    def tensor(self) -> torch.Tensor:
        """The tensor the hook saw, on the CPU."""
        return self._record.tensor

    @property
    def title(self) -> str:
        """``layer1: Activations (1, 64, 56, 56)``: what the window's panel header says."""
        return f"{self.name}: {title_of(self._record.kind)} {tuple(self.tensor.shape)}"

    def picture(self) -> np.ndarray:
        """The mosaic as uint8 RGB (H, W, 3), one pixel per value, as ``hookscope export`` writes its PNGs."""
        return apply_colormap(picture_image(record_picture(self._record, check_finite=False)))

    def _repr_png_(self) -> bytes:
        return _png(_enlarged(self.picture()))

    def __repr__(self) -> str:
        return f"<CapturedRecord {self.title} by {self.hook}>"


class Capture:
    """What one run of an image through the hooked model gave.

    ``activations``, ``inputs``, ``gradients`` (of each module's output) and ``grad_inputs`` map a record's name
    (``layer1``, ``layer1.0.relu#1`` for a module's second call, ``name/leaf`` for a part of a tuple or dict
    output) to the CPU tensor the hook saw. ``predictions`` are the top 5 classes (when the output holds class
    scores), ``objective`` says in words what the gradients are of and ``objective_value`` is its value;
    ``input`` is the tensor fed to the model and ``input_gradient`` the objective's gradient there.
    ``save(folder)`` writes what ``hookscope export`` writes. In Jupyter, a capture shows its records as the
    window's panels do.
    """

    def __init__(self, result: RunResult, model: LoadedModel, image: str = "image", kinds: Sequence[str] = ()) -> None:
        self.result = result
        self.model = model
        self.image = image  # the image's name, as the manifest records it
        self.kinds = tuple(kinds) or tuple(dict.fromkeys(r.kind for r in result.records))

    def _of(self, kind: str) -> dict[str, torch.Tensor]:
        return {record.key: record.tensor for record in self.result.records if record.kind == kind}

    @cached_property
    def activations(self) -> dict[str, torch.Tensor]:
        """``act``: each module's output, as its forward hook saw it (a copy where a later in-place op would have
        overwritten it)."""
        return self._of("forward")

    @cached_property
    def inputs(self) -> dict[str, torch.Tensor]:
        """``in``: what went into each module, as its forward pre-hook saw it."""
        return self._of("pre")

    @cached_property
    def gradients(self) -> dict[str, torch.Tensor]:
        """``grad``: the objective's gradient with respect to each module's output (a tensor hook on the output)."""
        return self._of("tensor")

    @cached_property
    def grad_inputs(self) -> dict[str, torch.Tensor]:
        """``grad_in``: the objective's gradient with respect to each module's input (a full backward hook's
        ``grad_input``; a tensor hook on the input where an in-place op rules that hook out)."""
        return self._of("grad_input")

    @cached_property
    def attention(self) -> dict[str, torch.Tensor]:
        """``attn``: each attention module's weights (batch, heads, queries, keys), computed as eager attention
        computes them also where the model runs fused attention; ``name/grad`` is the objective's gradient with
        respect to them."""
        return self._of("attention")

    def attention_rollout(self, head_fusion: str = "mean", discard: float = 0.0) -> dict[str, np.ndarray]:
        """The class token's attention rollout over the patch grid (``rollout``) and its gradient-weighted form
        (``gradient_rollout``), (rows, columns) of patches scaled to a maximum of 1, from the ``attn`` records of
        every layer (``hookscope.core.pictures.attention``); empty without them."""
        return rollout_maps(self.result, head_fusion, discard)

    @cached_property
    def records(self) -> list[CapturedRecord]:
        """Every record, in the order the hooks saw them, each showing as a mosaic in Jupyter."""
        return [CapturedRecord(record) for record in self.result.records]

    def record(self, name: str, word: str = "act") -> CapturedRecord:
        """The record of module ``name`` for hook word ``word``; ``HookscopeError`` when the run kept none."""
        for record in self.records:
            if record.name == name and record.word == word:
                return record
        raise HookscopeError(f"The capture holds no '{word}' record of '{name}'.", module_path=name)

    @property
    def predictions(self) -> list[Prediction]:
        """The five best classes, best first (by logit), with their softmax probabilities; empty when the output
        holds no class scores."""
        return list(self.result.top5)

    @property
    def objective(self) -> str:
        """What the gradients are of, in words: "top-1 logit (class 281)", "logit of class 3"..."""
        return self.result.target

    @property
    def objective_value(self) -> float | None:
        """The value of the objective the gradients are of (a logit, a score, a similarity)."""
        return self.result.objective_value

    @property
    def input(self) -> torch.Tensor:
        """The (1, C, H, W) tensor fed to the model, on the CPU."""
        return self.result.input

    @property
    def input_gradient(self) -> torch.Tensor | None:
        """The objective's gradient with respect to the input tensor."""
        return self.result.input_grad

    def save(self, folder: str | os.PathLike, *, png: bool = True) -> Path:
        """Write the capture into ``folder`` as ``hookscope export`` does (the arrays, a PNG mosaic per record,
        ``manifest.json`` last, through the same manifest writer); returns the folder."""
        out = Path(folder)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise HookscopeError(f"Cannot write into '{out}': {error.strerror or error}.", path=str(out)) from None
        write_run(self.result, self.model, out, image=self.image, kinds=self.kinds, png=png)
        return out

    def __repr__(self) -> str:
        parts = [f"{len(self.result.records)} records", self.objective]
        if self.predictions:
            top = self.predictions[0]
            parts.append(f"top-1 {top.label} ({top.probability:.1%})")
        return f"<Capture of {self.image} through {self.model.name}: {', '.join(parts)}>"

    def _repr_png_(self) -> bytes | None:
        """The first record's mosaic (a front end that shows one picture); HTML shows them all."""
        return self.records[0]._repr_png_() if self.records else None

    def _repr_html_(self) -> str:
        lines = [f"<p><b>{html.escape(self.model.name)}</b> on {html.escape(self.image)}: "
                 f"gradients of the {html.escape(self.objective)}"]  # fmt: skip
        if self.objective_value is not None:
            lines.append(f" = {self.objective_value:.4g}")
        lines.append("</p>")
        if self.predictions:
            rows = "".join(f"<li>{html.escape(p.label)} ({p.probability:.1%})</li>" for p in self.predictions)
            lines.append(f"<ol>{rows}</ol>")
        for record in self.records:
            data = base64.b64encode(record._repr_png_()).decode()
            lines.append(f"<figure><figcaption>{html.escape(record.title)}</figcaption>"
                         f'<img src="data:image/png;base64,{data}" style="image-rendering: pixelated"></figure>')  # fmt: skip
        return "".join(lines)


def _enlarged(picture: np.ndarray) -> np.ndarray:
    """Whole-pixel enlargement to a readable width (a 7x7 map is 7 pixels), never past ``PICTURE_WIDTH[1]``."""
    width = max(picture.shape[1], 1)
    factor = max(1, min(PICTURE_WIDTH[0] // width + (PICTURE_WIDTH[0] % width > 0), PICTURE_WIDTH[1] // width))
    return picture.repeat(factor, axis=0).repeat(factor, axis=1) if factor > 1 else picture


def _png(picture: np.ndarray) -> bytes:
    stream = io.BytesIO()
    Image.fromarray(picture).save(stream, format="PNG")
    return stream.getvalue()


def hook_pairs(hooks: Hooks | None, paths: Sequence[str], model: LoadedModel) -> list[tuple[str, HookKind]]:
    """(module path, kind) pairs of ``hooks``: a mapping of module names to words (``{"layer1": ["act", "grad"]}``,
    or one word as a string), names alone (Act and Grad on each), or None: the window's first ticks, two telling
    layers with Act and Grad. ``HookscopeError`` for a name the model does not have or a word that is none."""
    if hooks is None:
        hooks = default_ticks(model.name, module_tree(model.module))
    items = (
        [(name, [words] if isinstance(words, str) else list(words)) for name, words in hooks.items()]
        if isinstance(hooks, Mapping)
        else [(name, list(DEFAULT_WORDS)) for name in ([hooks] if isinstance(hooks, str) else hooks)]
    )
    known = set(paths)
    missing = [name for name, _ in items if name not in known]
    if missing:
        raise HookscopeError(
            f"The model has no module named {', '.join(repr(m) for m in missing)}.", module_path=missing[0]
        )
    pairs: list[tuple[str, HookKind]] = []
    for name, words in items:
        unknown = [w for w in words if str(w).strip().lower() not in HOOK_WORDS]
        if unknown or not words:
            raise HookscopeError(
                f"Hook words are {', '.join(HOOK_WORDS)}; got {', '.join(repr(w) for w in unknown) or 'none'} "
                f"for '{name}'.",
                module_path=name,
            )
        pairs += [(name, kind) for kind in _kinds(tuple(words))]
    return pairs


@cache
def _kinds(words: tuple[str, ...]) -> tuple[HookKind, ...]:
    return kinds_of_words(words)  # once per set of words, not once per module: every module of a model is common


def model_image(image: Any) -> tuple[Image.Image | torch.Tensor, str]:
    """An image as the engine takes it, and its name: a file (read here: ``ImageError`` names it), a PIL image, or
    a tensor (C, H, W) or (1, C, H, W) fed exactly as given."""
    if isinstance(image, (str, os.PathLike)):
        return read_image(image), os.fspath(image)
    if isinstance(image, Image.Image):
        return image, "PIL image"
    if isinstance(image, torch.Tensor):
        if image.ndim == 3:
            image = image.unsqueeze(0)
        if image.ndim != 4 or image.shape[0] != 1:
            raise ImageError(
                f"A tensor image is (C, H, W) or (1, C, H, W), fed as it is; got shape {tuple(image.shape)}."
            )
        if not image.is_floating_point():
            raise ImageError(f"A tensor image holds floating-point values, fed as they are; got {image.dtype}.")
        return image, "tensor"
    raise ImageError(
        f"An image is a file path, a PIL image or a tensor (C, H, W) or (1, C, H, W); got {type(image).__name__}."
    )


def capture(
    model: nn.Module | LoadedModel,
    image: str | os.PathLike | Image.Image | torch.Tensor,
    hooks: Hooks | None = None,
    *,
    target: Target = "top1",
    device: str = "cpu",
    preprocess: Preprocess | Any = None,
    categories: Sequence[str] | None = None,
) -> Capture:
    """Run ``image`` through ``model`` forward and backward with the hooks ``hooks`` names, and return what they saw.

    ``model``: any ``torch.nn.Module`` you hold (a class defined in your notebook is fine; nothing is pickled or
    asked). ``image``: a file path, a PIL image, or a tensor ``(C, H, W)`` / ``(1, C, H, W)`` fed exactly as given.
    A path or PIL image is preprocessed by ``preprocess``: a :class:`Preprocess`, torchvision weights
    (``ResNet18_Weights.DEFAULT``: their transforms, and their class names for the predictions), or None for
    ImageNet's statistics at the model's own input size (224 when it names none).

    ``hooks`` maps module names to the tree's words, ``{"layer1": ["act", "grad"], "fc": ["in"]}``: ``in`` (what
    goes into the module), ``act`` (its output), ``grad`` (the gradient of its output), ``grad_in`` (the gradient
    of its input). A list of names ticks ``act`` and ``grad`` on each; None ticks two telling layers, as the window
    does. ``target`` is what the gradients are of: ``"top1"`` (the top-1 logit, the default), a class index, or
    any form ``--target`` takes (``class:C``, ``box:N``, ``similar:IMAGE``...). ``device``: "cpu", "cuda",
    "cuda:1", "mps".

    Every hook is removed before this returns, and the model is given back in the training mode and on the device
    it was lent (it runs in eval mode); its parameters and buffers are not changed. Bad input (an unknown module
    or word, an image the model cannot take, a model that raises) raises :class:`HookscopeError` with the line the
    command line prints, and leaves no hook behind.
    """
    loaded = held_model(model, preprocess=preprocess, categories=categories)  # type: ignore[arg-type]
    picture, name = model_image(image)
    module = loaded.module
    with HookRegistry(module) as registry, lent(module, device=resolve_device(device)):
        pairs = hook_pairs(hooks, registry.paths, loaded)
        for path, kind in pairs:
            registry.add(path, kind)
        shape = _structure(module)
        known = _SURVEYS.get(module)
        if known is not None and known[0] == shape:
            registry.adopt_survey(known[1])  # the run surveys again if the input's shape or device differ
        result = run_image(loaded, registry, picture, device=device, target=target)
        if registry.survey is not None:
            _SURVEYS[module] = (shape, registry.survey)
    return Capture(result, loaded, name, tuple(dict.fromkeys(kind for _, kind in pairs)))


# The survey of each model a capture ran (a run of the model that tells each hook what its module does: where an
# in-place op follows, what the module returns), kept while the model lives. Without it each capture would run the
# model one more time; kept per structure, so a module replaced since is surveyed anew.
_SURVEYS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, ModelSurvey]] = weakref.WeakKeyDictionary()


def _structure(module: nn.Module) -> tuple:
    return tuple((path, id(child)) for path, child in module.named_modules())
