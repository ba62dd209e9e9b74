"""What every ``hookscope`` subcommand shares: the model options (``--model``, ``--weights``, ``--seed``,
``--device``, ``--model-file`` ...) and the argument types (hook kinds, ``--target``, counts), opening the model the
options name (``load_for_cli``, with a note while it builds and the Hub's download line), registering the hooks and
``--edit`` edits, and the one readable line an error becomes.

The command modules (export, scan, live, bench, download, teach) import from here; nothing here imports them.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hookscope.cli.progress import HubDownloadBar
from hookscope.core.common.errors import HookscopeError, write_problem
from hookscope.core.common.vocabulary import HOOK_WORDS, KINDS
from hookscope.system.termination import sigterm_raises

if TYPE_CHECKING:
    import torch

    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.interventions import Intervention
    from hookscope.core.models.loaded import LoadedModel
    from hookscope.core.models.source import ModelSource

# --weights when not given, for every command that has it: the pretrained weights where the torch hub cache has
# them (hookscope download), else random ones seeded by --seed, with a notice that says so.
DEFAULT_WEIGHTS = "default"
WEIGHTS_HELP = (
    "'default' (pretrained, from the torch hub cache; random with a notice when they are not there), 'none' "
    "(random, seeded by --seed) or a state_dict file (default: default)"
)
BUILD_NOTE_AFTER_S = 2.0  # a model that takes longer to build is named, with how to stop it


def comma_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def target_argument(text: str) -> str | int:
    """``top1``, a class index (as an int), or another of ``--target``'s forms (as its text: checked against the
    model when it runs)."""
    from hookscope.core.common.errors import RunError
    from hookscope.core.engine.target_words import FORMS, parse_target

    if text == "top1":
        return text
    try:
        return int(text)
    except ValueError:
        pass
    try:
        parse_target(text)
    except RunError:
        raise argparse.ArgumentTypeError(f"target must be {FORMS}; not '{text}'") from None
    return text


def kinds_argument(text: str) -> list[str]:
    """--hooks: the tree's words (``act,grad``: ``HOOK_WORDS``) or the engine's kinds (``forward,tensor``), as
    kinds, in the order given."""
    words = comma_list(text)
    unknown = [w for w in words if w not in HOOK_WORDS and w not in KINDS]
    if unknown or not words:
        raise argparse.ArgumentTypeError(
            f"hook kinds are {', '.join(HOOK_WORDS)} (or {', '.join(KINDS)}); got '{text}'"
        )
    return list(dict.fromkeys(HOOK_WORDS.get(w, w) for w in words))


def _whole_number(text: str, least: int, refusal: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not '{text}'") from None
    if value < least:
        raise argparse.ArgumentTypeError(refusal.format(value))
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (``--top``, ``--frames``, ``--batch-size`` ...)."""
    return _whole_number(text, 1, "must be at least 1, not {}")


def not_negative_int(text: str) -> int:
    """A number from 0 (``--camera``)."""
    return _whole_number(text, 0, "must be 0 or more, not {}")


def images_to_run(args: argparse.Namespace) -> tuple[Path, Path, list[Path]]:
    """``--images`` FOLDER's image files (``--recursive``: with its subfolders), none under ``--out``; a folder with
    none is one error line, with the hint when its subfolders have some."""
    from hookscope.core.outputs.batch import find_images

    folder, out = Path(args.images), Path(args.out)
    images = find_images(folder, args.recursive, exclude=out)
    if not images:
        hint = (
            " (add --recursive to look in subfolders)" if not args.recursive and find_images(folder, True, out) else ""
        )
        raise HookscopeError(f"There are no image files in '{folder}'{hint}.")
    return folder, out, images


def add_model_options(parser: argparse.ArgumentParser, default_weights: str = DEFAULT_WEIGHTS) -> None:
    """--model, --weights, --seed and --device, which mean the same in every command (``default_weights``: only
    for a command whose weights do not matter, such as bench's timings)."""
    parser.add_argument(
        "--model",
        default="resnet18",
        help="torchvision model name, timm/NAME when timm is installed, or hf:ORG/NAME "
        "(a transformers image model from the Hugging Face Hub) (default: resnet18)",
    )
    parser.add_argument("--weights", default=default_weights, help=WEIGHTS_HELP if default_weights == DEFAULT_WEIGHTS
                        else WEIGHTS_HELP.replace("(default: default)", f"(default: {default_weights})"))  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of random weights (default: 0)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")


def add_model_file_options(parser: argparse.ArgumentParser) -> None:
    """Your own model: a weights file for a catalogue architecture, a pickled model, or a Python factory."""
    parser.add_argument(
        "--model-file",
        metavar="PATH",
        help="open a model file instead of --model: a state_dict (.pt/.pth/.bin/.safetensors, with --arch), "
        "a pickled nn.Module (with --trust) or model.py:FACTORY (with --trust)",
    )
    parser.add_argument(
        "--arch", metavar="NAME", help="the catalogue architecture a --model-file state_dict belongs to"
    )
    parser.add_argument(
        "--trust", action="store_true", help="allow running code from --model-file (unpickling, importing a .py)"
    )
    parser.add_argument(
        "--non-strict",
        action="store_true",
        help="load the tensors of a state_dict that fit and report the rest, instead of refusing",
    )


def readable_error(error: HookscopeError) -> str:
    """The error's line, where it ends with the bare words of the ``OSError`` behind it (": Not a directory.")
    and that error is a blocked output path: with what is in the way instead (": a file is in the way: 'OUT/png'.").
    Every command's output errors read alike, worded here once."""
    text, cause = str(error), error.__cause__
    if not isinstance(cause, OSError) or (problem := write_problem(cause)) is None:
        return text
    path, reason = problem
    named = "" if path == os.fsdecode(cause.filename) else f": '{path}'"
    for said in (f": {cause.strerror}.", f": {cause}"):  # "...: Not a directory." or "...: [Errno 21] Is a ..."
        if text.endswith(said):
            return f"{text[: -len(said)]}: {reason}{named}."
    return text


