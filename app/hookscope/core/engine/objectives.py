"""What a run differentiates: the gradient target, for any kind of vision model.

``--target`` (and the window's target) reads:

* ``top1``: the top class's logit (a classifier), the most common predicted class other than background over the
  pixels predicted as it (a segmentation model), the first detection's score (a detector);
* ``N`` (a class index) or ``class:C``: class C's logit (a classifier); for a segmentation model, the logits of
  class C summed over the pixels predicted as C (pytorch-grad-cam's ``SemanticSegmentationTarget``);
* ``class:C@x0,y0,x1,y1``: class C's logits summed over a rectangle of the model's input (pixels, x1 and y1
  excluded), on a segmentation model;
* ``box:N``: the score of the N-th detection, in the order the model returns them (a detector);
* ``similar:IMAGE``: the cosine similarity of the output embedding to IMAGE's embedding by the same model;
* ``text:PROMPT``: the cosine similarity of the image embedding to the text's (a CLIP-like model: its
  ``LoadedModel.text_embedder``).

An objective that does not fit the model's output is refused in one line (``RunError``). The kind of output is
read from the output itself (:func:`output_task`): a torchvision segmentation model's ``{"out": (1, K, H, W)}`` or
a 4-D ``logits``, a detector's list of ``{"boxes", "labels", "scores"}``, a (1, K) vector.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from hookscope.core.common.errors import RunError

# --target's words, parsed without torch (the command line's argument type reads them there), re-exported here
from hookscope.core.engine.target_words import FORMS as FORMS
from hookscope.core.engine.target_words import Objective as Objective
from hookscope.core.engine.target_words import Target as Target
from hookscope.core.engine.target_words import parse_target as parse_target
from hookscope.core.engine.target_words import region_text

if TYPE_CHECKING:
    from hookscope.core.models.loaded import LoadedModel

BACKGROUND = 0  # the class index torchvision's (VOC) and most segmentation heads give the background


class NoObjective(RunError):
    """This image's output holds nothing the target can be taken of: a detector that found no object, or fewer boxes
    than the one asked for. Not a failure of the run: the forward pass and its records stand, no gradient is taken,
    and the gradient panels and the export say this sentence (``RunResult.no_target``). A trained detector meets it
    on an empty scene, an untrained one on almost every image; every frame of a video may differ."""


# ---- what the output holds -----------------------------------------------------------------------------------


def segmentation_logits(output: object) -> torch.Tensor | None:
    """(1, K, H, W) per-pixel class scores: torchvision's ``{"out": ...}``, or a 4-D ``logits`` (transformers)."""
    value = output.get("out") if isinstance(output, Mapping) else None
    if value is None:
        value = output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    if isinstance(value, torch.Tensor) and value.ndim == 4 and value.shape[0] == 1 and value.shape[1] > 1:
        return value
    return None


def detections_of(output: object) -> Mapping[str, torch.Tensor] | None:
    """The first image's detections of a torchvision detector (a list of dicts with boxes, labels and scores)."""
    if isinstance(output, (list, tuple)) and output and isinstance(output[0], Mapping):
        first = output[0]
        if all(isinstance(first.get(key), torch.Tensor) for key in ("boxes", "labels", "scores")):
            return first
    return None


def embedding_of(output: object) -> torch.Tensor | None:
    """A (1, D) embedding: the output itself, ``image_embeds``/``pooler_output``, a (1, C, H, W) map averaged over
    its pixels, or a (1, T, D) token sequence's first token."""
    value = output
    if not isinstance(value, torch.Tensor):
        for key in ("image_embeds", "pooler_output", "last_hidden_state"):
            found = value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)
            if isinstance(found, torch.Tensor):
                value = found
                break
        else:
            if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
                value = output[0]
            else:
                return None
    if value.ndim == 4:
        value = value.mean(dim=(2, 3))
    elif value.ndim == 3:
        value = value[:, 0]
    if value.ndim == 2 and value.shape[0] == 1 and value.is_floating_point():
        return value
    return None


def output_task(output: object) -> str:
    """ "segmentation", "detection", or "classification" (anything else: a vector of scores or an embedding)."""
    if detections_of(output) is not None:
        return "detection"
    if segmentation_logits(output) is not None:
        return "segmentation"
    return "classification"


# ---- the scalar ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Detection:
    """One detection as the model returned it: box (x0, y0, x1, y1) in the input tensor's pixels."""

    index: int
    box: tuple[float, float, float, float]
    label: int
    label_text: str
    score: float


