"""Reading a weights file without running its code: state_dicts from .pt/.pth/.bin (``torch.load(weights_only=True)``)
and .safetensors files, the containers around them unwrapped, loaded into a module strictly or not, and a refusal in
plain words naming what a pickle would have run. A leaf: the catalogue and the model files both read through it."""

from __future__ import annotations

import importlib.util
import io
import os
import pickletools
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import torch
from torch import nn

from hookscope.core.common.errors import ModelError, Remedy


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


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
    try:
        data = load_weights_only(path)
    except Exception as error:
        raise weights_refusal(path, error) from error
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
        problems.append(f"{len(missing)} missing key(s): {some_of(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {some_of(unexpected)}")
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatch(es): {some_of(mismatched)}")
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


def some_of(items: list[str], limit: int = 3) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def pickled_globals(path: Path) -> list[str] | None:
    """The Python objects (``module.name``) a pickle-based file would import when unpickled, found by reading
    its opcodes; nothing is unpickled. None when the file is not a pickle (nor a torch.save archive)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                pickles = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
                if not pickles:
                    return None
                return _scan_pickles(io.BytesIO(archive.read(pickles[0])), count=1)
        with open(path, "rb") as handle:
            # torch.save's legacy format: magic number, protocol, system info, then the object.
            return _scan_pickles(handle, count=4)
    except (OSError, zipfile.BadZipFile):
        return None


_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def _scan_pickles(stream: IO[bytes], count: int) -> list[str] | None:
    names: list[str] = []
    for index in range(count):
        try:
            ops = list(pickletools.genops(stream))
        except Exception:  # not a pickle (random bytes, text), or the end of the pickles
            if index == 0:
                return None
            break
        strings: list[str] = []
        memo: dict[int, str | None] = {}
        last: str | None = None
        for opcode, arg, _position in ops:
            name = opcode.name
            pushed: str | None = None
            if name in ("GLOBAL", "INST"):
                names.append(str(arg).replace(" ", "."))
            elif name in _STRING_OPS:
                pushed = arg.decode("latin-1") if isinstance(arg, bytes) else str(arg)
                strings.append(pushed)
            elif name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(f"{strings[-2]}.{strings[-1]}")
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg or 0)] = last
                pushed = last
            elif name == "MEMOIZE":
                memo[len(memo)] = last
                pushed = last
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                pushed = memo.get(int(arg or 0))
                if pushed is not None:
                    strings.append(pushed)
            last = pushed
    return list(dict.fromkeys(names))


# Names every torch.save file uses to rebuild tensors: not worth showing the user.
def interesting_globals(names: list[str]) -> list[str]:
    return [
        n
        for n in names
        if not n.startswith(("torch._utils.", "collections.OrderedDict", "torch._tensor."))
        and not n.endswith("Storage")
        and n not in ("torch.Size", "torch.device", "torch.dtype", "builtins.set", "__builtin__.set", "_codecs.encode")
    ]


def load_weights_only(path: str | os.PathLike) -> object:
    """``torch.load(path, weights_only=True)`` on the CPU, quietly: PyTorch warns about files it is about to refuse
    ("Detected pickle protocol 4 ..."), and Hookscope says what it makes of the file in its own one line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def weights_refusal(path: str | os.PathLike, error: BaseException) -> ModelError:
    """Why a file given as weights was not loaded, in our words.

    PyTorch's own message advises re-running ``torch.load`` with ``weights_only=False``; that is exactly what must
    not be done with a file from someone else, so it is never quoted. The explicit way to run a file's code is to
    open it as a model, trusted.
    """
    objects = pickled_globals(Path(path))
    shown = interesting_globals(objects or [])
    if shown:
        return ModelError(
            f"'{path}' is not a plain weights file: it holds pickled Python objects ({some_of(shown)}), and loading it "
            "would run code from the file, so it was not loaded",
            path=str(path),
            remedy=Remedy.OPEN_AS_MODEL,
        )
    reason = ANSI_ESCAPE.sub("", first_line(error))
    if "weights_only" in reason or "Weights only load failed" in reason:
        reason = "PyTorch's safe loader cannot read it"
    return ModelError(
        f"'{path}' is not a weights file that can be loaded safely ({reason.rstrip('.')}).", path=str(path)
    )
