"""Sessions: everything needed to see again exactly what was on screen, in one JSON file.

A session names the model (catalogue name, or a model file with its SHA-256), the weights, the device, the
preprocessing, the ticked modules with their hook kinds, the channel edits, the image(s), the gradient target,
the colormap and scaling, plus a free ``ui`` dict for window state. File paths are stored twice, absolute and
relative to the session file, and resolved relative first, so a folder moved together with its session still
opens. Opening a session never fails on a moved or changed file: each such problem becomes one readable line and
the rest is restored; only a file that is not a session at all raises.

Nothing here prints; the command line and the window show the problem lines their own way.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hookscope.core.common.errors import HookscopeError, ImageError, RunError
from hookscope.core.common.vocabulary import KINDS, kind_of, word_of
from hookscope.core.engine.target_words import Objective, Target, parse_target, target_value
from hookscope.core.models.files import file_sha256

if TYPE_CHECKING:  # heavy imports (torch) only where a session is actually run
    from collections.abc import Mapping

    from torch import nn

    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.tree import ModelSurvey
    from hookscope.core.models.images import Preprocess
    from hookscope.core.models.loaded import LoadedModel
    from hookscope.core.pictures.panels import PanelSettings

SESSION_VERSION = 1
SESSION_FORMAT = "hookscope-session"
SESSION_SUFFIX = ".hookscope.json"
KNOWN_KINDS = KINDS
KNOWN_SCALINGS = ("channel", "shared")


@dataclass
class Session:
    """What the window (or ``hookscope export``) was looking at. Paths are plain strings, as resolved on load."""

    version: int = SESSION_VERSION
    # name, weights ("none", "default" or a weights file path), seed; for a model file also source, path,
    # sha256, and arch (a state_dict) or factory (model.py:build); see model_entry
    model: dict[str, Any] = field(default_factory=lambda: {"name": "resnet18", "weights": "none", "seed": 0})
    device: str = "cpu"
    preprocessing: dict[str, Any] | None = None  # Preprocess.describe(); None: the model's default
    hooks: list[tuple[str, str]] = field(default_factory=list)  # (module path, hook kind), in tick order
    edits: list[str] = field(default_factory=list)  # edit specs, "zero:layer4.1.conv2:3,5"; "#SPEC" when off
    images: list[str] = field(default_factory=list)  # image A, then optionally image B
    target: Objective = Objective("top1")  # read from its words where the session comes in (``load_session``)
    colormap: str = "viridis"
    scaling: str = "channel"
    ui: dict[str, Any] = field(default_factory=dict)  # window state, opaque to the engine
    # What window features add (key -> JSON value, e.g. "scan": the scan saved beside the session); opaque here.
    parts: dict[str, Any] = field(default_factory=dict)
    # Filled by load_session, never saved: the folder the session file is in (parts' files are relative to it).
    folder: str = field(default="", compare=False)
    # Filled by load_session, never saved: files the session names that were not found here.
    missing: list[str] = field(default_factory=list, compare=False)
    # Filled by load_session, never saved: images found here that are not readable images (/etc/passwd, a 3 GB file
    # of zeros); listed as problems, left out of found_images.
    unreadable: list[str] = field(default_factory=list, compare=False)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The hook kinds in use, in the engine's order (what an export writes)."""
        used = {kind for _, kind in self.hooks}
        return tuple(kind for kind in KNOWN_KINDS if kind in used)

    def found_images(self) -> list[str]:
        """The session's images that exist here and are images (a moved or unreadable one is left out; its problem
        line says so)."""
        return [image for image in self.images if image not in self.missing and image not in self.unreadable]

    def blocking_problem(self) -> str | None:
        """Why the session cannot be run at all (its model or weights file is missing), or None."""
        path = self.model.get("path")
        if path and path in self.missing:
            return f"Model file '{path}' was not found (it may have moved); the session cannot run without it."
        weights = self.model.get("weights")
        if _is_file_weights(weights) and weights in self.missing:
            return f"Weights file '{weights}' was not found (it may have moved); the session cannot run without it."
        return None


def _is_file_weights(weights: object) -> bool:
    return isinstance(weights, str) and weights not in ("none", "default", "")


