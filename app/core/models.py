"""The model catalogue: torchvision's classification models by name (and timm's, when installed), with their
weights and preprocessing, and state_dict files read without running code."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torchvision
from torch import nn

from app.core.errors import ModelError
from app.core.images import Preprocess

DEFAULT_MODEL = "resnet18"
TIMM_PREFIX = "timm/"  # catalogue names of timm models: "timm/resnet50"
# Where a model came from, in LoadedModel.source.
SOURCES = ("catalogue", "timm", "state_dict", "pickle", "python", "hub")  # "hub": hf:ORG/NAME (hub_models)
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
        if self.source == "hub":
            return f"Random weights (seed {self.seed})" if self.weights == "none" else "Pretrained (Hugging Face Hub)"
        if self.source in ("catalogue", "timm"):
            if not self.pretrained or self.weights == "none":
                return f"Random weights (seed {self.seed})"
            if self.weights == "default":
                return "Pretrained (ImageNet, torchvision)" if self.source == "catalogue" else "Pretrained (timm)"
            return f"File: {Path(self.weights).name}"
        if self.source == "state_dict":
            return f"File: {Path(self.model_file or self.weights).name}"
        if self.weights not in ("", "none", "default"):  # a pickled model, or a weights file loaded into the model
            return f"File: {Path(self.weights).name}"
        return f"Built by {self.name} (seed {self.seed})"

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


def catalogue(include_timm: bool = False) -> list[str]:
    """Every torchvision classification, segmentation and detection model by name; then timm's as ``timm/NAME``
    when asked and installed."""
    names = sorted([*torchvision.models.list_models(module=torchvision.models), *segmentation_models(),
                    *detection_models()])
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
        from app.core.hub_models import check_hub_name

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
        hint = f"did you mean {', '.join(close)}?" if close else "'hookscope export --help' lists where to find names."
        raise ModelError(f"Unknown model '{name}'; {hint}")


_check_name = check_model_name


def default_weights_file(name: str) -> Path | None:
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
        return Preprocess(resize=side, crop=side, mean=tuple(transforms.mean), std=tuple(transforms.std),
                          interpolation=mode)
    inner = getattr(model, "transform", None)
    fixed = getattr(inner, "fixed_size", None)
    side = int(fixed[0]) if fixed else int(min(getattr(inner, "min_size", (800,))))
    return Preprocess(resize=side, crop=side, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


def load_model(name: str, weights: str = "none", seed: int = 0, strict: bool = True) -> LoadedModel:
    """Build ``name`` with random weights (``none``), cached pretrained weights (``default``) or a state_dict file.

    Random weights are drawn after ``torch.manual_seed(seed)`` so that runs are reproducible; the class names
    still come from the default weights' metadata (``pretrained`` stays False). A state_dict file must fit exactly
    unless ``strict`` is False: then the tensors that fit are loaded and the notice says what was left out; its
    classes are unknown (``categories`` None). Nothing is ever downloaded here (see :mod:`app.core.weights`).
    """
    if name.startswith(HF_PREFIX):  # fetched into the Hub cache when needed (app.core.hub_models)
        from app.core.hub_models import load_hub_model

        return load_hub_model(name, weights, seed)
    check_model_name(name)
    if name.startswith(TIMM_PREFIX):
        return _load_timm(name, weights, seed, strict)
    if weights == "default":
        return _load_pretrained(name, seed)
    torch.manual_seed(seed)
    module = _build(name).eval()
    loaded = LoadedModel(
        name, module, "none", False, default_preprocess(name, module), default_categories(name), seed=seed,
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
    preprocess = default_preprocess(name, module) if catalogue_task(name) != "classification" else \
        Preprocess.from_torchvision(weights.transforms())
    return LoadedModel(name, module, "default", True, preprocess, list(weights.meta["categories"]), seed=seed,
                       task=catalogue_task(name))


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _timm_cached_weights(arch: str) -> Path | None:
    """The file of timm's default pretrained weights for ``arch`` if it is already cached, else None.

    timm fetches weights from the Hugging Face hub (cached under ``HF_HUB_CACHE``) or, for older models, from a
    URL into the torch hub cache; either cache counts. Nothing is downloaded.
    """
    import timm

    cfg = timm.models.get_pretrained_cfg(arch)  # the default tag's config, or None
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


def safetensors_available() -> bool:
    return importlib.util.find_spec("safetensors") is not None


def is_safetensors_file(path: Path) -> bool:
    """A .safetensors file: an 8-byte little-endian header length, then a JSON header."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return False
    if len(head) < 9:
        return False
    length = int.from_bytes(head[:8], "little")
    return head[8:9] == b"{" and 2 <= length <= size - 8


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not safetensors_available():
        raise ModelError(
            f"'{path}' is a safetensors file: reading it needs the safetensors package (pip install safetensors).",
            path=str(path),
        )
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except Exception as error:
        raise ModelError(
            f"'{path}' is not a readable safetensors file ({first_line(error)}).", path=str(path)
        ) from error


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Load a weights file without unpickling code, and unwrap the usual containers around a state_dict.

    ``.pt``/``.pth``/``.bin`` files load with ``torch.load(weights_only=True)``; ``.safetensors`` files with the
    safetensors package, when installed.
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"Weights file '{path}' does not exist.", path=str(path))
    if path.is_dir():
        raise ModelError(f"'{path}' is a folder, not a weights file.", path=str(path))
    if path.suffix.lower() == ".safetensors" or is_safetensors_file(path):
        return state_dict_from(_read_safetensors(path), path)
    from app.core.model_files import load_weights_only, weights_refusal  # model_files imports this module

    try:
        data = load_weights_only(path)
    except Exception as error:
        raise ModelError(weights_refusal(path, error), path=str(path)) from error
    return state_dict_from(data, path)


