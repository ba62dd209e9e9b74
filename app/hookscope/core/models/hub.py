"""Models from the Hugging Face Hub by name (``hf:ORG/NAME``), and timm's pretrained weights from the Hub.

transformers' image models open as what they are: a classifier (``AutoModelForImageClassification``: the output's
``logits``, class names from ``config.id2label``), a semantic segmentation model
(``AutoModelForSemanticSegmentation``, task "segmentation"), an image encoder (``AutoModel`` with a pooled output:
task "embedding", the module returns the (1, D) embedding) or a CLIP-like pair of towers (the image tower and its
projection as the module, task "embedding", and ``LoadedModel.text_embedder`` for ``text:PROMPT`` targets). The
module in the tree is transformers' own (its submodules are what the hooks go on), wrapped only where its output
must become the embedding. The input is prepared as the repo's own image processor says (size, crop, mean, std,
rescale, resampling), mapped onto :class:`~hookscope.core.models.images.Preprocess`.

Downloads go into the usual Hub cache (``HF_HOME``/``HF_HUB_CACHE``, the layout ``huggingface_hub`` reads and
writes), through ``huggingface_hub``'s own client (``HF_ENDPOINT``, tokens, proxies as it handles them). Each file
streams into ``blobs/<etag>.incomplete`` with progress and cancel between reads, every byte written as it comes; a
connection cut after new bytes is resumed at once, and a cancelled or stalled download (no data for its timeout: one
error) keeps that file, which the next call resumes with a ``Range`` request. A finished file is checked against the Hub's
checksum (the SHA-256 of an LFS file, the git blob SHA-1 of a small one) before it becomes the blob, then
``hf_hub_download`` links it into the snapshot as usual. When the Hub cannot be reached, a repo already in the cache
opens from there. Every failure is one sentence (:class:`HubError`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hookscope.core.common.errors import ModelError, Remedy
from hookscope.core.models.images import Preprocess

HF_PREFIX = "hf:"
CUT_RESUMES = 5  # a connection cut after new bytes came is resumed at once this many times (a stall is not)
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
# Besides the weights, the files a model needs: its config, its image processor's, its tokenizer's.
_SMALL_FILES = re.compile(r"[^/]*\.(json|txt|model)")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")

ProgressCallback = Callable[[int, "int | None", float], None]
CancelCheck = Callable[[], bool]


class HubError(ModelError):
    """A model from the Hub that cannot be opened: one sentence saying why."""


# ==================================================================================================== names ====
def is_hub_name(name: str) -> bool:
    return name.startswith(HF_PREFIX)


def repo_of(name: str) -> str:
    """``hf:ORG/NAME`` -> ``ORG/NAME``; a name that cannot be a Hub repo is a :class:`HubError`."""
    repo = name[len(HF_PREFIX) :] if is_hub_name(name) else name
    if not _REPO.fullmatch(repo) or ".." in repo or repo.endswith((".", "-")):
        raise HubError(
            f"'{name}' is not a Hugging Face model name: write hf:ORG/NAME, e.g. hf:google/vit-base-patch16-224."
        )
    return repo


def check_hub_name(name: str) -> None:
    """The name's spelling, and the packages that open such a model (no network)."""
    repo_of(name)
    import importlib.util

    missing = [p for p in ("transformers", "huggingface_hub") if importlib.util.find_spec(p) is None]
    if missing:
        raise HubError(f"'{name}' is a model from the Hugging Face Hub, which needs {' and '.join(missing)}: "
                       "pip install 'hookscope[hub]'.")  # fmt: skip


# ============================================================================================ the cache ====
def hub_endpoint() -> str:
    """The Hub's address: ``$HF_ENDPOINT`` read now (huggingface_hub reads it once, at import), else its own."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_cache() -> Path:
    """The Hub cache folder: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))


def repo_cache(repo: str) -> Path:
    return hub_cache() / ("models--" + repo.replace("/", "--"))