# ---- building a session from what is loaded ----------------------------------------------------------------
def model_entry(loaded: LoadedModel, sha256: str | None = None) -> dict[str, Any]:
    """The session's ``model`` dict for a loaded model.

    Catalogue models: name, weights ("none", "default" or a state_dict file) and seed. Models opened from a file
    add source ("state_dict", "pickle", "python"), path (the file), factory (for ``model.py:build``), arch (for a
    state_dict) and sha256 (pass the hash taken when the file was opened, so a later change is still caught);
    their weights are "none" unless a separate weights file was loaded into them.
    """
    entry: dict[str, Any] = {"name": loaded.name, "weights": loaded.weights, "seed": loaded.seed}
    model_file = getattr(loaded, "model_file", "")
    if model_file:
        from hookscope.core.models.files import split_factory

        file, factory = split_factory(model_file)
        entry["source"] = getattr(loaded, "source", "")
        entry["path"] = os.path.abspath(file)
        if factory:
            entry["factory"] = factory
        if entry["source"] == "state_dict":
            entry["arch"] = loaded.name
        if entry["source"] == "state_dict" or os.path.abspath(str(loaded.weights)) == entry["path"]:
            entry["weights"] = "none"  # the weights are the model file itself
        sha256 = sha256 or getattr(loaded, "model_sha256", "")
        entry["sha256"] = sha256 or (file_sha256(file) if file.is_file() else None)
    if _is_file_weights(entry["weights"]):
        entry["weights"] = os.path.abspath(entry["weights"])
    return entry


def session_from(
    loaded: LoadedModel,
    hooks: Iterable[Any],
    images: Sequence[str | os.PathLike],
    *,
    device: str = "cpu",
    target: Target = "top1",
    edits: Iterable[str] = (),
    colormap: str = "viridis",
    scaling: str = "channel",
    ui: dict[str, Any] | None = None,
    model_sha256: str | None = None,
) -> Session:
    """A session for the given model, hooks and images (the window calls this for File > Save session).

    ``hooks`` are (path, kind) pairs or ``registry.handles()``'s HookInfos, ``edits`` spec strings (``edit_specs``),
    ``model_sha256`` the model file's hash taken when it was opened (computed now when not given).
    """
    return Session(
        model=model_entry(loaded, model_sha256),
        device=device,
        preprocessing=loaded.preprocess.describe(),
        hooks=[(h.path, h.kind) if hasattr(h, "path") else (str(h[0]), str(h[1])) for h in hooks],
        edits=[str(edit) for edit in edits],
        images=[os.path.abspath(os.fspath(image)) for image in images],
        target=parse_target(target),
        colormap=colormap,
        scaling=scaling,
        ui=dict(ui or {}),
    )


# ---- saving ------------------------------------------------------------------------------------------------
def _file_ref(path: str, base: Path, sha256: str | None = None) -> dict[str, Any]:
    absolute = os.path.abspath(path)
    try:
        relative: str | None = Path(os.path.relpath(absolute, base)).as_posix()
    except ValueError:  # another drive on Windows: no relative path
        relative = None
    if sha256 is None and os.path.isfile(absolute):
        sha256 = file_sha256(absolute)
    return {"path": absolute, "relative": relative, "sha256": sha256}


