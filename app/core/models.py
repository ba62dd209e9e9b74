"""The model catalogue: torchvision's classification models by name, with their weights and preprocessing."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torchvision
from torch import nn

from app.core.errors import ModelError
from app.core.images import Preprocess

DEFAULT_MODEL = "resnet18"


@dataclass
class LoadedModel:
    """A model ready to run, with what the user needs to know about where its weights came from."""

    name: str
    module: nn.Module
    weights: str  # "none", "default" or a file path, as asked
    pretrained: bool
    preprocess: Preprocess
    categories: list[str] | None  # class names, only when the weights carry them
    notice: str = ""  # one plain sentence when what was asked could not be given (e.g. offline)
    seed: int = 0

    def describe(self) -> dict:
        return {
            "name": self.name,
            "weights": self.weights,
            "pretrained": self.pretrained,
            "seed": self.seed,
            "notice": self.notice,
        }


def catalogue() -> list[str]:
    """Every torchvision classification model by name."""
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _check_name(name: str) -> None:
    names = catalogue()
    if name not in names:
        close = difflib.get_close_matches(name.lower(), names, n=5, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else "'hookscope export --help' lists where to find names."
        raise ModelError(f"Unknown model '{name}'; {hint}")


def default_weights_file(name: str) -> Path | None:
    """Where torchvision keeps the model's default pretrained weights in the torch hub cache."""
    weights = torchvision.models.get_model_weights(name).DEFAULT
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)


def default_preprocess(name: str, model: nn.Module) -> Preprocess:
    """The default weights' preprocessing, sized to what this instance accepts.

    An untrained ViT is built for 224 pixels even where its default weights were trained at 518, so the crop
    follows the model's own ``image_size`` when it has one.
    """
    preprocess = Preprocess.from_torchvision(torchvision.models.get_model_weights(name).DEFAULT.transforms())
    size = getattr(model, "image_size", None)
    if isinstance(size, int) and size != preprocess.crop:
        preprocess = replace(preprocess, crop=size, resize=size * 256 // 224)
    return preprocess


def load_model(name: str, weights: str = "none", seed: int = 0) -> LoadedModel:
    """Build ``name`` with random weights (``none``), cached pretrained weights (``default``) or a state_dict file.

    Random weights are drawn after ``torch.manual_seed(seed)`` so that runs are reproducible.
    """
    _check_name(name)
    if weights == "default":
        return _load_pretrained(name, seed)
    torch.manual_seed(seed)
    module = torchvision.models.get_model(name, weights=None).eval()
    loaded = LoadedModel(name, module, "none", False, default_preprocess(name, module), None, seed=seed)
    if weights != "none":
        load_state_dict_file(module, Path(weights), name)
        loaded.weights = str(weights)
        loaded.pretrained = True
    return loaded


def _load_pretrained(name: str, seed: int) -> LoadedModel:
    weights = torchvision.models.get_model_weights(name).DEFAULT
    path = default_weights_file(name)
    if not path.is_file():
        loaded = load_model(name, "none", seed)
        loaded.notice = (
            f"Pretrained weights for {name} are not in the torch hub cache ({path}) and cannot be downloaded "
            f"offline; showing an untrained {name} with random weights (seed {seed})."
        )
        return loaded
    try:
        module = torchvision.models.get_model(name, weights=weights).eval()
    except Exception as error:  # a damaged cache file: say so rather than crash
        raise ModelError(f"The cached weights file {path} could not be loaded ({first_line(error)}).") from error
    preprocess = Preprocess.from_torchvision(weights.transforms())
    return LoadedModel(name, module, "default", True, preprocess, list(weights.meta["categories"]), seed=seed)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Load a weights file without unpickling code, and unwrap the usual containers around a state_dict."""
    if not path.exists():
        raise ModelError(f"Weights file '{path}' does not exist.")
    if path.is_dir():
        raise ModelError(f"'{path}' is a folder, not a weights file.")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise ModelError(
            f"'{path}' is not a weights file that loads safely with weights_only=True ({first_line(error)})."
        ) from error
    for wrapper in ("state_dict", "model_state_dict", "model"):
        if isinstance(data, Mapping) and isinstance(data.get(wrapper), Mapping):
            data = data[wrapper]
    if not isinstance(data, Mapping) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ModelError(f"'{path}' does not hold a state_dict (a mapping of parameter names to tensors).")
    # DataParallel and DistributedDataParallel save every key with a "module." prefix.
    if data and all(k.startswith("module.") for k in data):
        data = {k[len("module.") :]: v for k, v in data.items()}
    return dict(data)


def load_state_dict_file(module: nn.Module, path: Path, arch: str) -> None:
    """Load ``path`` into ``module`` strictly, or explain in plain words why the file does not fit."""
    state = read_state_dict(path)
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} (file {tuple(state[k].shape)}, model {tuple(own[k].shape)})"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {_some(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_some(unexpected)}")
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatch(es): {_some(mismatched)}")
    if problems:
        raise ModelError(f"Weights file '{path}' does not fit {arch}: " + "; ".join(problems) + ".")
    module.load_state_dict(state)


def _some(items: list[str], limit: int = 3) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