# Prefixes that wrappers put on every key: DataParallel/DistributedDataParallel, and torch.compile.
_KEY_PREFIXES = ("module.", "_orig_mod.")


def state_dict_from(data: object, path: Path | str) -> dict[str, torch.Tensor]:
    """The state_dict inside what a weights file held: ``{"state_dict": ...}``, ``{"model": ...}`` and key
    prefixes added by DataParallel (``module.``) and torch.compile (``_orig_mod.``) are unwrapped."""
    for wrapper in ("state_dict", "model_state_dict", "model"):
        if isinstance(data, Mapping) and isinstance(data.get(wrapper), Mapping):
            data = data[wrapper]
    if not isinstance(data, Mapping) or not data or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ModelError(
            f"'{path}' does not hold a state_dict (a mapping of parameter names to tensors).", path=str(path)
        )
    state = {str(k): v for k, v in data.items()}
    stripped = True
    while stripped:
        stripped = False
        for prefix in _KEY_PREFIXES:
            if all(k.startswith(prefix) for k in state):
                state = {k[len(prefix) :]: v for k, v in state.items()}
                stripped = True
    return state


def load_state_dict_file(module: nn.Module, path: Path, arch: str, strict: bool = True) -> str:
    """Load ``path`` into ``module``, or explain in plain words why the file does not fit.

    Strict (the default): nothing is loaded unless every key and shape fits. Non-strict: the tensors whose name
    and shape fit are loaded, the rest keep their values, and the returned sentence says what was left out
    (empty when everything fitted).
    """
    return load_state_dict(
        module, read_state_dict(Path(path)), f"Weights file '{path}'", arch, strict=strict, path=str(path)
    )


def load_state_dict(
    module: nn.Module,
    state: Mapping[str, torch.Tensor],
    what: str,
    arch: str,
    strict: bool = True,
    path: str | None = None,
) -> str:
    """Load ``state`` into ``module`` (see :func:`load_state_dict_file`); ``what`` names the source in messages,
    ``path`` (the file it came from) goes into the errors' ``path`` field."""
    own = module.state_dict()
    state = dict(state)
    if set(state) != set(own):
        # A wrapper attribute around the whole model (Lightning's "model.", "net."): drop it when that fits exactly.
        first = {k.split(".", 1)[0] for k in state}
        if len(first) == 1 and all("." in k for k in state):
            unwrapped = {k.split(".", 1)[1]: v for k, v in state.items()}
            if set(unwrapped) == set(own):
                state = unwrapped
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
    if not problems:
        module.load_state_dict(state)
        return ""
    if strict:
        raise ModelError(
            f"{what} does not fit {arch}: " + "; ".join(problems) + " (a non-strict load would load the rest).",
            path=path,
        )
    fitting = {k: v for k, v in state.items() if k in own and v.shape == own[k].shape}
    if not fitting:
        raise ModelError(
            f"{what} does not fit {arch} at all: none of its {len(state)} tensors has a matching name and shape.",
            path=path,
        )
    module.load_state_dict(fitting, strict=False)
    return (
        f"Non-strict load: {len(fitting)} of {len(own)} tensors of {arch} loaded from {what[0].lower() + what[1:]}; "
        + "; ".join(problems)
        + " (those keep their initial values or were ignored)."
    )


def _some(items: list[str], limit: int = 3) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
