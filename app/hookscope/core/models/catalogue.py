"""The model catalogue: torchvision's classification models by name (and timm's, when installed), with their
weights and preprocessing, and state_dict files read without running code."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from hookscope.core.common.errors import ModelError, Remedy
from hookscope.core.models.images import Preprocess
from hookscope.core.models.loaded import HF_PREFIX, TIMM_PREFIX, LoadedModel
from hookscope.core.models.state_dicts import first_line, load_state_dict_file

DEFAULT_MODEL = "resnet18"


def catalogue(include_timm: bool = False) -> list[str]:
    """Every torchvision classification, segmentation and detection model by name; then timm's as ``timm/NAME``
    when asked and installed."""
    names = sorted(
        [*torchvision.models.list_models(module=torchvision.models), *segmentation_models(), *detection_models()]
    )
    return names + timm_catalogue() if include_timm else names


@functools.lru_cache(maxsize=1)
def segmentation_models() -> tuple[str, ...]:
    """torchvision's semantic segmentation models (fcn, deeplabv3, lraspp)."""
    return tuple(sorted(torchvision.models.list_models(module=torchvision.models.segmentation)))


@functools.lru_cache(maxsize=1)
def detection_models() -> tuple[str, ...]:
    """torchvision's detection models (Faster R-CNN, RetinaNet, FCOS, SSD, Mask R-CNN, keypoint R-CNN)."""
    return tuple(sorted(torchvision.models.list_models(module=torchvision.models.detection)))


def catalogue_task(name: str) -> str:
    """What a catalogue model predicts: "segmentation", "detection" or "classification"."""
    if name in segmentation_models():
        return "segmentation"
    if name in detection_models():
        return "detection"
    return "classification"


def _build(name: str) -> nn.Module:
    """``name`` with random weights. Segmentation and detection builders fetch ImageNet weights for their backbone
    by default: ``weights_backbone=None`` keeps them from downloading anything."""
    if catalogue_task(name) != "classification":
        return torchvision.models.get_model(name, weights=None, weights_backbone=None)
    return torchvision.models.get_model(name, weights=None)


def timm_available() -> bool:
    """Whether the optional timm package is installed (``pip install hookscope[timm]``)."""
    return importlib.util.find_spec("timm") is not None


@functools.lru_cache(maxsize=1)
def _timm_names() -> tuple[str, ...]:
    import timm

    return tuple(sorted(timm.list_models()))


def timm_catalogue() -> list[str]:
    """timm's architectures as ``timm/NAME``; empty when timm is not installed."""
    if not timm_available():
        return []
    return [TIMM_PREFIX + name for name in _timm_names()]


def check_model_name(name: str) -> None:
    """Raise a ModelError with close matches when ``name`` is not in the catalogue."""
    if name.startswith(HF_PREFIX):  # any repo on the Hub: only its spelling is checked here, no network
        from hookscope.core.models.hub import check_hub_name

        return check_hub_name(name)
    if name.startswith(TIMM_PREFIX):
        if not timm_available():
            raise ModelError(f"'{name}' is a timm model and timm is not installed: pip install 'hookscope[timm]'.")
        names = list(_timm_names())
        short = name[len(TIMM_PREFIX) :]
        if short not in names:
            close = difflib.get_close_matches(short.lower(), names, n=5, cutoff=0.5)
            hint = (
                f"did you mean {', '.join(TIMM_PREFIX + c for c in close)}?"
                if close
                else "timm.list_models() lists them."
            )
            raise ModelError(f"Unknown timm model '{short}'; {hint}")
        return
    names = catalogue()
    if name not in names:
        close = difflib.get_close_matches(name.lower(), names, n=5, cutoff=0.5)
        if not close:
            raise ModelError(f"Unknown model '{name}'", remedy=Remedy.MODEL_NAMES)
        raise ModelError(f"Unknown model '{name}'; did you mean {', '.join(close)}?")


_check_name = check_model_name


def default_weights_file(name: str) -> Path:
    """Where torchvision keeps the model's default pretrained weights in the torch hub cache."""
    weights = torchvision.models.get_model_weights(name).DEFAULT
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)