def cached_snapshot(repo: str, need_weights: bool = True) -> Path | None:
    """The snapshot of ``repo``'s main branch in the cache when it holds a config (and weights, when asked)."""
    folder = repo_cache(repo)
    ref = folder / "refs" / "main"
    candidates = []
    if ref.is_file():
        candidates.append(folder / "snapshots" / ref.read_text().strip())
    if (folder / "snapshots").is_dir():
        candidates.extend(sorted((folder / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime, reverse=True))
    for snapshot in candidates:
        if (snapshot / "config.json").is_file() and (not need_weights or _weights_in(snapshot)):
            return snapshot
    return None


def _weights_in(snapshot: Path) -> str | None:
    return next((name for name in _WEIGHTS if (snapshot / name).is_file()), None)


def is_cached(name: str, weights: str = "default") -> bool:
    return cached_snapshot(repo_of(name), need_weights=weights == "default") is not None


# ========================================================================================== downloading ====
def _wanted_files(files: list[str], with_weights: bool) -> list[str]:
    """The files to fetch: configs and tokenizer files, and one format of weights (safetensors first)."""
    chosen = [f for f in files if _SMALL_FILES.fullmatch(f) and f not in _WEIGHTS]
    if with_weights:
        for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if index in files:
                chosen.append(index)
                prefix = index.removesuffix(".index.json").rsplit(".", 1)[0]
                chosen.extend(f for f in files if f.startswith(prefix + "-") and "/" not in f)
                return chosen
        single = next((w for w in ("model.safetensors", "pytorch_model.bin") if w in files), None)
        if single:
            chosen.append(single)
    return chosen


class _Fetch:
    def __init__(self, label: str, total: int | None, progress: ProgressCallback | None,
                 cancelled: CancelCheck | None) -> None:  # fmt: skip
        import time

        self.label, self.total, self.progress, self.cancelled = label, total, progress, cancelled
        self.done = 0
        self._clock = time.monotonic
        self.start = self._clock()
        self._last = 0.0

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled():
            from hookscope.core.common.errors import DownloadCancelled

            raise DownloadCancelled(
                f"The download of {self.label} was cancelled; what came so far is kept in the Hub cache and the next "
                "download resumes it."
            )

    def advance(self, count: int) -> None:
        self.done += count
        now = self._clock()
        if self.progress is not None and (now - self._last >= 0.1 or (self.total and self.done >= self.total)):
            self._last = now
            self.progress(self.done, self.total, self.done / max(now - self.start, 1e-6))
        self.check()

    def report(self) -> None:
        """Say how far it got now, not at the next read (there may be none: a stall, a cancel)."""
        if self.progress is not None:
            now = self._clock()
            self._last = now
            self.progress(self.done, self.total, self.done / max(now - self.start, 1e-6))


def _network_error(error: BaseException) -> bool:
    """Whether ``error`` says the Hub could not be reached (rather than that it answered no)."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(error, OfflineModeIsEnabled):
        return True
    if isinstance(error, HfHubHTTPError):
        response = getattr(error, "response", None)
        return response is not None and response.status_code >= 500
    return isinstance(error, OSError) or type(error).__module__.split(".")[0].startswith("httpx")


def _hub_refusal(name: str, error: BaseException) -> HubError | None:
    """The sentence for a Hub that answered: no such repo, gated, no such revision; None for other errors."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(error, GatedRepoError):
        return HubError(f"{name} is gated on the Hugging Face Hub: accept its terms on its page, then log in with "
                        "'hf auth login' (or set HF_TOKEN).")  # fmt: skip
    if isinstance(error, RepositoryNotFoundError):
        return HubError(f"{name} does not exist on the Hugging Face Hub (or it is private: log in with "
                        "'hf auth login' or set HF_TOKEN).")  # fmt: skip
    if isinstance(error, RevisionNotFoundError):
        return HubError(f"{name} has no main branch on the Hugging Face Hub.")
    return None


def fetch_repo(
    name: str,
    weights: str = "default",
    progress: ProgressCallback | None = None,
    cancelled: CancelCheck | None = None,
    timeout: float = 30.0,
    files: list[str] | None = None,
) -> Path:
    """Bring ``hf:ORG/NAME`` (or a Hub repo id) into the Hub cache and return its snapshot folder.

    ``weights`` "default": the config, processor and tokenizer files and the weights; "none": all but the weights.
    ``files``: exactly these files instead (timm's weights file). When the Hub cannot be reached, the cached
    snapshot comes back if it has what is needed; otherwise one sentence says so. Raises :class:`HubError`, or
    ``DownloadCancelled``/``WeightsDownloadError`` from :mod:`hookscope.core.models.weights`.
    """
    return _fetch(name, weights, progress, cancelled, timeout, files)[0]


def _fetch(
    name: str,
    weights: str,
    progress: ProgressCallback | None,
    cancelled: CancelCheck | None,
    timeout: float,
    files: list[str] | None,
    vet: Callable[[Path], None] | None = None,
) -> tuple[Path, str]:
    """:func:`fetch_repo`, and a sentence when the snapshot came from the cache because the Hub was unreachable.

    ``vet(snapshot)`` sees the snapshot once its config.json is there, before the rest comes (a text model is
    refused before its weights are downloaded)."""
    from huggingface_hub import HfApi

    repo = repo_of(name)
    shown = name if is_hub_name(name) else f"hf:{repo}"
    need_weights = weights == "default" if files is None else True
    endpoint = hub_endpoint()
    try:
        info = HfApi(endpoint=endpoint).model_info(repo, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - sorted below: a refusal, or no network
        refusal = _hub_refusal(shown, error)
        if refusal is not None:
            raise refusal from error
        if not _network_error(error):
            raise HubError(f"The Hugging Face Hub ({endpoint}) gave an unexpected answer for {shown} "
                           f"({_first_line(error)}).") from error  # fmt: skip
        cached = _cached_with(repo, files, need_weights)
        if cached is not None:
            return cached, (f"The Hugging Face Hub ({endpoint}) cannot be reached ({_first_line(error)}); "
                            f"{shown} was opened from the cache.")  # fmt: skip
        raise HubError(
            f"{shown} is not in the Hugging Face cache ({hub_cache()}) and the Hub ({endpoint}) cannot be "
            f"reached ({_first_line(error)}): connect to the network and try again."
        ) from error
    listed = [s.rfilename for s in (info.siblings or [])]
    commit = info.sha
    if not commit:
        raise HubError(f"The Hugging Face Hub ({endpoint}) did not say which commit {shown} is at.")
    wanted = files if files is not None else _wanted_files(listed, need_weights)
    missing = [f for f in (files or []) if f not in listed]
    if missing:
        raise HubError(f"{shown} has no {missing[0]} on the Hugging Face Hub.")
    if files is None and "config.json" not in listed:
        raise HubError(f"{shown} has no config.json: it is not a transformers model Hookscope can open.")
    storage = repo_cache(repo)
    if vet is not None and "config.json" in wanted:
        _download_files(repo, shown, commit, ["config.json"], endpoint, None, cancelled, timeout)
        vet(storage / "snapshots" / commit)
    _download_files(repo, shown, commit, wanted, endpoint, progress, cancelled, timeout)
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text(commit)  # what huggingface_hub writes, so it finds it offline too
    return storage / "snapshots" / commit, ""


def _cached_with(repo: str, files: list[str] | None, need_weights: bool) -> Path | None:
    if files is None:
        return cached_snapshot(repo, need_weights)
    folder = repo_cache(repo) / "snapshots"
    for snapshot in sorted(folder.iterdir()) if folder.is_dir() else []:
        if all((snapshot / f).is_file() for f in files):
            return snapshot
    return None


def _download_files(repo: str, shown: str, commit: str, names: list[str], endpoint: str,
                    progress: ProgressCallback | None, cancelled: CancelCheck | None, timeout: float) -> None:  # fmt: skip
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    storage = repo_cache(repo)
    todo: list[tuple[str, Any]] = []  # (file name, huggingface_hub's file metadata)
    for name in names:
        if (storage / "snapshots" / commit / name).is_file():
            continue
        url = hf_hub_url(repo, name, revision=commit, endpoint=endpoint)
        try:
            meta = get_hf_file_metadata(url, timeout=timeout)
        except Exception as error:  # noqa: BLE001
            refusal = _hub_refusal(shown, error)
            raise (refusal or HubError(f"Could not read {name} of {shown} from the Hugging Face Hub "
                                       f"({_first_line(error)}).")) from error  # fmt: skip
        if not meta.etag:
            raise HubError(f"The Hugging Face Hub sent no checksum (ETag) for {name} of {shown}.")
        todo.append((name, meta))
    need = [(n, m) for n, m in todo if not (storage / "blobs" / m.etag).is_file()]
    total = sum(m.size or 0 for _, m in need) or None
    fetch = _Fetch(shown, total, progress, cancelled)
    if progress is not None:
        progress(0, total, 0.0)
    for name, meta in need:
        fetch.check()
        # One download of a file at a time, whoever asks (another window's load, another process): the same lock
        # file huggingface_hub takes for it.
        lock = hub_cache() / ".locks" / storage.name / f"{meta.etag}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with WeakFileLock(str(lock)):
            if not (storage / "blobs" / meta.etag).is_file():  # not brought meanwhile by whoever held the lock
                _download_blob(storage, shown, name, meta, build_hf_headers(), fetch, timeout)
    for name, _meta in todo:  # the blobs are there: huggingface_hub links them into the snapshot as it always does
        fetch.check()
        try:
            hf_hub_download(repo, name, revision=commit, cache_dir=str(hub_cache()), endpoint=endpoint,
                            etag_timeout=timeout)  # fmt: skip
        except Exception as error:  # noqa: BLE001
            raise HubError(
                f"Could not put {name} of {shown} into the Hugging Face cache ({_first_line(error)})."
            ) from error


def _download_blob(storage: Path, shown: str, name: str, meta: Any, headers: dict, fetch: _Fetch,
                   timeout: float = 30.0) -> None:  # fmt: skip
    """Stream one file into ``blobs/<etag>.incomplete`` from where an earlier try stopped, verify it, move it.

    One try (``_stream``), ``timeout`` seconds without data ending it, and the caller's one error line says so;
    what came is kept for the next try."""
    from hookscope.core.common.errors import DownloadCancelled, WeightsDownloadError

    blobs = storage / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / meta.etag
    partial = blobs / (meta.etag + ".incomplete")
    have = partial.stat().st_size if partial.is_file() else 0
    if meta.size is not None and have > meta.size:  # not a prefix of this file: start again
        partial.unlink()
        have = 0
    fetch.advance(0)
    fetch.done += have  # what an earlier try brought counts as done
    try:
        with open(partial, "ab", buffering=0) as out:
            for cut in range(CUT_RESUMES + 1):
                try:
                    _stream(meta.location, out, have, headers, fetch, timeout)
                    break
                except DownloadCancelled:
                    raise
                except Exception as error:  # noqa: BLE001 - a cut that brought bytes is resumed at once; not a stall
                    grew, have = os.fstat(out.fileno()).st_size > have, os.fstat(out.fileno()).st_size
                    if _stalled(error) or not grew or cut == CUT_RESUMES:
                        raise
                finally:
                    fetch.report()  # the bar shows what came, however the try ended (a stall shows no more reads)
        if meta.size is not None and partial.stat().st_size < meta.size:  # the answer ended early, with no error
            raise OSError(f"{partial.stat().st_size} of {meta.size} bytes came")
    except DownloadCancelled:
        raise
    except Exception as error:  # noqa: BLE001 - the partial file stays: the next try resumes it
        raise WeightsDownloadError(f"The download of {name} of {shown} broke off ({_first_line(error)}); what came "
                                   "is kept and the next try resumes it.") from error  # fmt: skip
    actual, expected = _checksum(partial, meta.etag)
    if actual != expected:
        partial.unlink()
        raise WeightsDownloadError(f"{name} of {shown} does not match the Hub's checksum (expected {expected[:12]}…, "
                                   f"got {actual[:12]}…), so it was discarded: download it again.")  # fmt: skip
    os.replace(partial, blob)


def _stalled(error: BaseException) -> bool:
    """Whether a download ended because no data came for its timeout (httpx's ReadTimeout and the like)."""
    return any("Timeout" in kind.__name__ for kind in type(error).__mro__)


def _stream(url: str, out: Any, have: int, headers: dict, fetch: _Fetch, timeout: float) -> None:
    """One GET of ``url`` from byte ``have`` on, each read written to ``out`` as it comes, then counted (a cancel
    raised by the count finds it written). One try, ``timeout`` seconds without data ending it: huggingface_hub's
    ``http_get`` would retry a stall five more times, printing "timed out" and "Trying to resume download..." each
    time, and hands over 64 kB chunks, losing the part of one that had come when the stall or a Ctrl-C came."""
    from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

    asked = {**headers, "Range": f"bytes={have}-"} if have else dict(headers)
    with http_stream_backoff("GET", url, headers=asked, timeout=timeout, max_retries=0, retry_on_exceptions=(),
                             retry_on_status_codes=()) as response:  # fmt: skip
        hf_raise_for_status(response)
        if have and response.status_code == 200:  # the server sent the whole file: it starts again
            out.seek(0)
            out.truncate()
            fetch.done -= have
        for chunk in response.iter_bytes():  # each read as it arrives
            out.write(chunk)
            fetch.advance(len(chunk))


def _checksum(path: Path, etag: str) -> tuple[str, str]:
    """(the file's checksum, the Hub's): the SHA-256 of an LFS file, the git blob SHA-1 of a small one; the
    file's size against itself when the Hub's ETag is neither (then only the length was checked)."""
    if _SHA256.fullmatch(etag):
        digest = hashlib.sha256()
    elif _SHA1.fullmatch(etag):
        digest = hashlib.sha1()
        digest.update(b"blob %d\0" % path.stat().st_size)
    else:
        return etag, etag
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest(), etag


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


# ============================================================================================= the model ====
def hub_preprocess(processor: Any, config: Any = None) -> Preprocess:
    """The image processor's steps as a :class:`Preprocess`: size (``shortest_edge``, or a height and a width:
    the picture squashed to it), centre crop, rescale, mean and std, resampling."""
    from hookscope.core.models.inputs import IMAGENET_MEAN, IMAGENET_STD

    def get(key: str, default: Any = None) -> Any:
        value = getattr(processor, key, None)
        return default if value is None else value

    def side(size: Any) -> dict:
        if size is None:
            return {}
        if isinstance(size, (int, float)):
            return {"shortest_edge": int(size)}
        data = (
            dict(size)
            if isinstance(size, dict)
            else {k: getattr(size, k, None) for k in ("height", "width", "shortest_edge", "longest_edge")}
        )
        return {k: int(v) for k, v in data.items() if v is not None}

    image_size = getattr(config, "image_size", None)
    image_size = int(image_size[-1] if isinstance(image_size, (list, tuple)) else image_size or 224)
    size = side(get("size")) if get("do_resize", True) else {}
    crop_size = side(get("crop_size")) if get("do_center_crop", False) else {}
    crop = crop_size.get("height") or crop_size.get("shortest_edge")
    squash, resize = False, None
    if "height" in size:  # the whole picture to height x width (then the crop, if any)
        squash, resize, crop = True, size["height"], crop or size["height"]
    elif "shortest_edge" in size:
        short = size["shortest_edge"]
        crop_pct = get("crop_pct")
        if crop_pct and not crop:  # ConvNeXt's processor: below 384, resize to short/crop_pct and crop short
            if short < 384:
                resize, crop = int(short / crop_pct), short
            else:
                squash, resize, crop = True, short, short
        else:
            resize, crop = short, crop or short
    elif "longest_edge" in size:
        squash, resize, crop = True, size["longest_edge"], crop or size["longest_edge"]
    else:
        crop = crop or image_size
    if get("do_normalize", True):
        mean = tuple(float(v) for v in get("image_mean", IMAGENET_MEAN))
        std = tuple(float(v) for v in get("image_std", IMAGENET_STD))
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    scale = float(get("rescale_factor", 1 / 255)) if get("do_rescale", True) else 1.0
    if abs(scale * 255 - 1) > 1e-9:  # (v * scale - m) / s == (v / 255 - m') / s' with m' = m / (255 scale)
        mean = tuple(m / (255 * scale) for m in mean)
        std = tuple(s / (255 * scale) for s in std)
    if len(mean) == 1:
        mean, std = mean * 3, std * 3
    resample = get("resample", 2)
    resample = int(getattr(resample, "value", resample)) if not isinstance(resample, str) else resample
    interpolation = {
        0: "nearest",
        2: "bilinear",
        3: "bicubic",
        1: "bicubic",
        4: "bilinear",
        5: "bilinear",
        "nearest": "nearest",
        "bilinear": "bilinear",
        "bicubic": "bicubic",
    }.get(resample, "bilinear")
    return Preprocess(resize=resize, crop=int(crop), mean=mean[:3], std=std[:3], channels=3,
                      interpolation=interpolation, squash=squash)  # fmt: skip


class ImageEmbedding(nn.Module):
    """An image encoder whose output is a structure: its (1, D) embedding (``image_embeds``, else
    ``pooler_output``). The encoder stays transformers' own module, as ``encoder``."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.config = getattr(encoder, "config", None)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        output = self.encoder(pixel_values=pixel_values)
        return _embedding(output)


class TowerEmbedding(nn.Module):
    """A CLIP-like model's image side: its vision tower and (when it has one) its projection, both transformers'
    own modules; the output is what ``get_image_features`` gives, as a (1, D) tensor."""

    def __init__(self, vision_model: nn.Module, projection: nn.Module | None, config: Any) -> None:
        super().__init__()
        self.vision_model = vision_model
        self.visual_projection = projection
        self.config = config

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pooled = self.vision_model(pixel_values=pixel_values).pooler_output
        return self.visual_projection(pooled) if self.visual_projection is not None else pooled


def _embedding(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    for key in ("image_embeds", "pooler_output"):
        value = output.get(key) if hasattr(output, "get") else getattr(output, key, None)
        if isinstance(value, torch.Tensor):
            return value
    raise HubError("The model's output has no image embedding (image_embeds or pooler_output).")


def _kind(config: Any) -> str:
    """ "classification", "segmentation", "pair" (CLIP-like), "encoder", "other:WORDS" (an image model for
    another task: "other:object detection") or "" (not an image model)."""
    from transformers.models.auto import modeling_auto as auto

    model_type = getattr(config, "model_type", "")
    architectures = list(getattr(config, "architectures", None) or [])
    if any(a.endswith("ForImageClassification") for a in architectures):
        return "classification"
    if any(a.endswith("ForSemanticSegmentation") for a in architectures):
        return "segmentation"
    bare = not architectures or any(a.endswith("Model") and "For" not in a for a in architectures)
    if hasattr(config, "vision_config") and hasattr(config, "text_config"):
        return "pair" if bare else _other(architectures)
    image = model_type in getattr(auto, "MODEL_FOR_IMAGE_MAPPING_NAMES", {}) or hasattr(config, "image_size")
    if not architectures and model_type in auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return "classification"
    if image:
        return "encoder" if bare else _other(architectures)
    return ""


def _other(architectures: list[str]) -> str:
    """ "other:object detection" for ["DetrForObjectDetection"]: the task after "For", in words."""
    task = architectures[0].split("For", 1)[-1]
    return "other:" + re.sub(r"(?<!^)(?=[A-Z])", " ", task).lower()


def _what_it_is(config: Any) -> str:
    """ "a bert text model", "a wav2vec2 audio model", "a t5 model"."""
    from transformers.models.auto import modeling_auto as auto

    model_type = getattr(config, "model_type", "") or "transformers"
    text = (
        "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    )
    audio = ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_CTC_MAPPING_NAMES")  # fmt: skip
    if any(model_type in getattr(auto, table, {}) for table in audio):
        return f"a {model_type} audio model"
    if any(model_type in getattr(auto, table, {}) for table in text):
        return f"a {model_type} text model"
    return f"a {model_type} model"


def load_hub_model(
    name: str,
    weights: str = "default",
    seed: int = 0,
    progress: ProgressCallback | None = None,
    cancelled: CancelCheck | None = None,
) -> Any:
    """Open ``hf:ORG/NAME``: its pretrained weights (``default``, fetched when not cached) or random weights built
    from its config (``none``, after ``torch.manual_seed(seed)``). Returns a ``LoadedModel``."""
    from hookscope.core.models.loaded import LoadedModel

    check_hub_name(name)
    if weights not in ("default", "none"):
        raise HubError(
            f"A model from the Hugging Face Hub takes no weights file ('{weights}')", remedy=Remedy.HUB_WEIGHTS
        )
    snapshot, offline = _fetch(name, weights, progress, cancelled, 30.0, None, _image_model_vet(name))
    _image_model_vet(name)(snapshot)  # also when it came from the cache, offline
    config = _config(name, snapshot)
    kind = _kind(config)
    if weights == "default" and _weights_in(snapshot) is None:
        raise HubError(f"{name} has no weights Hookscope can read (model.safetensors or pytorch_model.bin).")
    torch.manual_seed(seed)
    module, text_embedder = _build(name, kind, config, snapshot, weights == "default")
    module.eval()
    preprocess, notice = _preprocess(snapshot, config)
    notice = " ".join(n for n in (offline, notice) if n)
    categories = None
    if kind in ("classification", "segmentation"):
        id2label = getattr(config, "id2label", None) or {}
        categories = [str(id2label.get(i, id2label.get(str(i), f"class {i}"))) for i in range(len(id2label))] or None
    loaded = LoadedModel(
        name, module, weights, weights == "default", preprocess, categories, notice=notice, seed=seed, source="hub"
    )  # fmt: skip  (no model_file: sessions reopen it by name)
    task = {"classification": "classification", "segmentation": "segmentation"}.get(kind, "embedding")
    loaded.task = task
    loaded.text_embedder = text_embedder
    return loaded


def _image_model_vet(name: str) -> Callable[[Path], None]:
    def vet(snapshot: Path) -> None:
        config = _config(name, snapshot)
        kind = _kind(config)
        if not kind:
            raise HubError(f"{name} is {_what_it_is(config)}, not an image model.")
        if kind.startswith("other:"):
            raise HubError(f"{name} is a {config.model_type} model for {kind[len('other:'):]}, which Hookscope does "
                           "not open from the Hub (it opens image classifiers, semantic segmentation models, image "
                           "encoders and CLIP-like models).")  # fmt: skip

    return vet


def fetch_model(name: str, weights: str = "default", progress: ProgressCallback | None = None,
                cancelled: CancelCheck | None = None, timeout: float = 30.0) -> Path:  # fmt: skip
    """:func:`fetch_repo` for a model to open: one that is not an image model is refused once its config came,
    before its weights are downloaded."""
    check_hub_name(name)
    snapshot = _fetch(name, weights, progress, cancelled, timeout, None, _image_model_vet(name))[0]
    _image_model_vet(name)(snapshot)
    return snapshot


def _config(name: str, snapshot: Path) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(snapshot), local_files_only=True, trust_remote_code=False)
    except Exception as error:  # noqa: BLE001 - an unknown model type, custom code, a broken config
        try:
            model_type = json.loads((snapshot / "config.json").read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None
        if model_type:
            raise HubError(
                f"{name} is a '{model_type}' model that this transformers ({_version()}) does not know, "
                "or that needs its own code (trust_remote_code), which Hookscope does not run."
            ) from error
        raise HubError(f"{name}'s config.json could not be read ({_first_line(error)}).") from error


def _version() -> str:
    import transformers

    return transformers.__version__


def _build(name: str, kind: str, config: Any, snapshot: Path, pretrained: bool) -> tuple[nn.Module, Any]:
    import transformers

    auto = {
        "classification": transformers.AutoModelForImageClassification,
        "segmentation": transformers.AutoModelForSemanticSegmentation,
    }.get(kind, transformers.AutoModel)
    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" bar would break our lines
    try:
        if pretrained:
            model = auto.from_pretrained(str(snapshot), local_files_only=True, trust_remote_code=False)
        else:
            model = auto.from_config(config)
    except Exception as error:  # noqa: BLE001
        raise HubError(f"transformers could not build {name} ({_first_line(error)}).") from error
    if kind in ("classification", "segmentation"):
        return model, None
    if kind == "pair":
        vision = getattr(model, "vision_model", None)
        if vision is None or not hasattr(model, "get_text_features"):
            raise HubError(f"{name} pairs an image and a text model in a way Hookscope does not know.")
        tower = TowerEmbedding(vision, getattr(model, "visual_projection", None), model.config)
        return tower, _text_embedder(name, model, snapshot)
    return ImageEmbedding(model), None


def _text_embedder(name: str, model: Any, snapshot: Path) -> Callable[[str], torch.Tensor] | None:
    """``embed(prompt)``: the normalised (1, D) text embedding, tokenised with the repo's own tokenizer."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(snapshot), local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - no tokenizer in the repo: image targets still work
        return None

    def embed(prompt: str) -> torch.Tensor:
        tokens = tokenizer([prompt], padding="max_length" if "siglip" in model.config.model_type else True,
                           return_tensors="pt", truncation=True)  # fmt: skip
        with torch.no_grad():
            output = model.get_text_features(**{k: v for k, v in tokens.items() if k != "token_type_ids"})
        features = output if isinstance(output, torch.Tensor) else output.pooler_output
        return torch.nn.functional.normalize(features.float(), dim=-1)

    embed.__doc__ = f"The text embedding of a prompt in {name}'s space."
    return embed


def _preprocess(snapshot: Path, config: Any) -> tuple[Preprocess, str]:
    from transformers import AutoImageProcessor

    try:
        processor = AutoImageProcessor.from_pretrained(str(snapshot), local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - no processor config: a guess from the model's size, said plainly
        from hookscope.core.models.inputs import guess_preprocess

        preprocess, _ = guess_preprocess(nn.Module())
        size = getattr(config, "image_size", 224)
        size = int(size[-1] if isinstance(size, (list, tuple)) else size)
        return (Preprocess(resize=None, crop=size, mean=preprocess.mean, std=preprocess.std, squash=True),
                "The repo has no image processor: the input is resized to the model's size with ImageNet's mean "
                "and std, which may not be what it was trained with.")  # fmt: skip
    return hub_preprocess(processor, config), ""


# ========================================================================================== timm's weights ====
def timm_hub_file(arch: str) -> tuple[str, str] | None:
    """(repo id, file name) of timm's default pretrained weights for ``arch`` on the Hub, or None when timm
    takes them from elsewhere (a plain URL)."""
    import timm

    cfg: Any = timm.models.get_pretrained_cfg(arch)
    if cfg is None:
        return None
    cfg = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    hub_id = cfg.get("hf_hub_id")
    if not hub_id:
        return None
    return hub_id.split("@")[0], cfg.get("hf_hub_filename") or "model.safetensors"


def fetch_timm_weights(
    arch: str, progress: ProgressCallback | None = None, cancelled: CancelCheck | None = None, timeout: float = 30.0
) -> Path:
    """Fetch timm's pretrained weights for ``arch`` into the Hub cache, where timm (and ``_timm_cached_weights``)
    look for them; progress, cancel, resume and checksums as for ``hf:`` models."""
    where = timm_hub_file(arch)
    if where is None:
        raise HubError(f"timm takes the weights of {arch} from an address outside the Hugging Face Hub; "
                       "timm.create_model(..., pretrained=True) fetches them.")  # fmt: skip
    repo, filename = where
    try:
        snapshot = fetch_repo(repo, "default", progress, cancelled, timeout, files=[filename])
    except HubError as error:
        if filename == "model.safetensors" and "has no model.safetensors" in str(error):
            snapshot = fetch_repo(repo, "default", progress, cancelled, timeout, files=["pytorch_model.bin"])
            return snapshot / "pytorch_model.bin"
        raise
    return snapshot / filename
