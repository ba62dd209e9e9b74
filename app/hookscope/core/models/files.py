"""Opening a model from a file the user chose, without running code from a file they have not said they trust.

What a file is decides what happens:

- a state_dict (``.pt``/``.pth``/``.bin`` through ``torch.load(weights_only=True)``, ``.safetensors`` through the
  safetensors package): loaded into a catalogue architecture the user names (``arch``); strictly, unless asked;
- a pickled ``nn.Module`` (or a checkpoint holding one): unpickling runs code named in the file, so it is opened
  only with ``trust=True``; without it, :class:`TrustRequired` says which Python objects the file would import,
  found by reading the pickle's opcodes (nothing is unpickled);
- ``model.py:build``: a Python file and the function in it that builds the model, imported only with ``trust``;
- TorchScript, ``torch.export`` programs and ONNX: recognised and refused with the reason (their forward is
  compiled, so Python hooks on their modules never fire) and what to open instead;
- a ``torch.compile``d model or a DataParallel wrapper: unwrapped to the original module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import torch
from torch import nn

from hookscope.core.common.errors import ModelError, Remedy
from hookscope.core.models.catalogue import check_model_name, load_model
from hookscope.core.models.inputs import guess_preprocess
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.models.state_dicts import (
    ANSI_ESCAPE,
    first_line,
    interesting_globals,
    is_safetensors_file,
    load_state_dict,
    load_state_dict_file,
    load_weights_only,
    pickled_globals,
    read_state_dict,
    some_of,
    state_dict_from,
)

MODEL_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".pkl", ".py")
_FACTORY = re.compile(r"^(?P<file>.+\.py):(?P<factory>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)$")
# Checkpoint keys under which training scripts keep a whole model object.
_MODULE_KEYS = ("model", "module", "net", "network", "model_ema", "ema")


class TrustRequired(ModelError):
    """Opening the file would run code from it; the caller may ask the user and retry with ``trust=True``."""

    def __init__(self, message: str, path: str, objects: tuple[str, ...] = ()) -> None:
        super().__init__(message, path=path, remedy=Remedy.TRUST)  # path: the file, or "model.py:build"
        self.objects = objects  # the Python objects a pickle would import ("" for a Python file)


class ArchitectureRequired(ModelError):
    """The file holds only weights (a state_dict): the caller must name the architecture they belong to."""

    def __init__(self, message: str, path: str, keys: int) -> None:
        super().__init__(message, path=path, remedy=Remedy.NAME_ARCHITECTURE)
        self.keys = keys


def split_factory(spec: str | os.PathLike) -> tuple[Path, str | None]:
    """``"path/to/model.py:build"`` -> (Path("path/to/model.py"), "build"); any other path -> (path, None)."""
    text = os.fspath(spec)
    match = _FACTORY.match(text)
    if match and not Path(text).exists():
        return Path(match["file"]), match["factory"]
    return Path(text), None


def file_kind(path: Path) -> str:
    """What a model file is, read from its first bytes and its archive index, never by running it.

    One of ``python``, ``torchscript``, ``exported``, ``onnx``, ``safetensors``, ``torch`` (a ``torch.save``
    file: state_dict, checkpoint or pickled module; ``torch.load(weights_only=True)`` tells which) and
    ``unknown``.
    """
    suffix = path.suffix.lower()
    if suffix == ".py":
        return "python"
    if suffix == ".onnx":
        return "onnx"
    if suffix == ".safetensors" or is_safetensors_file(path):
        return "safetensors"
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            return "unknown"
        if any(n.endswith(("/constants.pkl", "/bytecode.pkl")) or "/code/__torch__" in n for n in names):
            return "torchscript"
        if any(n.endswith("/archive_format") or n.endswith("/models/model.json") for n in names):
            return "exported"
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        return "unknown"
    return "torch" if pickled_globals(path) is not None else "unknown"


# long because: one dispatch over the kinds of model file, a few lines each, read as a table of what each kind does
def open_model_file(
    path: str | os.PathLike,
    arch: str | None = None,
    trust: bool = False,
    strict: bool = True,
    seed: int = 0,
    weights: str | os.PathLike | None = None,
) -> LoadedModel:
    """Open a model file the user chose (see the module docstring for what each kind of file does).

    ``path`` is a weights or model file, or ``model.py:build``. ``arch`` names the catalogue architecture a
    state_dict belongs to. ``trust`` allows unpickling a whole model or importing a Python file. ``strict``
    False loads the fitting part of a state_dict and says what was left out. ``seed`` seeds the initial
    weights. ``weights`` is a state_dict to load into a model built by a Python factory (or a pickled one).

    Raises :class:`TrustRequired`, :class:`ArchitectureRequired` or :class:`ModelError`, each one line.
    """
    file, factory = split_factory(path)
    if factory is not None:
        return _open_python(file, factory, trust, strict, seed, weights)
    if not file.exists():
        raise ModelError(f"Model file '{file}' does not exist.", path=str(file))
    if file.is_dir():
        raise ModelError(f"'{file}' is a folder, not a model file.", path=str(file))
    kind = file_kind(file)
    if kind == "python":
        raise ModelError(
            f"'{file}' is a Python file: name the function in it that builds the model, as in {file}:build.",
            path=str(file),
        )
    if kind == "torchscript":
        raise ModelError(
            f"'{file}' is a TorchScript file: its forward is compiled, so Python hooks on its modules would never fire",
            path=str(file),
            remedy=Remedy.MODEL_CODE,
        )
    if kind == "exported":
        raise ModelError(
            f"'{file}' is a torch.export program: a traced graph without the model's Python modules, so there is "
            "nothing for module hooks to attach to",
            path=str(file),
            remedy=Remedy.MODEL_CODE,
        )
    if kind == "onnx":
        raise ModelError(
            f"'{file}' is an ONNX file, which PyTorch cannot run with hooks", path=str(file), remedy=Remedy.MODEL_CODE
        )
    if kind == "safetensors":
        return _open_state_dict(file, read_state_dict(file), arch, strict, seed, weights)
    if kind == "unknown":
        raise ModelError(
            f"'{file}' is not a PyTorch model or weights file (not a torch.save file, safetensors, TorchScript "
            "or Python file).",
            path=str(file),
        )

    try:
        data = load_weights_only(file)
    except Exception as error:
        objects = pickled_globals(file)
        if objects is None:
            raise ModelError(
                f"'{file}' could not be read as a PyTorch file ({ANSI_ESCAPE.sub('', first_line(error))}).",
                path=str(file),
            ) from error
        shown = interesting_globals(objects) or objects
        if not trust:
            raise TrustRequired(
                f"'{file}' holds pickled Python objects ({some_of(shown) or 'unknown'}) and opening it would run "
                "code from the file",
                str(file),
                tuple(shown),
            ) from None
        data = _trusted_load(file)
    module = _module_in(data)
    if module is not None:
        return _from_module(module, file.stem, "pickle", str(file), arch, strict, seed, weights, pretrained=True)
    try:
        state = state_dict_from(data, file)
    except ModelError:
        raise ModelError(
            f"'{file}' holds neither a model nor a state_dict (it holds a {type(data).__name__}).",
            path=str(file),
        ) from None
    return _open_state_dict(file, state, arch, strict, seed, weights)


def _open_state_dict(
    file: Path, state: Mapping[str, torch.Tensor], arch: str | None, strict: bool, seed: int, weights: object
) -> LoadedModel:
    if weights is not None:
        raise ModelError(f"'{file}' is itself a state_dict", path=str(file), remedy=Remedy.STATE_DICT_ALONE)
    if not arch:
        raise ArchitectureRequired(
            f"'{file}' is a state_dict ({len(state)} tensors, no architecture)",
            str(file),
            len(state),
        )
    check_model_name(arch)
    loaded = load_model(arch, "none", seed)
    loaded.notice = load_state_dict(loaded.module, state, f"Weights file '{file}'", arch, strict=strict, path=str(file))
    loaded.weights = str(file)
    loaded.pretrained = True
    loaded.categories = None  # the file's classes are not known
    loaded.source = "state_dict"
    loaded.model_file = str(file)
    return loaded


def _trusted_load(file: Path) -> object:
    """Unpickle a file the user trusts; failures in their words (a class that is not importable here...)."""
    try:
        return torch.load(file, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as error:
        raise ModelError(
            f"'{file}' needs the Python module '{error.name}', which is not installed here",
            path=str(file),
            remedy=Remedy.INSTALL_OR_STATE_DICT,
        ) from error
    except SystemExit as error:  # code in the pickle called sys.exit(): not an exit of Hookscope
        raise ModelError(f"Unpickling '{file}' raised SystemExit({error.code!r}).", path=str(file)) from error
    except AttributeError as error:
        match = re.search(r"Can't get attribute '([^']+)' on <module '([^']+)'", str(error))
        if match:
            cls, module = match.groups()
            if module.endswith("__main__"):  # under "python -m tool" the running script reports as "tool.__main__"
                module = "__main__"
            raise ModelError(
                f"'{file}' needs the class {cls} from {module} (the script that saved it), which cannot be imported "
                "here",
                path=str(file),
                remedy=Remedy.FACTORY,
            ) from error
        raise ModelError(f"'{file}' could not be unpickled ({first_line(error)}).", path=str(file)) from error
    except Exception as error:
        raise ModelError(
            f"'{file}' could not be unpickled ({type(error).__name__}: {first_line(error)}).", path=str(file)
        ) from error


def _module_in(data: object) -> nn.Module | None:
    if isinstance(data, nn.Module):
        return data
    if isinstance(data, Mapping):
        for key in _MODULE_KEYS:
            if isinstance(data.get(key), nn.Module):
                return data[key]
    return None


def unwrap_module(module: nn.Module) -> tuple[nn.Module, list[str]]:
    """The original module inside ``torch.compile`` (``_orig_mod``) and DataParallel/DDP (``.module``)
    wrappers, with a note per wrapper removed. A TorchScript module is refused (its hooks never fire)."""
    notes: list[str] = []
    for _ in range(16):
        if type(module).__name__ == "OptimizedModule" and isinstance(getattr(module, "_orig_mod", None), nn.Module):
            module = cast(nn.Module, module._orig_mod)  # checked just above
            notes.append("torch.compile")
        elif isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            notes.append(type(module).__name__)
            module = module.module
        else:
            break
    if isinstance(module, torch.jit.ScriptModule):
        raise ModelError(
            "The model is a TorchScript module: its forward is compiled, so Python hooks on its modules would "
            "never fire",
            remedy=Remedy.MODEL_CODE,
        )
    return module, notes


def _from_module(
    module: nn.Module,
    name: str,
    source: str,
    model_file: str,
    arch: str | None,
    strict: bool,
    seed: int,
    weights: str | os.PathLike | None,
    pretrained: bool,
) -> LoadedModel:
    try:
        module, unwrapped = unwrap_module(module)
    except ModelError as error:
        error.path = str(split_factory(model_file)[0])
        raise
    module = module.cpu().eval()
    notices = []
    if unwrapped:
        notices.append(
            f"Opened the original module inside the {' and '.join(dict.fromkeys(unwrapped))} wrapper, "
            "so that hooks fire on its submodules."
        )
    if arch:
        notices.append(f"The file holds a whole model, so its architecture ({arch}) was not needed and is ignored.")
    weights_text = model_file if source == "pickle" else "none"
    if weights is not None:
        fit = load_state_dict_file(module, Path(weights), name, strict=strict)
        if fit:
            notices.append(fit)
        weights_text, pretrained = str(weights), True
    preprocess, note = guess_preprocess(module)
    if note:
        notices.append(note)
    return LoadedModel(
        name=name,
        module=module,
        weights=weights_text,
        pretrained=pretrained,
        preprocess=preprocess,
        categories=None,
        notice=" ".join(notices),
        seed=seed,
        source=source,
        model_file=model_file,
    )


def _open_python(
    file: Path, factory: str, trust: bool, strict: bool, seed: int, weights: str | os.PathLike | None
) -> LoadedModel:
    spec_text = f"{file}:{factory}"
    if not file.is_file():
        raise ModelError(f"Python file '{file}' does not exist.", path=str(file))
    if not trust:
        raise TrustRequired(
            f"Opening {spec_text} runs the Python code in '{file}'",
            spec_text,
        )
    module_name = f"hookscope_model_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ModelError(f"'{file}' cannot be imported as a Python module.", path=str(file))
    code = importlib.util.module_from_spec(spec)
    folder = str(file.resolve().parent)
    sys.path.insert(0, folder)  # so that the file can import its neighbours
    sys.modules[module_name] = code
    try:
        spec.loader.exec_module(code)
    except SyntaxError as error:
        sys.modules.pop(module_name, None)
        raise ModelError(f"'{file}' has a syntax error on line {error.lineno}: {error.msg}.", path=str(file)) from error
    except (Exception, SystemExit) as error:
        sys.modules.pop(module_name, None)
        raise ModelError(
            f"Running '{file}' failed ({type(error).__name__}: {first_line(error)}).", path=str(file)
        ) from error
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    target: object = code
    for part in factory.split("."):
        if not hasattr(target, part):
            defined = sorted(n for n, v in vars(code).items() if callable(v) and not n.startswith("_"))
            listing = f"; it defines {some_of(defined, 6)}" if defined else ""
            raise ModelError(f"'{file}' has no '{factory}'{listing}.", path=str(file))
        target = getattr(target, part)
    torch.manual_seed(seed)
    if isinstance(target, nn.Module):
        result = target
    elif callable(target):
        try:
            result = target()
        except SystemExit as error:  # sys.exit() in the factory must not end the command line or the window
            raise ModelError(
                f"The model file '{file}' raised SystemExit({error.code!r}) while building the model in {factory}(); "
                "a factory must return the model, not exit.",
                path=str(file),
            ) from error
        except Exception as error:
            raise ModelError(
                f"Calling {factory}() from '{file}' failed ({type(error).__name__}: {first_line(error)}).",
                path=str(file),
            ) from error
    else:
        raise ModelError(
            f"'{factory}' in '{file}' is a {type(target).__name__}, not a function that builds a model.", path=str(file)
        )
    if not isinstance(result, nn.Module):
        raise ModelError(
            f"{factory}() in '{file}' returned a {type(result).__name__}, not a torch.nn.Module.", path=str(file)
        )
    return _from_module(
        result, f"{file.stem}:{factory}", "python", spec_text, None, strict, seed, weights, pretrained=False
    )


def file_sha256(path: str | os.PathLike) -> str:
    """The file's SHA-256 as hex, read in 1 MiB blocks (model files can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