def select_layers(spec: str, available: list[str]) -> list[str]:
    if spec == "all":
        return available
    layers = comma_list(spec)
    missing = [p for p in layers if p not in available]
    if missing:
        raise HookscopeError(
            f"The model has no module named {', '.join(repr(m) for m in missing)}.", module_path=missing[0]
        )
    return layers


def model_source(args: argparse.Namespace) -> ModelSource:
    """The command line's model as a ``ModelSource``: --model, --weights and --seed, or --model-file (with
    --arch, --trust, --non-strict, and --weights as a state_dict to load into it)."""
    from hookscope.core.models.source import ModelSource

    model_file = getattr(args, "model_file", None)
    if getattr(args, "arch", None) and not model_file:
        raise HookscopeError("--arch goes with --model-file; for a catalogue model use --model NAME.")
    return ModelSource(
        name=args.model,
        weights=args.weights,
        seed=args.seed,
        file=model_file,
        arch=getattr(args, "arch", None),
        trust=getattr(args, "trust", False),
        non_strict=getattr(args, "non_strict", False),
    )


@contextmanager
def building(source: ModelSource, after_s: float = BUILD_NOTE_AFTER_S) -> Iterator[None]:
    """While a model is built or loaded: after ``after_s`` seconds one line says what is being built (a trusted
    model.py's factory can take long, or never return), and Ctrl-C or SIGTERM stop it."""
    from hookscope.core.models.files import split_factory

    if source.file:
        file, factory = split_factory(source.file)
        what = f"the model with {factory}() from '{file}'" if factory else f"the model from '{file}'"
    else:
        what = f"the model {source.name}"
    note = threading.Timer(after_s, lambda: print(f"hookscope: still building {what}; Ctrl-C stops it.",
                                                  file=sys.stderr, flush=True))  # fmt: skip
    note.daemon = True
    note.start()
    try:
        with sigterm_raises():
            yield
    finally:
        note.cancel()


def load_for_cli(args: argparse.Namespace) -> LoadedModel:
    """The model the command line asked for (catalogue name and weights, or --model-file), with its notice printed."""
    from hookscope.core.engine.pipeline import open_model
    from hookscope.core.models.catalogue import TIMM_PREFIX

    source = model_source(args)
    if not source.file:
        fetch_for_cli(source.name, source.weights)
    with building(source):
        loaded = open_model(source)
    if not source.file:
        if args.weights == "default" and not loaded.pretrained and not args.model.startswith((TIMM_PREFIX, "hf:")):
            loaded.notice = (
                loaded.notice.rstrip(".") + f"; download them with 'hookscope download --model {args.model}'."
            )
    loaded.notice = command_line_notice(loaded.notice)
    if loaded.notice:
        print(f"hookscope: {loaded.notice}", file=sys.stderr)
    return loaded


def command_line_notice(notice: str) -> str:
    """A model's notice in the command line's words. The loaders word it for the window, which shows the model
    ("showing an untrained resnet18 with random weights (seed 0)"); a command shows nothing, it runs the model."""
    return notice.replace("showing an untrained ", "running an untrained ")


def fetch_for_cli(name: str, weights: str) -> None:
    """Before opening hf:ORG/NAME, or timm/NAME with --weights default: what is not in the Hugging Face cache is
    downloaded, with a progress line (Ctrl-C stops it; the part that came stays in the cache, and the next run
    resumes it). Nothing for other models, or when all is cached."""
    from hookscope.core.models import hub as hub_models
    from hookscope.core.models.catalogue import TIMM_PREFIX, timm_available

    if name.startswith(hub_models.HF_PREFIX):
        if weights not in ("default", "none") or hub_models.is_cached(name, weights):
            return  # a weights file is refused, in one line, when the model opens
        label = name
        fetch = lambda bar: hub_models.fetch_model(name, weights, progress=bar)  # noqa: E731
    elif name.startswith(TIMM_PREFIX) and weights == "default" and timm_available():
        from hookscope.core.models.catalogue import _timm_cached_weights, check_model_name

        check_model_name(name)
        arch = name[len(TIMM_PREFIX) :]
        if _timm_cached_weights(arch) is not None or hub_models.timm_hub_file(arch) is None:
            return
        label = f"{name}'s weights"
        fetch = lambda bar: hub_models.fetch_timm_weights(arch, progress=bar)  # noqa: E731
    else:
        return
    bar = HubDownloadBar(label)
    try:
        with sigterm_raises():
            fetch(bar)
    finally:
        if bar.drawn:
            sys.stderr.write("\n")


def parse_edits(args: argparse.Namespace) -> list[Intervention]:
    """The --edit specs as interventions; a bad spec is a one-line error."""
    from hookscope.core.engine.interventions import parse_edit

    return [parse_edit(spec) for spec in getattr(args, "edit", None) or []]


def register_for_cli(
    registry: HookRegistry, args: argparse.Namespace, preprocess: Any = None
) -> dict[str, torch.Tensor]:
    """Register the requested hooks and --edit edits on the registry.

    Returns the other images the mix edits blend in, read and preprocessed (``run_image(..., others=...)``).
    """
    from hookscope.core.engine.pipeline import other_images

    for path in select_layers(args.layers, registry.paths):
        for kind in args.hooks:
            registry.add(path, kind)
    edits = parse_edits(args)
    for edit in edits:
        registry.add_edit(edit)
    return other_images(edits, preprocess)