def default_categories(name: str) -> list[str] | None:
    """The class names in the metadata of ``name``'s default torchvision weights (no download: the names are in
    torchvision's code), or None when they have none."""
    try:
        categories = torchvision.models.get_model_weights(name).DEFAULT.meta.get("categories")
    except (ValueError, KeyError, AttributeError):
        return None
    return [str(c) for c in categories] if categories else None


def default_preprocess(name: str, model: nn.Module) -> Preprocess:
    """The default weights' preprocessing, sized to what this instance accepts.

    An untrained ViT is built for 224 pixels even where its default weights were trained at 518, so the crop
    follows the model's own ``image_size`` when it has one.
    """
    task = catalogue_task(name)
    if task != "classification":
        return _task_preprocess(name, model, task)
    preprocess = Preprocess.from_torchvision(torchvision.models.get_model_weights(name).DEFAULT.transforms())
    size = getattr(model, "image_size", None)
    if isinstance(size, int) and size != preprocess.crop:
        preprocess = replace(preprocess, crop=size, resize=size * 256 // 224)
    return preprocess


def _task_preprocess(name: str, model: nn.Module, task: str) -> Preprocess:
    """A segmentation preset (``SemanticSegmentation``: the shorter side resized, no crop) as a square centre crop of
    that size, so that every run of the model has the same input; a detection preset (``ObjectDetection``: only
    the [0, 1] conversion, the model resizes and normalises inside) as the size the model's own transform resizes
    to, mean 0 and std 1."""
    transforms = torchvision.models.get_model_weights(name).DEFAULT.transforms()
    if task == "segmentation":
        size = transforms.resize_size
        side = int(size[0] if isinstance(size, (list, tuple)) else size)
        interpolation = transforms.interpolation
        mode = interpolation.value if hasattr(interpolation, "value") else str(interpolation)
        return Preprocess(
            resize=side, crop=side, mean=tuple(transforms.mean), std=tuple(transforms.std), interpolation=mode
        )
    inner = getattr(model, "transform", None)
    fixed = getattr(inner, "fixed_size", None)
    side = int(fixed[0]) if fixed else int(min(getattr(inner, "min_size", (800,))))
    return Preprocess(resize=side, crop=side, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


def load_model(name: str, weights: str = "none", seed: int = 0, strict: bool = True) -> LoadedModel:
    """Build ``name`` with random weights (``none``), cached pretrained weights (``default``) or a state_dict file.

    Random weights are drawn after ``torch.manual_seed(seed)`` so that runs are reproducible; the class names
    still come from the default weights' metadata (``pretrained`` stays False). A state_dict file must fit exactly
    unless ``strict`` is False: then the tensors that fit are loaded and the notice says what was left out; its
    classes are unknown (``categories`` None). Nothing is ever downloaded here (see :mod:`hookscope.core.models.weights`).
    """
    if name.startswith(HF_PREFIX):  # fetched into the Hub cache when needed (hookscope.core.models.hub)
        from hookscope.core.models.hub import load_hub_model

        return load_hub_model(name, weights, seed)
    check_model_name(name)
    if name.startswith(TIMM_PREFIX):
        return _load_timm(name, weights, seed, strict)
    if weights == "default":
        return _load_pretrained(name, seed)
    torch.manual_seed(seed)
    module = _build(name).eval()
    loaded = LoadedModel(
        name,
        module,
        "none",
        False,
        default_preprocess(name, module),
        default_categories(name),
        seed=seed,
        task=catalogue_task(name),
    )
    if weights != "none":
        loaded.notice = load_state_dict_file(module, Path(weights), name, strict=strict)
        loaded.weights = str(weights)
        loaded.pretrained = True
        loaded.categories = None  # the file's classes are not known
    return loaded


def _load_pretrained(name: str, seed: int) -> LoadedModel:
    weights = torchvision.models.get_model_weights(name).DEFAULT
    path = default_weights_file(name)
    if not path.is_file():
        loaded = load_model(name, "none", seed)
        loaded.notice = (
            f"Pretrained weights for {name} are not in the torch hub cache ({path}); "
            f"showing an untrained {name} with random weights (seed {seed})."
        )
        return loaded
    try:
        module = torchvision.models.get_model(name, weights=weights).eval()
    except Exception as error:  # a damaged cache file: say so rather than crash
        raise ModelError(
            f"The cached weights file {path} could not be loaded ({first_line(error)}).", path=str(path)
        ) from error
    preprocess = (
        default_preprocess(name, module)
        if catalogue_task(name) != "classification"
        else Preprocess.from_torchvision(weights.transforms())
    )
    return LoadedModel(
        name,
        module,
        "default",
        True,
        preprocess,
        list(weights.meta["categories"]),
        seed=seed,
        task=catalogue_task(name),
    )


def _timm_cached_weights(arch: str) -> Path | None:
    """The file of timm's default pretrained weights for ``arch`` if it is already cached, else None.

    timm fetches weights from the Hugging Face hub (cached under ``HF_HUB_CACHE``) or, for older models, from a
    URL into the torch hub cache; either cache counts. Nothing is downloaded.
    """
    import timm

    cfg: Any = timm.models.get_pretrained_cfg(arch)  # the default tag's config, or None
    if cfg is None:
        return None
    cfg = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    hub_id = cfg.get("hf_hub_id")
    if hub_id:
        home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
        root = Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))
        repo = root / ("models--" + hub_id.replace("/", "--"))
        snapshots = []
        ref = repo / "refs" / "main"
        if ref.is_file():
            snapshots.append(repo / "snapshots" / ref.read_text().strip())
        if (repo / "snapshots").is_dir():
            snapshots.extend(sorted((repo / "snapshots").iterdir()))
        names = [cfg["hf_hub_filename"]] if cfg.get("hf_hub_filename") else ["model.safetensors", "pytorch_model.bin"]
        for snapshot in snapshots:
            for name in names:
                if (snapshot / name).is_file():
                    return snapshot / name
    url = cfg.get("url")
    if url:
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
        if path.is_file():
            return path
    return None


