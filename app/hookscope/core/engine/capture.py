"""One run: forward then backward on a device, with every registered hook recording to the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from hookscope.core.common.errors import RunError
from hookscope.core.engine.blame import model_pass
from hookscope.core.engine.devices import resolve_device
from hookscope.core.engine.hooks import HookRegistry, Record, StaleCapture
from hookscope.core.engine.missing_gradients import MissingGradient, missing_gradients
from hookscope.core.engine.objectives import (
    Detection,
    NoObjective,
    class_label,
    detection_objective,
    detections_list,
    detections_of,
    output_task,
    predicted_classes,
    segmentation_logits,
    segmentation_objective,
    similarity_objective,
)
from hookscope.core.engine.structure import tensor_leaves
from hookscope.core.engine.target_words import Target, parse_target
from hookscope.core.engine.tree import ModelSurvey, survey
from hookscope.core.models.state_dicts import first_line


class RunCancelled(Exception):
    """The run was superseded by a newer one; its results are dropped."""


@dataclass(frozen=True)
class Prediction:
    """One class of a run's top 5: its ``index``, its ``label`` (the class name, or "class N" when the model's
    classes are not named) and its softmax ``probability``."""

    index: int
    label: str
    probability: float


@dataclass
class RunResult:
    input: torch.Tensor  # (1, C, H, W), exactly as fed to the model, on the CPU
    input_grad: torch.Tensor | None  # gradient of the target w.r.t. the input, via a tensor hook
    scores: torch.Tensor | None  # (1, K) class scores when the output is class scores
    top5: list[Prediction]
    target_index: int | None
    target: str  # what was differentiated, in words
    records: list[Record]
    survey: ModelSurvey
    device: str
    timings: dict[str, float] = field(default_factory=dict)  # forward_ms, backward_ms
    # The class scores of the same input with every edit suspended (``capture_run(..., baseline=True)`` with edits
    # on), so that the effect of the edits on the predictions can be shown; None otherwise.
    baseline_scores: torch.Tensor | None = None
    # Output parts of modules with a gradient hook that received no gradient, each with the reason (integers, not
    # tracked by autograd, or not reaching the target): the export manifest's "no_gradient".
    no_gradient: list[MissingGradient] = field(default_factory=list)
    # What the model predicts beyond class scores: "classification", "segmentation" or "detection" (read from
    # its output); a segmentation model's (H, W) int64 predicted classes at the input's size; a detector's boxes.
    task: str = "classification"
    segmentation: torch.Tensor | None = None
    detections: list[Detection] = field(default_factory=list)
    objective_value: float | None = None  # the differentiated scalar's value (a score, a similarity)
    # Why no gradient was taken, when the output held nothing to take it of (``objectives.NoObjective``: a detector
    # that found no object); "" when the target was computed. The forward records stand either way.
    no_target: str = ""

    def of_kind(self, *kinds: str) -> list[Record]:
        return [r for r in self.records if r.kind in kinds]


def class_scores(output: object) -> torch.Tensor | None:
    """The (1, K) class scores (logits) in a model's output, or None when it holds none.

    Looked for where models really put them: the output itself; a ``logits`` attribute or key (transformers'
    ``ModelOutput``, dicts, dataclasses); the first element of a tuple or list (``return_dict=False``,
    torchvision's ``InceptionOutputs``, ``(logits, extras)``). K must be above 1: one number is no choice of class.
    """
    if _is_scores(output):
        return output  # type: ignore[return-value]
    logits = output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    if _is_scores(logits):
        return logits
    if isinstance(output, (tuple, list)) and output and _is_scores(output[0]):
        return output[0]
    return None


def _is_scores(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim == 2 and value.shape[0] == 1 and value.shape[1] > 1


def class_ranking(scores: torch.Tensor, first: int | None = None) -> np.ndarray:
    """The class indices of (1, K) ``scores``, best first (only the ``first`` best when given): the one ranking that
    the predictions, the "top1" gradient target, the CLI and the manifest all use.

    By logit, highest first (softmax keeps that order, but an untrained model's probabilities tie in float32 where
    its logits still differ); equal logits by the lowest index; NaN last. Ranked in float64 on the CPU, so the
    order is the same on every device; in numpy, which wakes no thread team (torch's three small operations took
    0.1 ms right after a run, every frame of a video).
    """
    row = scores.detach()[0].to("cpu", torch.float64).numpy()
    row = np.where(np.isnan(row), -np.inf, row)  # a NaN ranks with -inf
    candidates = None
    if first is not None and first < row.size:
        # Only the classes at or above the first-th best logit, all its ties included, need sorting.
        threshold = np.partition(row, row.size - first)[row.size - first]
        candidates = np.flatnonzero(row >= threshold)
        row = row[candidates]
    order = np.argsort(-row, kind="stable")  # the negated logits, stably: ties keep the lowest index first
    ranked = order if candidates is None else candidates[order]
    return ranked if first is None else ranked[:first]


def check_target(target: Target, classes: int | None) -> None:
    """Raise ``RunError`` when ``target`` is not one of ``--target``'s forms, or names a class that a model with
    ``classes`` class scores (None: its output holds none) does not have; "top1" always exists. The other forms
    (regions, boxes, similarities) are checked against the model's output when it runs."""
    objective = parse_target(target)
    if objective.kind != "class":
        return
    target = int(objective.index if objective.index is not None else 0)
    if classes is None:
        raise RunError(
            f"Class {target} cannot be the target: the model's output holds no class scores (a (1, K) tensor, a "
            "'logits' attribute or key, or a tuple that starts with one); use top1 for the sum of the output."
        )
    if not 0 <= int(target) < classes:
        raise RunError(f"Class {target} does not exist: the model has {classes} classes (0-{classes - 1}).")


def _objective(
    output: object,
    target: Target,
    size: tuple[int, ...] = (),
    categories: Sequence[str] | None = None,
    ranking: np.ndarray | None = None,
) -> tuple[torch.Tensor, int | None, str]:
    """The scalar to differentiate (:mod:`hookscope.core.engine.objectives`): a similarity for ``similar:``/``text:``; a box's
    score for a detector; class logits over pixels for a segmentation model; a class logit for class scores,
    otherwise the sum of the output. ``size``: the input's (H, W); ``ranking``: the class scores' ``class_ranking``
    when the caller has it already."""
    objective = parse_target(target)
    if objective.needs_reference:
        return similarity_objective(output, objective)
    found = detections_of(output)
    if found is not None:
        return detection_objective(found, objective)
    logits = segmentation_logits(output)
    if logits is not None:
        return segmentation_objective(logits, objective, size or tuple(logits.shape[-2:]), categories)
    if objective.kind in ("region", "box"):
        raise RunError(
            f"'{objective.spec}' does not fit this model: regions are for segmentation models, boxes for "
            "detection models; use top1 or a class index."
        )
    target = "top1" if objective.kind == "top1" else int(objective.index if objective.index is not None else 0)
    scores = class_scores(output)
    check_target(target, None if scores is None else int(scores.shape[1]))
    if scores is None:
        total = sum(t.sum() for _, t in tensor_leaves(output) if t.is_floating_point())
        if not isinstance(total, torch.Tensor):
            raise RunError("The model's output holds no floating-point tensor to differentiate.")
        return total, None, "sum of the output"
    if target == "top1":
        index = int((class_ranking(scores, 1) if ranking is None else ranking)[0])
        return scores[0, index], index, f"top-1 logit (class {index})"
    index = int(target)
    return scores[0, index], index, f"logit of class {index}"


TOP_K = 5  # the predictions a run keeps


def top_predictions(
    scores: torch.Tensor, categories: Sequence[str] | None, k: int = TOP_K, ranking: np.ndarray | None = None
) -> list[Prediction]:
    """The first ``k`` classes of ``class_ranking`` (``ranking``, when the caller has it) with their softmax
    probabilities."""
    probabilities = torch.softmax(scores.detach().float().cpu()[0], dim=0)
    indices = (class_ranking(scores, k) if ranking is None else ranking)[:k].tolist()
    chances = probabilities[indices].tolist()  # one indexing, not one per class
    return [Prediction(i, class_label(i, categories), p) for i, p in zip(indices, chances, strict=True)]


def ensure_survey(model: nn.Module, registry: HookRegistry, x: torch.Tensor) -> ModelSurvey:
    """Survey the model once per input shape (device included), and again after edits changed, and let the
    registry adapt to it."""
    known = registry.survey
    if known is None or registry.needs_survey or known.input_shape != tuple(x.shape) or known.device != str(x.device):
        known = survey(model, x)
        registry.adopt_survey(known)
    return known


def capture_run(
    model: nn.Module,
    registry: HookRegistry,
    x: torch.Tensor,
    *,
    device: str = "cpu",
    target: Target = "top1",
    categories: Sequence[str] | None = None,
    cancelled: Callable[[], bool] | None = None,
    others: Mapping[str, torch.Tensor] | None = None,
    baseline: bool = False,
) -> RunResult:
    """Run ``x`` (1, C, H, W) through ``model`` forward and backward, recording through ``registry``'s hooks.

    Grad mode is per thread, so it is switched on here, in whichever thread runs the model. Only the input
    needs a gradient (``torch.autograd.grad`` on the input, plus any hooked output off its path), so parameter
    gradients are neither computed nor kept.

    The registry's enabled edits act on the run. ``others`` maps each ``mix`` edit's other image (its
    ``other_image`` name) to that image's preprocessed (1, C, H, W) tensor. ``baseline=True`` also runs the input
    once without gradients and with every edit suspended, into ``RunResult.baseline_scores``.
    """
    dev = resolve_device(device)
    try:
        if next(model.parameters(), torch.empty(0)).device != dev:
            model.to(dev)
        with torch.enable_grad():
            for attempt in range(3):
                try:
                    return _run_once(model, registry, x, dev, target, categories, cancelled, others, baseline)
                except StaleCapture as stale:  # an in-place change the survey did not foresee
                    registry.learn_clones(stale.paths)
                except RuntimeError as error:
                    if "BackwardHookFunction" not in str(error):
                        raise
                    backward_edits = [e for e in registry.enabled_edits() if e.kind == "scale-grad-input"]
                    if attempt and backward_edits:
                        # The error names no module: only when one such edit is on is it known to be the one.
                        alone = backward_edits[0] if len(backward_edits) == 1 else None
                        raise RunError(
                            f"A full backward hook raised during the run ({', '.join(e.spec for e in backward_edits)}); "
                            "use scale-grad on that module instead (a tensor hook on its output).",
                            module_path=alone.path if alone else None,
                            edit_spec=alone.spec if alone else None,
                        ) from error
                    if attempt:
                        raise
                    registry.use_fallback_everywhere()
            raise RunError("Captured tensors kept changing in place; the run was abandoned.")
    except torch.OutOfMemoryError as error:
        if dev.type == "cuda":  # give back what the failed run cached, for the previous results and the next try
            torch.cuda.empty_cache()
        raise RunError(f"Out of memory on {dev} ({first_line(error)}); try a smaller model or the CPU.") from error


def _run_once(
    model: nn.Module,
    registry: HookRegistry,
    x: torch.Tensor,
    dev: torch.device,
    target: Target,
    categories: Sequence[str] | None,
    cancelled: Callable[[], bool] | None,
    others: Mapping[str, torch.Tensor] | None = None,
    baseline: bool = False,
) -> RunResult:
    xin = x.detach().to(dev).clone().requires_grad_(True)
    known = model_pass("forward", ensure_survey, model, registry, xin)  # the survey runs the model too
    registry.check_edits()
    other_inputs = {name: t.detach().to(dev) for name, t in (others or {}).items()}
    recorder = registry.new_recorder()
    hooked = [(info.path, info.kind) for info in registry.handles()]  # before the run: the GUI may tick meanwhile
    input_grads: list[torch.Tensor] = []
    xin.register_hook(lambda grad: input_grads.append(grad.detach().to("cpu", copy=True)))
    with registry.mix_references(other_inputs), registry.recording(recorder):
        start = time.perf_counter()
        output = model_pass("forward", model, xin)  # the model's own exception: ModelRaised, not a bug of ours
        _sync(dev)
        forward_ms = (time.perf_counter() - start) * 1000
        if cancelled is not None and cancelled():
            raise RunCancelled()
        found_scores = class_scores(output)
        ranking = class_ranking(found_scores, TOP_K) if found_scores is not None else None  # the target, the top 5
        no_target = ""
        try:
            objective, index, described = _objective(output, target, tuple(xin.shape[-2:]), categories, ranking)
        except NoObjective as absent:  # nothing to differentiate in this image: the forward pass stands
            objective, index, no_target = None, None, str(absent)
            described = f"none: {no_target}"
        start = time.perf_counter()
        if objective is not None:
            model_pass("backward", torch.autograd.grad, objective, [xin, *recorder.grad_roots], allow_unused=True)
            _sync(dev)
        backward_ms = (time.perf_counter() - start) * 1000
    recorder.verify()
    task = output_task(output)
    logits = segmentation_logits(output) if task == "segmentation" else None
    found = detections_of(output) if task == "detection" else None
    scores = found_scores.detach().to("cpu") if found_scores is not None else None
    baseline_scores = None
    if baseline and scores is not None and registry.enabled_edits():
        with torch.no_grad(), registry.edits_suspended():
            plain = class_scores(model(xin.detach()))
        baseline_scores = plain.detach().to("cpu") if plain is not None else None
    return RunResult(
        input=x.detach().to("cpu"),
        input_grad=input_grads[0] if input_grads else None,
        scores=scores,
        top5=top_predictions(scores, categories, TOP_K, ranking) if scores is not None else [],
        target_index=index,
        target=described,
        records=recorder.records,
        survey=known,
        device=str(dev),
        timings={"forward_ms": forward_ms, "backward_ms": backward_ms},
        baseline_scores=baseline_scores,
        no_gradient=missing_gradients(
            [pair for pair in hooked if registry.has(*pair)], known, recorder.records, described, no_target
        ),
        task=task,
        segmentation=predicted_classes(logits, tuple(xin.shape[-2:])) if logits is not None else None,
        detections=detections_list(found, categories) if found is not None else [],
        objective_value=float(objective.detach()) if objective is not None else None,
        no_target=no_target,
    )


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()