def predicted_classes(logits: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """The (H, W) int64 map of predicted classes at the input's ``size`` (logits resized bilinearly first when
    the head predicts at a lower resolution, as transformers' post-processing does)."""
    values = logits.detach()
    if tuple(values.shape[-2:]) != tuple(size):
        values = F.interpolate(values.float(), size=tuple(size), mode="bilinear", align_corners=False)
    return values[0].argmax(dim=0).to("cpu")


def segmentation_objective(
    logits: torch.Tensor, objective: Objective, size: Sequence[int], categories: Sequence[str] | None
) -> tuple[torch.Tensor, int, str]:
    classes = int(logits.shape[1])
    predicted = logits.detach()[0].argmax(dim=0)
    if objective.kind == "top1":
        counts = torch.bincount(predicted.flatten(), minlength=classes)
        if classes > 1 and counts[1:].sum() > 0:
            counts[BACKGROUND] = 0
        index = int(counts.argmax())
    elif objective.kind in ("class", "region"):
        index = int(objective.index or 0)
    else:
        raise RunError(f"'{objective.spec}' does not fit a segmentation model; use class:C or class:C@x0,y0,x1,y1.")
    if not 0 <= index < classes:
        raise RunError(f"Class {index} does not exist: the model has {classes} classes (0-{classes - 1}).")
    name = class_label(index, categories)
    if objective.kind == "region":
        height, width = (int(v) for v in size)
        x0, y0, x1, y1 = objective.region or (0, 0, width, height)
        if x0 < 0 or y0 < 0 or x1 > width or y1 > height:
            raise RunError(f"The region {x0},{y0},{x1},{y1} is outside the model's {width}x{height} input.")
        sy, sx = logits.shape[2] / height, logits.shape[3] / width  # a head at a lower resolution
        rows = slice(int(y0 * sy), max(int(y0 * sy) + 1, round(y1 * sy)))
        cols = slice(int(x0 * sx), max(int(x0 * sx) + 1, round(x1 * sx)))
        described = f"logits of class {index} ({name}) over {region_text((x0, y0, x1, y1))}"
        return logits[0, index, rows, cols].sum(), index, described
    mask = (predicted == index).to(logits.dtype)
    pixels = int(mask.sum())
    return (
        (logits[0, index] * mask).sum(),
        index,
        f"logits of class {index} ({name}) over its {pixels} predicted pixels",
    )


def detection_objective(found: Mapping[str, torch.Tensor], objective: Objective) -> tuple[torch.Tensor, int, str]:
    if objective.kind not in ("top1", "box"):
        raise RunError(f"'{objective.spec}' does not fit a detection model; use box:N (N-th detection) or top1.")
    scores = found["scores"]
    index = 0 if objective.kind == "top1" else int(objective.index or 0)
    if not len(scores):
        raise NoObjective("The model found no object in this image: there is no box to take the gradient of.")
    if not 0 <= index < len(scores):
        raise NoObjective(f"Box {index} does not exist: the model found {len(scores)} (box:0-box:{len(scores) - 1}).")
    return scores[index], index, f"score of box {index} (label {int(found['labels'][index])})"


def similarity_objective(output: object, objective: Objective) -> tuple[torch.Tensor, None, str]:
    embedding = embedding_of(output)
    if embedding is None:
        raise RunError(f"'{objective.spec}' needs an embedding model: this model's output is not one vector.")
    reference = objective.reference
    if reference is None:
        raise RunError(f"'{objective.spec}': the reference embedding was not computed.")
    reference = reference.detach().to(embedding.device, embedding.dtype).reshape(1, -1)
    if reference.shape[1] != embedding.shape[1]:
        raise RunError(
            f"'{objective.spec}': the reference embedding has {reference.shape[1]} values, the image's "
            f"{embedding.shape[1]}."
        )
    value = F.cosine_similarity(embedding, reference, dim=1)[0]
    words = (
        f"cosine similarity to {objective.image}"
        if objective.kind == "similar"
        else f"cosine similarity to the text '{objective.text}'"
    )
    return value, None, words


def class_label(index: int, categories: Sequence[str] | None) -> str:
    """The class's name from the weights' metadata (``LoadedModel.categories``), else ``class N``."""
    if categories and 0 <= index < len(categories):
        return str(categories[index])
    return f"class {index}"


def detections_list(found: Mapping[str, torch.Tensor], categories: Sequence[str] | None) -> list[Detection]:
    boxes, labels, scores = (found[key].detach().to("cpu") for key in ("boxes", "labels", "scores"))
    return [
        Detection(
            i,
            _corners(boxes[i]),
            int(labels[i]),
            class_label(int(labels[i]), categories),
            float(scores[i]),
        )
        for i in range(len(scores))
    ]


def with_reference(target: Target, loaded: LoadedModel) -> Target:
    """``target`` ready to run: for ``similar:IMAGE`` and ``text:PROMPT``, the parsed objective with the embedding it
    compares with (IMAGE through the same model and preprocessing, with no gradient and no record; the text through
    the model's text tower); any other target as it is. ``ImageError`` for an image that cannot be read,
    ``RunError`` for a model without the embedding asked for."""
    objective = parse_target(target)
    if not objective.needs_reference or objective.reference is not None:
        return target
    if objective.kind == "text":
        if loaded.text_embedder is None:
            raise RunError(
                f"'{objective.spec}' needs a model with a text tower (CLIP-like, e.g. "
                f"hf:openai/clip-vit-base-patch32); {loaded.name} has none."
            )
        reference: torch.Tensor | None = loaded.text_embedder(objective.text or "")
    else:
        from hookscope.core.models.images import read_image

        x = loaded.preprocess.to_tensor(read_image(objective.image or ""))
        device = next(loaded.module.parameters(), torch.empty(0)).device
        with torch.no_grad():
            reference = embedding_of(loaded.module(x.to(device)))
    if reference is None:  # only the image path can find no embedding: a text tower always gives one
        raise RunError(f"'{objective.spec}' needs an embedding model: {loaded.name}'s output is not one vector.")
    return replace(objective, reference=reference.detach().to("cpu").reshape(1, -1))


def objective_record(
    result_task: str, value: float | None, detections: Sequence[Detection], segmentation: torch.Tensor | None
) -> dict:
    """What a manifest says of a run's objective beyond the class: its value, a detector's boxes, a segmentation
    model's predicted classes with their pixel counts."""
    record: dict = {"task": result_task, "value": value}
    if detections:
        record["detections"] = [
            {"index": d.index, "box": list(d.box), "label": d.label, "label_text": d.label_text, "score": d.score}
            for d in detections
        ]
    if segmentation is not None:
        classes, counts = torch.unique(segmentation, return_counts=True)
        record["predicted_pixels"] = {str(int(c)): int(n) for c, n in zip(classes, counts)}
    return record


def _corners(box: torch.Tensor) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = (float(v) for v in box.tolist())
    return x0, y0, x1, y1