def timm_preprocess(module: nn.Module) -> Preprocess:
    """timm's own input configuration for this model (size, crop fraction, mean, std, interpolation)."""
    from timm.data import resolve_data_config

    config = resolve_data_config({}, model=module)
    channels, height, _width = config["input_size"]
    interpolation = config.get("interpolation", "bilinear")
    mean, std = tuple(config["mean"]), tuple(config["std"])
    if channels == 1 and len(mean) != 1:  # timm keeps 3 statistics for a 1-channel model: average them
        mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
    return Preprocess(
        resize=int(math.floor(height / config.get("crop_pct", 0.875))),
        crop=int(height),
        mean=mean,
        std=std,
        channels=3 if channels not in (1, 3) else int(channels),
        interpolation=interpolation if interpolation in ("bilinear", "bicubic", "nearest") else "bilinear",
    )


def _timm_categories(module: nn.Module) -> list[str] | None:
    try:
        from timm.data import ImageNetInfo, infer_imagenet_subset

        subset = infer_imagenet_subset(module)
        return list(ImageNetInfo(subset).label_descriptions()) if subset else None
    except Exception:  # older timm, or not an ImageNet head: no class names, which is fine
        return None


def _load_timm(name: str, weights: str, seed: int, strict: bool) -> LoadedModel:
    import timm

    arch = name[len(TIMM_PREFIX) :]
    torch.manual_seed(seed)
    cached = _timm_cached_weights(arch) if weights == "default" else None
    try:
        if cached is not None:
            # timm's own loader (weights_only=True, with its key remapping), pointed at the cached file.
            module = timm.create_model(arch, pretrained=True, pretrained_cfg_overlay={"file": str(cached)})
        else:
            module = timm.create_model(arch, pretrained=False)
    except Exception as error:
        where = f" with the cached weights {cached}" if cached else ""
        raise ModelError(
            f"timm could not build {arch}{where} ({first_line(error)}).", path=str(cached) if cached else None
        ) from error
    module.eval()
    loaded = LoadedModel(
        name, module, "none", False, timm_preprocess(module), _timm_categories(module), seed=seed, source="timm"
    )
    if cached is not None:
        loaded.weights, loaded.pretrained = "default", True
    elif weights == "default":
        loaded.notice = (
            f"timm's pretrained weights for {arch} are not in the cache; "
            f"showing an untrained {arch} with random weights (seed {seed})."
        )
    elif weights != "none":
        loaded.notice = load_state_dict_file(module, Path(weights), name, strict=strict)
        loaded.weights, loaded.pretrained = str(weights), True
        loaded.categories = None  # the file's classes are not known
    return loaded
