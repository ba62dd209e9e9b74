"""A model ready to run (:class:`LoadedModel`) and the prefixes that name where a model comes from. A leaf: the
catalogue, the Hub and the model files all make one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hookscope.core.models.images import Preprocess

TIMM_PREFIX = "timm/"  # catalogue names of timm models: "timm/resnet50"


# Where a model came from, in LoadedModel.source.
SOURCES = ("catalogue", "timm", "state_dict", "pickle", "python", "hub", "object")
# "hub": hf:ORG/NAME (hub_models); "object": a model the caller holds in Python (hookscope.capture, hookscope.Viewer)


HF_PREFIX = "hf:"  # models from the Hugging Face Hub by name: "hf:google/vit-base-patch16-224"


@dataclass
class LoadedModel:
    """A model ready to run, with what the user needs to know about where its weights came from."""

    name: str
    module: nn.Module
    weights: str  # "none", "default" or a file path, as asked
    pretrained: bool
    preprocess: Preprocess
    # Class names from the weights' metadata: torchvision's (and timm's) catalogue models have them even with random
    # weights (then ``pretrained`` is False: the names are right, the predictions meaningless); None for files.
    categories: list[str] | None
    notice: str = ""  # one plain sentence when what was asked could not be given (e.g. offline)
    seed: int = 0
    source: str = "catalogue"  # one of SOURCES
    model_file: str = ""  # the file (or "model.py:build") it was opened from, for sources other than the catalogue
    model_sha256: str = ""  # the model file's SHA-256 when it was taken on opening (open_model(..., hash_file=True))
    task: str = "classification"  # "classification", "segmentation", "detection" or "embedding"
    # For CLIP-like models: a prompt's normalised (1, D) text embedding, for text:PROMPT targets; None otherwise.
    text_embedder: Callable[[str], torch.Tensor] | None = None
    # Where the preprocessing came from, in words, when the source alone does not say (a model held in Python: "as
    # you gave it", "the weights' own transforms"); "" otherwise.
    preprocess_origin: str = ""

    @property
    def display_name(self) -> str:
        """The name to show: the catalogue name, with the file it was opened from, if any."""
        if self.model_file and self.source == "state_dict":
            return f"{self.name} ({Path(self.model_file).name})"
        return self.name

    @property
    def weights_text(self) -> str:
        """The weights actually in use, in a few words: what the window's Weights box shows.

        "Pretrained (ImageNet, torchvision)", "Pretrained (timm)", "Random weights (seed 0)" (also when the
        pretrained weights were asked for but are not cached), "File: NAME" (a state_dict or pickled model, or a
        weights file loaded into the model) or "Built by FILE:FUNCTION (seed 0)" (a Python factory's own weights).
        """
        if is_untrained(self.source, self.weights, self.pretrained):
            return f"Random weights (seed {self.seed})"
        if self.source == "hub":
            return "Pretrained (Hugging Face Hub)"
        if self.source in ("catalogue", "timm"):
            if self.weights == "default":
                return "Pretrained (ImageNet, torchvision)" if self.source == "catalogue" else "Pretrained (timm)"
            return f"File: {Path(self.weights).name}"
        if self.source == "state_dict":
            return f"File: {Path(self.model_file or self.weights).name}"
        if self.source == "object":
            return "Your model object"
        if self.weights not in ("", "none", "default"):  # a pickled model, or a weights file loaded into the model
            return f"File: {Path(self.weights).name}"
        return f"Built by {self.name} (seed {self.seed})"

    @property
    def title(self) -> str:
        """The model's name as a page, a picture or the window titles it: "resnet18 (untrained: random weights,
        seed 0)" when its weights are random (:func:`model_title`)."""
        return model_title(self.describe(), self.display_name)

    def describe(self) -> dict:
        described = {
            "name": self.name,
            "weights": self.weights,
            "pretrained": self.pretrained,
            "seed": self.seed,
            "notice": self.notice,
            "source": self.source,
        }
        if self.model_file:
            described["model_file"] = self.model_file
        if self.task != "classification":  # classifiers' records stay as they were
            described["task"] = self.task
        return described


def is_untrained(source: str, weights: str, pretrained: bool) -> bool:
    """Whether a model's weights are random: a catalogue, timm or Hub model without its pretrained weights (asked
    for with ``none``, or not in the cache). A model the caller holds (``object``), a file's or a factory's own
    weights are never called untrained: Hookscope does not know how they were made."""
    if source == "hub":
        return weights == "none"
    return source in ("catalogue", "timm") and (not pretrained or weights == "none")


def model_title(model: Mapping[str, Any], name: str | None = None) -> str:
    """``name`` (or the model's) as a title, saying so when its weights are random: "resnet18 (untrained: random
    weights, seed 0)". ``model`` is what :meth:`LoadedModel.describe` records (scan.json's "model" too)."""
    shown = str(name or model.get("name") or model.get("model") or "the model")
    note = untrained_note(model)
    return f"{shown} ({note})" if note else shown


def untrained_note(model: Mapping[str, Any]) -> str:
    """ "untrained: random weights, seed 0" for a model (as :meth:`LoadedModel.describe` records it) whose weights
    are random; "" otherwise."""
    untrained = is_untrained(
        str(model.get("source", "catalogue")), str(model.get("weights", "")), bool(model.get("pretrained", True))
    )
    return f"untrained: random weights, seed {model.get('seed', 0)}" if untrained else ""