def session_document(session: Session, path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object ``save_session`` writes for ``session`` at ``path``."""
    base = Path(os.path.abspath(path)).parent
    model = {k: v for k, v in session.model.items() if k not in ("path", "sha256", "weights", "weights_sha256")}
    if session.model.get("path"):
        model["file"] = _file_ref(session.model["path"], base, session.model.get("sha256"))
    weights = session.model.get("weights", "none")
    model["weights"] = (
        _file_ref(weights, base, session.model.get("weights_sha256")) if _is_file_weights(weights) else weights
    )
    return {
        "format": SESSION_FORMAT,
        "version": session.version,
        "model": model,
        "device": session.device,
        "preprocessing": session.preprocessing,
        "hooks": [[p, word_of(k)] for p, k in session.hooks],  # the words: act, grad...
        "edits": list(session.edits),
        "images": [_file_ref(image, base) for image in session.images],
        "target": target_value(session.target),
        "colormap": session.colormap,
        "scaling": session.scaling,
        "ui": session.ui,
        **({"parts": session.parts} if session.parts else {}),
    }


def save_session(session: Session, path: str | os.PathLike) -> None:
    """Write ``session`` as JSON, atomically (a crash mid-save leaves the previous file intact)."""
    target = Path(path)
    try:
        document = json.dumps(session_document(session, target), indent=2)
    except (TypeError, ValueError) as error:
        raise HookscopeError(
            f"The session holds a value that cannot be saved as JSON ({error}).", path=str(target)
        ) from error
    except OSError as error:
        raise HookscopeError(
            f"Cannot read a file the session names: {error.strerror or error}.", path=error.filename
        ) from error
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".session-", suffix=".tmp", dir=target.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(document + "\n")
        os.replace(temporary, target)
    except OSError as error:
        raise HookscopeError(
            f"Cannot write '{target}': {error.strerror or type(error).__name__}.", path=str(target)
        ) from error


# ---- loading -----------------------------------------------------------------------------------------------
def _resolve(ref: Any, base: Path) -> tuple[str, str | None, bool]:
    """(path to use, saved hash, found): the relative path first, so a folder moved as a whole still works."""
    if isinstance(ref, str):
        ref = {"path": ref}
    if not isinstance(ref, dict) or not isinstance(ref.get("path"), str):
        raise ValueError("a file entry needs a 'path'")
    candidates = []
    if isinstance(ref.get("relative"), str):
        candidates.append(os.path.normpath(base / ref["relative"]))
    candidates.append(ref["path"])
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.abspath(candidate), ref.get("sha256"), True
    return ref["path"], ref.get("sha256"), False


def _changed(path: str, saved: str | None) -> bool:
    return bool(saved) and file_sha256(path) != saved


def _target(saved: object) -> Objective:
    """The saved gradient target (``target_value``'s forms), parsed here where it comes in; whether it fits the
    model the window checks when it sets it. Any other value raises (a boolean, NaN or infinity: a damaged
    session)."""
    if isinstance(saved, bool):
        raise ValueError(f"{saved!r} is no gradient target")
    if isinstance(saved, str) and saved.strip():
        try:
            return parse_target(saved)
        except RunError as error:  # words that are no target: a damaged session, said as one (load_session)
            raise ValueError(str(error)) from None
    return Objective("class", index=int(saved))  # type: ignore[call-overload]


def _entries(data: dict[str, Any], key: str, problems: list[str]) -> list[Any]:
    """The list under ``key`` (empty when absent); anything else there is one problem line."""
    value = data.get(key, [])
    if isinstance(value, list):
        return value
    problems.append(f"The session's {key} are not a list; none was restored.")
    return []


def load_session(path: str | os.PathLike) -> tuple[Session, list[str]]:
    """Read a session; return it with one readable line per problem (moved or changed files, unknown values).

    Raises HookscopeError (one line) only when the file is missing or is not a Hookscope session.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HookscopeError(f"Session file '{source}' does not exist.", path=str(source)) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise HookscopeError(f"Cannot read session file '{source}': {reason}.", path=str(source)) from error
    try:
        data = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise HookscopeError(
            f"'{source}' is not a Hookscope session: invalid JSON at line {error.lineno}, column {error.colno}.",
            path=str(source),
        ) from None
    except (ValueError, RecursionError) as error:  # 1e999, NaN, a 5000-digit number; nesting deeper than Python's stack
        reason = "it is nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise HookscopeError(f"'{source}' is a damaged Hookscope session ({reason}).", path=str(source)) from None
    if not isinstance(data, dict) or data.get("format") != SESSION_FORMAT or not isinstance(data.get("model"), dict):
        raise HookscopeError(f"'{source}' is not a Hookscope session file.", path=str(source))
    try:
        return _session_of(data, Path(os.path.abspath(source)).parent)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError) as error:
        reason = "it is nested too deeply" if isinstance(error, RecursionError) else _short(error)
        raise HookscopeError(f"'{source}' is a damaged Hookscope session ({reason}).", path=str(source)) from None


def _finite_float(text: str) -> float:
    """JSON numbers as floats, refusing those a float cannot hold (1e999 would become inf)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {_short(text)} is out of range")
    return value


def _no_constant(name: str) -> float:
    """NaN, Infinity and -Infinity are not JSON; Python's parser accepts them, a session must not."""
    raise ValueError(f"{name} is not a number a session can hold")


def _short(value: object, limit: int = 80) -> str:
    """A value or message cut to ``limit`` characters: the line about a damaged file must stay one short line."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seed(value: object) -> int:
    seed = int(value)  # type: ignore[call-overload]
    if not -(2**63) <= seed < 2**64:  # what torch.manual_seed takes
        raise ValueError(f"the seed {_short(seed, 24)} is out of range")
    return seed


# long because: a session file's fields read in order, each a few lines that keep what is valid and add one problem line
# for what is not
def _session_of(data: dict[str, Any], base: Path) -> tuple[Session, list[str]]:
    problems: list[str] = []
    session = Session()
    version = int(data.get("version", SESSION_VERSION))
    if version > SESSION_VERSION:
        problems.append(
            f"This session was saved by a newer Hookscope (format {version}); settings this version does not know were ignored."
        )

    saved_model = data["model"]
    model = {k: v for k, v in saved_model.items() if k not in ("file", "weights")}
    model["seed"] = _seed(model.get("seed", 0))
    if saved_model.get("file") is not None:
        found, sha256, ok = _resolve(saved_model["file"], base)
        model["path"] = found
        if sha256:
            model["sha256"] = sha256
        if not ok:
            session.missing.append(found)
            problems.append(
                f"Model file '{found}' was not found (it may have moved); the session cannot run without it."
            )
        elif _changed(found, sha256):
            problems.append(f"Model file '{found}' has changed since the session was saved (its SHA-256 differs).")
    weights = saved_model.get("weights", "none")
    if isinstance(weights, dict) or _is_file_weights(weights):
        found, sha256, ok = _resolve(weights, base)
        model["weights"] = found
        if sha256:
            model["weights_sha256"] = sha256
        if not ok:
            session.missing.append(found)
            problems.append(
                f"Weights file '{found}' was not found (it may have moved); the session cannot run without it."
            )
        elif _changed(found, sha256):
            problems.append(f"Weights file '{found}' has changed since the session was saved (its SHA-256 differs).")
    else:
        model["weights"] = str(weights)
    session.model = model

    session.device = str(data.get("device", "cpu"))
    preprocessing = data.get("preprocessing")
    session.preprocessing = dict(preprocessing) if isinstance(preprocessing, dict) else None

    # Each hooks, edits and images entry on its own: a malformed one is a problem line, the others are restored.
    for entry in _entries(data, "hooks", problems):
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(v, str) for v in entry)):
            problems.append(f"Hooks entry {_short(repr(entry))} is not [module, kind]; it was not restored.")
            continue
        module, word = entry
        kind = kind_of(word)  # a word, or the kind itself as sessions saved before one vocabulary have it
        if kind is not None:
            session.hooks.append((module, kind))
        else:
            problems.append(f"Hook kind '{word}' on '{module}' is unknown; that hook was not restored.")
    for entry in _entries(data, "edits", problems):
        if isinstance(entry, str):
            session.edits.append(entry)
        else:
            problems.append(f"Edits entry {_short(repr(entry))} is not an edit spec; it was not restored.")

    for ref in _entries(data, "images", problems):
        try:
            found, sha256, ok = _resolve(ref, base)
        except ValueError:
            problems.append(f"Images entry {_short(repr(ref))} is not a file entry; it was not restored.")
            continue
        session.images.append(found)
        if not ok:
            session.missing.append(found)
            problems.append(f"Image '{found}' was not found (it may have moved); the rest of the session was restored.")
            continue
        from hookscope.core.models.images import (
            probe_image,  # Pillow and torchvision: only once there is an image to check
        )

        try:
            probe_image(found)  # the header only: a 3 GB file of zeros is refused after its first bytes
        except ImageError as error:
            session.unreadable.append(found)
            problems.append(f"{error} The rest of the session was restored.")
            continue
        if _changed(found, sha256):  # hashed only once known to be an image
            problems.append(f"Image '{found}' has changed since the session was saved (its SHA-256 differs).")

    session.target = _target(data.get("target", "top1"))
    from hookscope.core.common.resources import COLORMAPS  # numpy only: cheap

    colormap = str(data.get("colormap", "viridis"))
    if colormap in COLORMAPS:
        session.colormap = colormap
    else:
        problems.append(f"Colormap '{colormap}' is unknown; viridis is used instead.")
    scaling = str(data.get("scaling", "channel"))
    if scaling in KNOWN_SCALINGS:
        session.scaling = scaling
    else:
        problems.append(f"Scaling '{scaling}' is unknown; per-channel scaling is used instead.")
    ui = data.get("ui", {})
    session.ui = dict(ui) if isinstance(ui, dict) else {}
    parts = data.get("parts", {})
    session.parts = dict(parts) if isinstance(parts, dict) else {}
    session.folder = str(base)
    return session, problems


# ---- the panels' settings ------------------------------------------------------------------------------------
# A session's ``ui`` keeps how the panels are drawn: the defaults for panels made later ("sort", "view"; the
# colormap and scaling are the session's own fields) and every panel's settings under "panels", one list
# ``[path, word, colormap, scaling, sort, view]`` each (sessions saved before the view was kept have five; before one
# vocabulary, the kind where the word is: ``forward`` for ``act``).


def panels_ui(default: PanelSettings, panels: Mapping[tuple[str, str], PanelSettings]) -> dict[str, Any]:
    """The ``ui`` entries for the panels' settings: each panel's colormap, scaling, channel order and its A / B /
    A − B view, whether or not they differ from the defaults."""
    return {
        "sort": default.sort,
        "view": default.view,
        "panels": [
            [path, word_of(kind), s.colormap, s.scaling, s.sort, s.view] for (path, kind), s in sorted(panels.items())
        ],
    }


def session_panel_settings(
    session: Session,
) -> tuple[PanelSettings, dict[tuple[str, str], PanelSettings], list[str]]:
    """(default settings, each panel's settings, problem lines) as the session saved them (``panels_ui``).

    A panel entry that is not valid is left out with one problem line; the rest is restored.
    """
    from hookscope.core.pictures.panels import PanelSettings

    problems: list[str] = []
    ui = session.ui
    try:
        default = PanelSettings(
            session.colormap, session.scaling, str(ui.get("sort", "none")), str(ui.get("view", "A"))
        )
    except ValueError as error:
        default = PanelSettings(session.colormap, session.scaling)
        problems.append(f"The session's default panel settings are not valid ({error}); the defaults are used.")
    panels: dict[tuple[str, str], PanelSettings] = {}
    entries = ui.get("panels", [])
    for entry in entries if isinstance(entries, list) else []:
        try:
            values = [str(value) for value in entry]
            if len(values) not in (5, 6):
                raise ValueError(f"{len(values)} values instead of 6")
            path, word, *settings = values
            panels[(path, kind_of(word) or word)] = PanelSettings(*settings)
        except (TypeError, ValueError) as error:
            problems.append(f"The settings of panel {entry!r} are not valid ({error}); the defaults are used.")
    return default, panels, problems


# ---- running a session -------------------------------------------------------------------------------------
def register_session_hooks(registry: HookRegistry, session: Session) -> list[str]:
    """Register the session's hooks; a module the model does not have is one problem line, not an error."""
    problems = []
    known = set(registry.paths)
    for path, kind in session.hooks:
        if path not in known:
            problems.append(f"The model has no module '{path}'; its {kind} hook was not restored.")
            continue
        registry.add(path, kind)  # type: ignore[arg-type]
    return problems


DISABLED_EDIT = "#"  # an edit kept in the session but switched off: "#zero:layer1:3"


def edit_specs(registry: HookRegistry) -> list[str]:
    """The registry's edits as session strings, in the order added; a disabled edit is prefixed with '#'."""
    return [("" if edit.enabled else DISABLED_EDIT) + edit.spec for _, edit, _ in registry.edits()]


def session_survey(module: nn.Module, session: Session, preprocess: Preprocess) -> ModelSurvey | None:
    """A survey of ``module`` on a blank input of ``preprocess``'s size, for ``registry.adopt_survey`` before
    :func:`apply_session_edits`: with it the registry checks each edit's channels against the module's output, so an
    edit whose channel does not exist is a problem line instead of a failed run.

    Runs the model once (never on a GUI thread: the window does this in the worker that loads the session's model).
    None when no edit needs the check (channels, or a full backward hook that an in-place operation would break),
    or when the model cannot run on a blank input (the real run will say why).
    """
    import torch

    from hookscope.core.engine.interventions import parse_edit
    from hookscope.core.engine.tree import survey

    def needs_survey(text: str) -> bool:
        try:
            edit = parse_edit(text.removeprefix(DISABLED_EDIT))
        except HookscopeError:
            return False  # a bad spec is a problem line of its own
        return bool(edit.channels) or edit.kind == "scale-grad-input"

    if not any(needs_survey(text) for text in session.edits):
        return None

    channels = 1 if preprocess.channels == 1 else 3
    blank = torch.zeros(1, channels, preprocess.crop, preprocess.crop)
    device = next(module.parameters(), torch.empty(0)).device
    try:
        return survey(module, blank.to(device))
    except Exception:  # noqa: BLE001 - the model's own failure: reported by the run that follows
        return None


def apply_session_edits(
    registry: HookRegistry, session: Session, preprocess: Any = None
) -> tuple[list[str], dict[str, Any]]:
    """Add the session's edits to ``registry``; return (problem lines, the mix edits' other images as tensors
    for ``capture_run(..., others=...)``). An edit that cannot be restored is a problem line, not an error."""
    if not session.edits:
        return [], {}
    from hookscope.core.engine.interventions import other_images, parse_edit

    problems: list[str] = []
    others: dict[str, Any] = {}
    for text in session.edits:
        enabled = not text.startswith(DISABLED_EDIT)
        spec = text[len(DISABLED_EDIT) :] if not enabled else text
        try:
            edit = parse_edit(spec)
            if not enabled:
                edit = replace(edit, enabled=False)
            if edit.other_image not in others:  # read each other image once (only enabled mix edits read one)
                others.update(other_images([edit], preprocess))
            registry.add_edit(edit)
        except HookscopeError as error:
            problems.append(f"Edit '{spec}' was not restored: {error}")
    return problems, others
