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
from hookscope.cli.words import cli_words
from hookscope.core.common.errors import HookscopeError, write_problem
from hookscope.core.common.vocabulary import (
    HOOK_WORDS,
    KINDS,
    deprecation_line,
    kinds_in_order_given,
    old_spellings,
    words_text,
)
from hookscope.system.termination import sigterm_raises

if TYPE_CHECKING:
    import torch

    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.interventions import Intervention
    from hookscope.core.engine.target_words import Objective
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


def target_argument(text: str) -> Objective:
    """``--target``'s words, parsed here where they come in (the engine takes the ``Objective``); whether it fits
    the model, the run says."""
    from hookscope.core.common.errors import RunError
    from hookscope.core.engine.target_words import FORMS, parse_target

    try:
        return parse_target(text)
    except RunError:
        shown = text if len(text) <= 60 else text[:50] + "…"  # a megabyte of digits is not echoed
        raise argparse.ArgumentTypeError(f"target must be {FORMS}; not '{shown}'") from None


def kinds_argument(text: str) -> list[str]:
    """--hooks: the vocabulary's words (``act,grad``: ``HOOK_WORDS``), as kinds, in the order given; the old
    spellings (the kinds: ``forward,tensor``) still work, with one warning line."""
    words = [word.lower() for word in comma_list(text)]
    if not words or any(word not in HOOK_WORDS and word not in KINDS for word in words):
        raise argparse.ArgumentTypeError(f"hook words are {words_text()}; got '{text}'")
    if old := old_spellings(words):
        print(f"hookscope: warning: --hooks: {deprecation_line(old)}", file=sys.stderr)
    return list(kinds_in_order_given(words))


def hooks_help(default: str) -> str:
    """--hooks's help: the words, read from the vocabulary."""
    return f"hook words: {words_text()} (in: inputs, act: activations, grad: gradients...; default: {default})"


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


def images_to_run(
    args: argparse.Namespace, unreadable: list[tuple[Path, str]] | None = None
) -> tuple[Path, Path, list[Path]]:
    """``--images`` FOLDER's image files (``--recursive``: with its subfolders), none under ``--out``; a folder with
    none is one error line, with the hint when its subfolders have some. A folder that cannot be read is left out;
    ``unreadable`` (when given) receives (folder, one-line reason) for each."""
    from hookscope.core.outputs.batch import find_images

    folder, out = Path(args.images), Path(args.out)
    closed: list[tuple[Path, str]] = []
    images = find_images(folder, args.recursive, exclude=out, unreadable=closed)
    if not images:
        hint = (
            " (add --recursive to look in subfolders)" if not args.recursive and find_images(folder, True, out) else ""
        )
        reason = f" ({closed[0][1].rstrip('.')})" if closed else ""
        raise HookscopeError(f"There are no image files in '{folder}'{hint}{reason}.")
    if unreadable is not None:
        unreadable += closed
    return folder, out, images


# The options that name a file (or folder) a command reads, and those that name what it writes.
INPUT_OPTIONS = ("--image", "--images", "--video", "--session", "--weights", "--model-file", "--direction")
OUTPUT_OPTIONS = ("--record", "--script", "--out")


def read_paths(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(option, path) of every file or folder the command reads, as given: images, the video, the session, the
    weights and model files, a direction, the other images of mix edits and of a similar: target."""
    from hookscope.core.models.files import split_factory

    found: list[tuple[str, str]] = []
    for option in INPUT_OPTIONS:
        value = getattr(args, option[2:].replace("-", "_"), None)
        if isinstance(value, (str, os.PathLike)) and option == "--model-file":
            value = str(split_factory(value)[0])
        if isinstance(value, str) and option == "--weights" and value in ("default", "none"):
            continue
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, (str, os.PathLike)):
                found.append((option, os.fspath(path)))
    for spec in getattr(args, "edit", None) or []:
        if spec.startswith("mix:") and spec.count(":") >= 3:
            found.append(("--edit", spec.rsplit(":", 1)[1]))
    target = getattr(args, "target", None)  # an Objective: --target's type parsed its words
    if getattr(target, "kind", None) == "similar" and isinstance(image := getattr(target, "image", None), str):
        found.append(("--target", image))
    return found


def refuse_writing_over_inputs(args: argparse.Namespace, outputs: tuple[str, ...] = OUTPUT_OPTIONS) -> None:
    """An output that is one of the command's inputs (the same file, after links) is refused in one line before
    anything runs: ``live --video clip.avi --record clip.avi`` would have overwritten the video with the recording."""
    inputs = read_paths(args)
    for option in outputs:
        written = getattr(args, option[2:].replace("-", "_"), None)
        if not isinstance(written, (str, os.PathLike)) or not os.path.lexists(written):
            continue
        for source, read in inputs:
            if not os.path.isdir(read) and _same_file(written, read):  # a folder read is not overwritten
                named = "" if os.fspath(written) == read else f" ('{read}')"
                raise HookscopeError(f"{option} '{os.fspath(written)}' is the file {source} reads{named}: writing "
                                     "there would destroy it; give another name.", path=os.fspath(written))  # fmt: skip


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths are one file or folder: through symbolic links, hard links and bind mounts."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one does not exist (or cannot be looked at): not one the other is
        return False


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
    text, cause = cli_words(error), error.__cause__
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
    from hookscope.core.models.loaded import TIMM_PREFIX
    from hookscope.core.models.source import open_model

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
    from hookscope.core.models.catalogue import timm_available
    from hookscope.core.models.loaded import TIMM_PREFIX

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
    from hookscope.core.engine.interventions import other_images

    layers = select_layers(args.layers, registry.paths)
    for kind in args.hooks:
        if kind == "attention" and args.layers == "all":  # every module: the attention modules that can be read
            paths = [path for path, support in registry.attention_modules().items() if support.capturable]
            if not paths:
                raise HookscopeError("The model has no attention module whose weights can be captured (attn).")
        else:
            paths = layers
        for path in paths:
            registry.add(path, kind)
    edits = parse_edits(args)
    for edit in edits:
        registry.add_edit(edit)
    return other_images(edits, preprocess)
