"""The ``hookscope`` command: the window by default, and headless subcommands (``SUBCOMMANDS``).

Every error a user can cause ends in one readable line on stderr and a non-zero exit; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch  # noqa: F401  (torch before any Qt import: a known DLL clash on Windows otherwise)

from app import __version__
from app.cli_live import build_live_parser, frame_range, run_export_video, run_live
from app.cli_progress import ProgressLine, end_progress_lines, stop_on_signals
from app.cli_scan import build_scan_parser, run_bench_scan, run_scan_command
from app.core.common.errors import HookscopeError, write_error, write_problem
from app.core.engine.hooks import KINDS
from app.system.allocator import keep_freed_memory
from app.system.termination import SIGTERM_EXIT, Terminated, sigterm_raises

if TYPE_CHECKING:
    from app.core.engine.pipeline import ModelSource

SUBCOMMANDS = ("export", "bench", "download", "visualize", "lessons", "scan", "live")
SUMMARIES = {  # one line each in 'hookscope --help'
    "export": "run images (a file, a folder, a session, a video) through a hooked model; write what the hooks saw",
    "scan": "a dataset scan: each channel's top images and where in them it fires",
    "visualize": "dream a channel: optimise an image that excites it",
    "lessons": "the hook lessons of the window's Help > Learn the hooks, run and checked on a model",
    "live": "a video file or a camera through a hooked model, frame by frame",
    "bench": "time hooked against bare runs (also --batch, --scan)",
    "download": "download a model's pretrained weights into the torch hub cache",
}
# --weights when not given, for every command that has it: the pretrained weights where the torch hub cache has
# them (hookscope download), else random ones seeded by --seed, with a notice that says so.
DEFAULT_WEIGHTS = "default"
WEIGHTS_HELP = (
    "'default' (pretrained, from the torch hub cache; random with a notice when they are not there), 'none' "
    "(random, seeded by --seed) or a state_dict file (default: default)"
)
BUILD_NOTE_AFTER_S = 2.0  # a model that takes longer to build is named, with how to stop it


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _target(text: str) -> str | int:
    """``top1``, a class index (as an int), or another of ``--target``'s forms (as its text: checked against the
    model when it runs)."""
    from app.core.common.errors import RunError
    from app.core.engine.objectives import FORMS, parse_target

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


def _kinds(text: str) -> list[str]:
    kinds = _csv(text)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"hook kinds are {', '.join(KINDS)}; got '{text}'")
    return kinds


def _add_model_options(parser: argparse.ArgumentParser, default_weights: str = DEFAULT_WEIGHTS) -> None:
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


def _add_model_file_options(parser: argparse.ArgumentParser) -> None:
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


def build_parsers() -> tuple[
    argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser
]:
    gui = argparse.ArgumentParser(
        prog="hookscope",
        description="Look inside a PyTorch network: tick modules, drop an image, see what they compute.",
        epilog="Headless subcommands: ('hookscope SUBCOMMAND --help' for the options of each)\n"
        + "".join(f"  {name:<10} {SUMMARIES.get(name, '')}\n" for name in SUBCOMMANDS)
        + "\nThe user guide: Help > User guide in the window.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gui.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="images to open: the first is shown, the rest wait in the image list (default: the sample photograph)",
    )
    _add_model_options(gui)
    gui.add_argument("--screenshot", metavar="OUT.png", help="save a screenshot of the window after the run and exit")
    gui.add_argument("--check", type=_csv, metavar="PATH,PATH", help="modules to tick (in the --ticks columns)")
    gui.add_argument("--ticks", metavar="in,act,grad,gradin", help="which columns --check ticks (default: act,grad)")
    gui.add_argument("--size", metavar="WxH", help="window size in pixels, e.g. 1366x768 (for --screenshot too)")
    gui.add_argument("--self-test", action="store_true", help="run the app offscreen end to end and report")
    gui.add_argument(
        "--install-desktop-entry",
        action="store_true",
        help="add this installation to the desktop's applications menu (Linux) and exit",
    )
    gui.add_argument(
        "--uninstall-desktop-entry",
        action="store_true",
        help="remove Hookscope from the desktop's applications menu (Linux) and exit",
    )
    gui.add_argument("--debug", action="store_true", help="show tracebacks")
    gui.add_argument("--version", action="version", version=f"hookscope {__version__}")

    export = argparse.ArgumentParser(
        prog="hookscope export", description="Run images through a hooked model and write what the hooks saw."
    )
    _add_model_options(export)
    export.add_argument("--image", action="append", help="image file (repeat for several)")
    export.add_argument("--images", metavar="DIR", help="every image in a folder: one subfolder each plus summary.csv")
    export.add_argument("--recursive", action="store_true", help="with --images: look in subfolders too")
    export.add_argument("--resume", action="store_true", help="with --images: keep images an earlier run finished")
    export.add_argument(
        "--session", metavar="FILE", help="run a saved session (model, hooks, edits, images) headlessly"
    )
    export.add_argument("--video", metavar="FILE", help="a video file: the frames --frames names, one folder each")
    export.add_argument("--frames", type=frame_range, metavar="A:B",
                        help="with --video: frames A to B-1, counted from 0 (A: to the end, N: frame N alone)")  # fmt: skip
    export.add_argument("--layers", default="all", help="'all' or module paths separated by commas (default: all)")
    export.add_argument(
        "--hooks",
        type=_kinds,
        default=["forward", "backward"],
        help="kinds: forward,pre,backward,tensor,grad_input (default: forward,backward)",
    )
    export.add_argument(
        "--target",
        type=_target,
        default="top1",
        help="what the gradient is of: top1, a class index, class:C, class:C@x0,y0,x1,y1 (segmentation), "
        "box:N (detection), similar:IMAGE or text:PROMPT (embeddings) (default: top1)",
    )
    export.add_argument("--out", default="hookscope-out", help="output folder (default: hookscope-out)")
    export.add_argument("--no-png", action="store_true", help="skip the PNG mosaics")
    export.add_argument(
        "--script", metavar="OUT.py",
        help="also write a standalone Python script that redoes the run in plain PyTorch (with --image or --session)",
    )  # fmt: skip
    export.add_argument(
        "--edit",
        action="append",
        metavar="SPEC",
        help="change what flows through a hook (repeat for several): zero:PATH:3,5, keep:PATH:7, scale:PATH:0.5, "
        "scale-input:PATH:2, scale-grad:PATH:1.6, scale-grad-input:PATH:1.6, mix:PATH:0.7:OTHER_IMAGE",
    )
    export.add_argument("--debug", action="store_true", help="show tracebacks")
    _add_model_file_options(export)

    bench = argparse.ArgumentParser(prog="hookscope bench", description="Time hooked against bare forward+backward.")
    _add_model_options(bench, default_weights="none")
    bench.add_argument(
        "--layers", help="'all' (default) or module paths separated by commas; with --batch: 10 spread modules"
    )
    bench.add_argument(
        "--batch",
        action="store_true",
        help="batch throughput: 'export --images' against bare inference and a plain PyTorch + np.savez floor",
    )
    bench.add_argument("--images", type=int, default=100, metavar="N", help="with --batch: images (default: 100)")
    bench.add_argument(
        "--hooks",
        type=_kinds,
        default=["forward", "backward"],
        help="kinds to register per layer: forward,pre,backward,tensor,grad_input (default: forward,backward)",
    )
    bench.add_argument("--size", type=int, default=224, help="input size in pixels (default: 224)")
    bench.add_argument("--repeat", type=int, default=10, help="timed pairs (default: 10)")
    bench.add_argument(
        "--scan",
        action="store_true",
        help="dataset scan throughput ('hookscope scan') against bare batched inference (--images N of them, 4 spread modules or --layers)",
    )
    bench.add_argument(
        "--batch-size", type=int, default=16, metavar="N", help="with --scan: images per batch (default: 16)"
    )
    bench.add_argument("--debug", action="store_true", help="show tracebacks")

    download = argparse.ArgumentParser(
        prog="hookscope download",
        description="Download a catalogue model's pretrained weights into the torch hub cache, verified against "
        "the hash in the file name. HOOKSCOPE_WEIGHTS_URL replaces the base address (mirrors).",
    )
    download.add_argument("--model", default="resnet18", help="torchvision model name, hf:ORG/NAME (a model from the "
                          "Hugging Face Hub, into its cache) or timm/NAME (timm's weights, from the Hub) "
                          "(default: resnet18)")  # fmt: skip
    download.add_argument("--force", action="store_true", help="download again even when the file is cached")
    download.add_argument(
        "--timeout", type=float, default=30.0, help="seconds without data before giving up (default: 30)"
    )
    download.add_argument(
        "--min-rate", type=float, default=10.0, metavar="KB/S",
        help="give up when a 30 s window averages less than this many kB/s (default: 10; 0: never)",
    )  # fmt: skip
    download.add_argument("--debug", action="store_true", help="show tracebacks")
    return gui, export, bench, download


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()  # every command, the window too: a run's freed memory serves the next run
    args_list = list(sys.argv[1:] if argv is None else argv)
    gui, export, bench, download = build_parsers()
    if args_list and args_list[0] in SUBCOMMANDS:
        build, command = {  # only the parser asked for is built (lessons' imports the lessons)
            "export": (lambda: export, run_export),
            "bench": (lambda: bench, run_bench),
            "download": (lambda: download, run_download),
            "visualize": (build_visualize_parser, run_visualize),
            "lessons": (build_lessons_parser, run_lessons),
            "scan": (build_scan_parser, run_scan_command),
            "live": (build_live_parser, run_live),
        }[args_list[0]]
        args = build().parse_args(args_list[1:])
    else:
        args = gui.parse_intermixed_args(args_list)  # files after options too, as a desktop's %F passes them
        command = run_window
    try:
        return command(args)
    except HookscopeError as error:
        end_progress_lines()  # every error on its own line, never glued to a progress line
        if args.debug:
            raise
        print(f"hookscope: error: {_readable(error)}", file=sys.stderr)
        return 2
    except Terminated:
        end_progress_lines()
        print("hookscope: stopped (SIGTERM)", file=sys.stderr)
        return SIGTERM_EXIT
    except KeyboardInterrupt:
        end_progress_lines()
        print("hookscope: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug, not the user's fault: still one line unless asked
        end_progress_lines()
        blocked = write_error(error) if isinstance(error, OSError) else None  # an output path the user can fix
        if args.debug:
            raise
        if blocked is not None:
            print(f"hookscope: error: {blocked}", file=sys.stderr)
            return 2
        print(
            f"hookscope: unexpected error: {type(error).__name__}: {error} (run with --debug for details)",
            file=sys.stderr,
        )
        return 1


def _readable(error: HookscopeError) -> str:
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


def _select_layers(spec: str, available: list[str]) -> list[str]:
    if spec == "all":
        return available
    layers = _csv(spec)
    missing = [p for p in layers if p not in available]
    if missing:
        raise HookscopeError(
            f"The model has no module named {', '.join(repr(m) for m in missing)}.", module_path=missing[0]
        )
    return layers


def _output_folders(images: list[str], out: Path) -> list[Path]:
    """One folder for one image; one subfolder per image (named by its stem, made unique) for several."""
    if len(images) == 1:
        return [out]
    folders, used = [], set()
    for image in images:
        stem = Path(image).stem or "image"
        name, n = stem, 1
        while name in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        folders.append(out / name)
    return folders


def model_source(args: argparse.Namespace) -> ModelSource:
    """The command line's model as a ``ModelSource``: --model, --weights and --seed, or --model-file (with
    --arch, --trust, --non-strict, and --weights as a state_dict to load into it)."""
    from app.core.engine.pipeline import ModelSource

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
    from app.core.models.files import split_factory

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


def load_for_cli(args: argparse.Namespace):
    """The model the command line asked for (catalogue name and weights, or --model-file), with its notice printed."""
    from app.core.engine.pipeline import open_model
    from app.core.models.catalogue import TIMM_PREFIX

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
    if loaded.notice:
        print(f"hookscope: {loaded.notice}", file=sys.stderr)
    return loaded


def fetch_for_cli(name: str, weights: str) -> None:
    """Before opening hf:ORG/NAME, or timm/NAME with --weights default: what is not in the Hugging Face cache is
    downloaded, with a progress line (Ctrl-C stops it; the part that came stays in the cache, and the next run
    resumes it). Nothing for other models, or when all is cached."""
    from app.core.models import hub as hub_models
    from app.core.models.catalogue import TIMM_PREFIX, timm_available

    if name.startswith(hub_models.HF_PREFIX):
        if weights not in ("default", "none") or hub_models.is_cached(name, weights):
            return  # a weights file is refused, in one line, when the model opens
        label = name
        fetch = lambda bar: hub_models.fetch_model(name, weights, progress=bar)  # noqa: E731
    elif name.startswith(TIMM_PREFIX) and weights == "default" and timm_available():
        from app.core.models.catalogue import _timm_cached_weights, check_model_name

        check_model_name(name)
        arch = name[len(TIMM_PREFIX) :]
        if _timm_cached_weights(arch) is not None or hub_models.timm_hub_file(arch) is None:
            return
        label = f"{name}'s weights"
        fetch = lambda bar: hub_models.fetch_timm_weights(arch, progress=bar)  # noqa: E731
    else:
        return
    bar = _hub_bar(label)
    try:
        with sigterm_raises():
            fetch(bar)
    finally:
        if bar.drawn:
            sys.stderr.write("\n")


def _edits(args: argparse.Namespace) -> list:
    """The --edit specs as interventions; a bad spec is a one-line error."""
    from app.core.engine.interventions import parse_edit

    return [parse_edit(spec) for spec in getattr(args, "edit", None) or []]


def register_for_cli(registry, args: argparse.Namespace, preprocess=None) -> dict:
    """Register the requested hooks and --edit edits on the registry.

    Returns the other images the mix edits blend in, read and preprocessed (``run_image(..., others=...)``).
    """
    from app.core.engine.pipeline import other_images

    for path in _select_layers(args.layers, registry.paths):
        for kind in args.hooks:
            registry.add(path, kind)
    edits = _edits(args)
    for edit in edits:
        registry.add_edit(edit)
    return other_images(edits, preprocess)


def _add_edits_to_manifest(folder: Path, manifest: dict, args: argparse.Namespace, result) -> None:
    """manifest.json gains the --edit specs and, per top-5 class, its probability without the edits."""
    import json

    from app.core.pictures.compare import prediction_changes

    if not getattr(args, "edit", None):
        return
    manifest["edits"] = list(args.edit)
    manifest["prediction_changes"] = [
        {"index": c.index, "label": c.label, "probability": c.probability, "without_edits": c.before, "change": c.delta}
        for c in prediction_changes(result)
    ]
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _warn_non_finite(manifest: dict) -> None:
    """NaN or inf in the weights, output or captures: one warning line (the manifest's non_finite has the detail).
    The export itself succeeded (what the hooks saw is written, NaN included), so the exit status stays 0."""
    from app.core.engine.numeric import NumericReport

    line = NumericReport.from_description(manifest.get("non_finite")).line()
    if line:
        print(f"hookscope: warning: {line}", file=sys.stderr)


def _warn_non_finite_batch(images: list, root: Path, out: Path) -> None:
    """After a batch: one warning line when any image's manifest says NaN or inf (the first one's sentence)."""
    import json

    from app.core.engine.numeric import NumericReport
    from app.core.outputs.batch import folder_names

    found = []
    for name in folder_names(images, root):
        try:
            described = json.loads((out / name / "manifest.json").read_text(encoding="utf-8")).get("non_finite")
        except (OSError, ValueError):
            continue  # skipped or not reached
        if described:
            found.append((name, NumericReport.from_description(described).line()))
    if found:
        print(f"hookscope: warning: {len(found)} of {len(images)} images gave NaN or inf (see non_finite in their "
              f"manifest.json); {found[0][0]}: {found[0][1]}", file=sys.stderr)  # fmt: skip


def _export_mode(args: argparse.Namespace) -> str:
    """Which of --image, --images and --session was given (exactly one must be)."""
    given = [name for name, value in (("--image", args.image), ("--images", args.images), ("--session", args.session),
                                      ("--video", args.video)) if value]  # fmt: skip
    if not given:
        raise HookscopeError("One of --image, --images, --session or --video is required.")
    if len(given) > 1:
        raise HookscopeError(f"{given[0]} and {given[1]} cannot be used together; choose one.")
    if args.frames is not None and given[0] != "--video":
        raise HookscopeError("--frames goes with --video FILE.")
    for flag, value in (("--recursive", args.recursive), ("--resume", args.resume)):
        if value and given[0] != "--images":
            raise HookscopeError(f"{flag} goes with --images DIR.")
    if getattr(args, "script", None):
        if given[0] == "--images":
            raise HookscopeError("--script goes with --image or --session (a script redoes one image's run).")
        from app.core.teaching.script_export import check_script_path

        check_script_path(args.script)
    for flag, value in (("--edit", getattr(args, "edit", None)), ("--model-file", getattr(args, "model_file", None))):
        if value and given[0] == "--session":
            raise HookscopeError(f"{flag} cannot be combined with --session: the session names its own.")
    return given[0]


def run_export(args: argparse.Namespace) -> int:
    mode = _export_mode(args)
    if mode == "--images":
        return run_export_batch(args)
    if mode == "--session":
        return run_export_session(args)
    if mode == "--video":
        return run_export_video(args)
    from app.core.engine.devices import resolve_device
    from app.core.engine.hooks import HookRegistry
    from app.core.engine.pipeline import run_image
    from app.core.models.images import read_image
    from app.core.outputs.export import write_run

    resolve_device(args.device)
    images = [read_image(path) for path in args.image]  # fail on a bad image before the slow part
    _edits(args)  # and on a bad --edit
    with sigterm_raises():  # kill PID stops like Ctrl-C: one line, exit 143
        loaded = load_for_cli(args)
        with HookRegistry(loaded.module) as registry:
            others = register_for_cli(registry, args, loaded.preprocess)
            folders = _output_folders(args.image, Path(args.out))
            for index, (name, image, folder) in enumerate(zip(args.image, images, folders)):
                with _export_progress(name, index, len(images)) as line:
                    line.stage("running the model")
                    result = run_image(
                        loaded, registry, image, device=args.device, target=args.target, others=others,
                        baseline=bool(args.edit),
                    )  # fmt: skip
                    line.stage("writing the files")
                    manifest = write_run(result, loaded, folder, image=name, kinds=tuple(args.hooks),
                                         png=not args.no_png, progress=line.update)  # fmt: skip
                _report_export(name, folder, manifest, args, result)
            _write_script(args, loaded, registry, args.image[0], args.target, args.device)
    return 0


def _export_progress(name: str, index: int, count: int) -> ProgressLine:
    """The progress line of one image's export: the run, then every file written (most of the time: the PNGs)."""
    return ProgressLine(f"export {name}" + (f" ({index + 1} of {count})" if count > 1 else ""), "files")


def _report_export(name: str, folder: Path, manifest: dict, args: argparse.Namespace, result) -> None:
    """After one image's export: the edits into its manifest, its line on stdout, a warning for NaN or inf."""
    _add_edits_to_manifest(folder, manifest, args, result)
    top = result.top5[0] if result.top5 else None
    best = f"{top.label} ({top.probability:.1%})" if top else "no class scores"
    print(f"{name}: {len(result.records)} records -> {folder}  top-1: {best}")
    _warn_non_finite(manifest)


def _batch_progress(line: ProgressLine):
    """The batch's progress on ``line``: "12/100 images (12%), 3.1 images/s, about 28 s left, cat.jpg, skipped 1";
    the rate and the time left count only the images run in this call (not those an earlier run finished)."""

    def show(progress) -> None:
        what = [progress.image]
        if progress.skipped:
            what.append(f"skipped {progress.skipped}")
        if progress.resumed:
            what.append(f"{progress.resumed} done earlier")
        line.update(progress.handled, progress.total, ", ".join(what), rate=progress.rate)

    return show


def _write_script(args: argparse.Namespace, loaded, registry, image: str, target, device: str) -> None:
    """--script OUT.py: the run of ``image`` as a standalone PyTorch script (written after the run, so that the hooks
    are the ones the run used: a full backward hook or its tensor-hook fallback)."""
    if not getattr(args, "script", None):
        return
    from app.core.teaching.script_export import standalone_script, write_script

    write_script(
        args.script,
        standalone_script(loaded, registry, image=image, target=target, device=device, what="hookscope export"),
    )
    print(
        f"hookscope: script that redoes the run of {image} in plain PyTorch: {args.script} "
        f"(python {args.script} --save captures.npz)",
        file=sys.stderr,
    )


def run_export_batch(args: argparse.Namespace) -> int:
    """--images DIR: every image of a folder, the model loaded once, resumable, with summary.csv."""
    from app.core.engine.devices import resolve_device
    from app.core.engine.hooks import HookRegistry
    from app.core.outputs.batch import find_images, run_batch

    resolve_device(args.device)
    folder, out = Path(args.images), Path(args.out)
    images = find_images(folder, args.recursive, exclude=out)
    if not images:
        hint = (
            " (add --recursive to look in subfolders)" if not args.recursive and find_images(folder, True, out) else ""
        )
        raise HookscopeError(f"There are no image files in '{folder}'{hint}.")
    _edits(args)  # a bad --edit fails before the slow part
    report, stopped_by = None, ""
    try:
        with sigterm_raises():  # kill PID stops like Ctrl-C: the images finished so far stay, for --resume
            loaded = load_for_cli(args)
            with HookRegistry(loaded.module) as registry, ProgressLine("export", "images") as line:
                others = register_for_cli(registry, args, loaded.preprocess)
                report = run_batch(
                    loaded, registry, images, out, root=folder, device=args.device, target=args.target,
                    kinds=tuple(args.hooks), png=not args.no_png, resume=args.resume, progress=_batch_progress(line),
                    others=others, manifest_extra={"edits": list(args.edit)} if args.edit else None,
                )  # fmt: skip
    except Terminated:
        stopped_by = "stopped (SIGTERM)"
    except KeyboardInterrupt:
        stopped_by = "interrupted"
    if report is None:
        written = _finished_images(images, folder, out)
        print(f"hookscope: {stopped_by}; {written} of {len(images)} images are written in {out}; run the same "
              "command with --resume to go on where it stopped.", file=sys.stderr)  # fmt: skip
        return SIGTERM_EXIT if stopped_by.endswith("(SIGTERM)") else 130
    for _name, reason in report.skipped:
        print(f"hookscope: skipped: {reason}", file=sys.stderr)
    if not report.finished:
        raise HookscopeError(f"None of the {report.total} images could be read.")
    _warn_non_finite_batch(images, folder, out)
    earlier = f", {len(report.resumed)} of them finished by an earlier run" if report.resumed else ""
    skipped = f"; {len(report.skipped)} skipped" if report.skipped else ""
    print(
        f"{report.finished} of {report.total} images written to {out}{earlier}{skipped}; summary: {report.summary_csv}"
    )
    return 0


def _finished_images(images: list, root: Path, out: Path) -> int:
    """How many of a batch's images have a finished folder (its done.json), this run's and earlier runs'."""
    from app.core.outputs.batch import DONE_FILE, folder_names

    return sum((out / name / DONE_FILE).is_file() for name in folder_names(images, root))


def run_export_session(args: argparse.Namespace) -> int:
    """--session FILE: the saved model, weights, preprocessing, hooks, edits, target and images, headlessly."""
    from app.core.common.errors import DeviceError, ImageError
    from app.core.engine.devices import resolve_device
    from app.core.engine.hooks import HookRegistry
    from app.core.engine.pipeline import ModelSource, open_model, run_image
    from app.core.models.images import read_image
    from app.core.outputs.export import write_run
    from app.core.outputs.session import apply_session_edits, load_session, register_session_hooks, session_survey

    session, problems = load_session(args.session)
    # The one line that matters when the session cannot run (its model or weights file is missing); raised
    # before the problem lines are printed.
    source = ModelSource.from_session(session, trust=args.trust, non_strict=args.non_strict)
    for line in problems:
        print(f"hookscope: {line}", file=sys.stderr)
    images = session.found_images()
    if not images:
        raise HookscopeError("None of the session's images could be used; there is nothing to run.")
    device = session.device
    try:
        resolve_device(device)
    except DeviceError:
        print(f"hookscope: the session's device '{device}' is not available here; running on the CPU.", file=sys.stderr)
        device = "cpu"
    pictures = []
    for path in list(images):  # one that passed the header check but cannot be decoded: a line, the rest runs
        try:
            pictures.append(read_image(path))
        except ImageError as error:
            print(f"hookscope: {error} The rest of the session was restored.", file=sys.stderr)
            images.remove(path)
    if not images:
        raise HookscopeError("None of the session's images could be used; there is nothing to run.")
    with building(source):
        loaded = open_model(source)
    if loaded.notice:
        print(f"hookscope: {loaded.notice}", file=sys.stderr)
    with HookRegistry(loaded.module) as registry:
        lines = register_session_hooks(registry, session)
        survey = session_survey(loaded.module, session, loaded.preprocess)
        if survey is not None:  # the edits' channels are checked against it: a bad one is a line, not a failed run
            registry.adopt_survey(survey)
        edit_lines, others = apply_session_edits(registry, session, loaded.preprocess)
        for line in lines + edit_lines:
            print(f"hookscope: {line}", file=sys.stderr)
        edits = argparse.Namespace(edit=[edit.spec for edit in registry.enabled_edits()])
        folders = _output_folders(images, Path(args.out))
        for index, (name, image, folder) in enumerate(zip(images, pictures, folders)):
            with _export_progress(name, index, len(images)) as line, sigterm_raises():
                line.stage("running the model")
                result = run_image(
                    loaded, registry, image, device=device, target=session.target, others=others,
                    baseline=bool(edits.edit),
                )  # fmt: skip
                if name == images[0]:
                    line.end_line()
                    _write_script(args, loaded, registry, name, session.target, device)
                line.stage("writing the files")
                manifest = write_run(
                    result, loaded, folder, image=name, kinds=session.kinds, png=not args.no_png,
                    colormap=session.colormap, scaling=session.scaling, progress=line.update,
                )  # fmt: skip
            _report_export(name, folder, manifest, edits, result)
    return 0


def run_bench_batch(args: argparse.Namespace) -> int:
    """bench --batch: export --images throughput against bare inference and a plain-script floor over the same
    files, in one process."""
    from statistics import median

    from app.core.bench.batch import batch_benchmark

    layers = 10 if args.layers is None else (1 << 30 if args.layers == "all" else _csv(args.layers))
    result = batch_benchmark(
        args.images,
        layers,
        model=args.model,
        kinds=tuple(args.hooks),
        note=lambda text: print(f"hookscope: {text}", file=sys.stderr),
    )
    print(f"modules hooked ({'+'.join(result.kinds)}): {', '.join(result.modules)}")
    print(
        f"{args.model}, {result.images} images, {len(result.modules)} modules, PNGs off, interleaved rounds of "
        f"{result.chunk} (each side first in turn): bare {result.bare_rate:.2f} img/s, floor (plain PyTorch hooks + "
        f"np.savez) {result.floor_rate:.2f} img/s, batch {result.batch_rate:.2f} img/s"
    )
    print(
        f"throughput ratio (all images): batch/bare {result.ratio:.3f}, floor/bare {result.floor_ratio:.3f}, "
        f"batch/floor {result.above_floor:.3f}"
    )
    print(
        f"wrote: batch {result.batch_bytes / 1e9:.3f} GB, floor {result.floor_bytes / 1e9:.3f} GB "
        f"(batch/floor bytes {result.batch_bytes / max(1, result.floor_bytes):.3f})"
    )
    print(f"per-round ratios ({torch.get_num_threads()} torch threads):")
    for label, ratios in (
        ("batch/bare", result.round_ratios),
        ("floor/bare", result.round_floor_ratios),
        ("batch/floor", result.round_above_floor),
    ):
        print(f"  {label} median {median(ratios):.3f}: " + ", ".join(f"{r:.2f}" for r in ratios))
    return 0


def run_bench(args: argparse.Namespace) -> int:
    if args.scan:
        return run_bench_scan(args)
    if args.batch:
        return run_bench_batch(args)
    from app.core.bench.hooks import benchmark
    from app.core.engine.pipeline import ModelSource, open_model

    weights = "none" if args.weights == "default" else args.weights
    loaded = open_model(ModelSource(name=args.model, weights=weights, seed=args.seed))
    paths = _select_layers(args.layers or "all", [p for p, _ in loaded.module.named_modules()])
    result = benchmark(loaded.module, paths, tuple(args.hooks), args.size, args.repeat)
    print(
        f"{args.model} {args.size}x{args.size} on cpu, {len(paths)} modules, {result.hooks} hooks "
        f"({'+'.join(args.hooks)}), {args.repeat} interleaved rounds: medians bare {result.bare_median:.1f} ms, "
        f"floor (plain PyTorch hooks) {result.floor_median:.1f} ms, Hookscope {result.hooked_median:.1f} ms"
    )
    print(
        f"ratios (median of rounds): Hookscope/bare {result.ratio:.3f}, floor/bare {result.floor_ratio:.3f}, "
        f"Hookscope/floor {result.above_floor:.3f}"
    )
    return 0


def _progress_bar(label: str):
    """A one-line progress bar on stderr: bytes, percentage and speed, redrawn in place (``show.drawn`` once drawn)."""

    def show(done: int, total: int | None, rate: float) -> None:
        show.drawn = True
        if total:
            filled = min(24, int(24 * done / total))
            bar = f"[{'#' * filled}{'.' * (24 - filled)}] {done / total:4.0%} {done / 1e6:.1f}/{total / 1e6:.1f} MB"
        else:
            bar = f"{done / 1e6:.1f} MB"
        sys.stderr.write(f"\r{label} {bar} {rate / 1e6:.1f} MB/s ")
        sys.stderr.flush()

    show.drawn = False
    return show


def run_download(args: argparse.Namespace) -> int:
    from app.core.models.catalogue import default_weights_file
    from app.core.models.weights import download_weights, weights_url

    if args.min_rate < 0:
        raise HookscopeError(f"--min-rate is a speed in kB/s (0: no minimum), not {args.min_rate:g}.")
    if args.model.startswith(("hf:", "timm/")):
        return run_hub_download(args)
    url = weights_url(args.model)  # checks the name first
    target = default_weights_file(args.model)
    if target.is_file() and not args.force:
        print(f"hookscope: {args.model}'s weights are already in the cache", file=sys.stderr)
        print(target)
        return 0
    print(f"hookscope: downloading {url}", file=sys.stderr)
    bar = _progress_bar(target.name)
    path = None
    try:
        with sigterm_raises():  # kill PID cleans up like Ctrl-C: the partial file goes
            path = download_weights(
                args.model, progress=bar, timeout=args.timeout, force=args.force, min_rate=args.min_rate * 1000
            )
    except Terminated:
        pass
    finally:
        if bar.drawn:
            sys.stderr.write("\n")  # end the bar's line, so that what follows starts on its own
    if path is None:
        print("hookscope: download stopped (SIGTERM); nothing was saved to the cache", file=sys.stderr)
        return SIGTERM_EXIT
    print(path)
    return 0


def _hub_bar(label: str):
    """The progress bar of a download from the Hugging Face Hub, announced by one line when bytes start to come
    (not before: the Hub may answer that the name does not exist, or be unreachable with the files cached)."""
    from app.core.models import hub as hub_models

    bar = _progress_bar(label)

    def show(done: int, total: int | None, rate: float) -> None:
        if not bar.drawn:
            print(f"hookscope: downloading {label} from {hub_models.hub_endpoint()} into {hub_models.hub_cache()}",
                  file=sys.stderr)  # fmt: skip
        bar(done, total, rate)
        show.drawn = bar.drawn

    show.drawn = False
    return show


def run_hub_download(args: argparse.Namespace) -> int:
    """hookscope download --model hf:ORG/NAME (the model's files) or timm/NAME (timm's pretrained weights), into the
    Hugging Face cache; Ctrl-C keeps the part that came, and the next download resumes it."""
    from app.core.models import hub as hub_models
    from app.core.models.catalogue import check_model_name

    check_model_name(args.model)
    if args.force or args.min_rate != 10.0:
        print(
            "hookscope: --force and --min-rate are for torchvision's weights; a download from the Hugging Face Hub "
            "checks each file against the Hub's checksum and resumes what a stopped one left",
            file=sys.stderr,
        )
    if args.model.startswith("timm/"):
        arch = args.model[len("timm/") :]
        label = f"{args.model}'s weights"
        fetch = lambda bar: hub_models.fetch_timm_weights(arch, progress=bar, timeout=args.timeout)  # noqa: E731
    else:
        label = args.model
        fetch = lambda bar: hub_models.fetch_model(args.model, "default", progress=bar, timeout=args.timeout)  # noqa: E731
    bar = _hub_bar(label)
    path = None
    try:
        with sigterm_raises():
            path = fetch(bar)
    except Terminated:
        pass
    finally:
        if bar.drawn:
            sys.stderr.write("\n")
    if path is None:
        print("hookscope: download stopped (SIGTERM); the part that came is kept and the next download resumes it",
              file=sys.stderr)  # fmt: skip
        return SIGTERM_EXIT
    print(path)
    return 0


def build_visualize_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope visualize",
        description="Dream a channel: optimise an image that excites one channel of a module (activation "
        "maximisation, read through a forward hook), and write it as a picture.",
    )
    _add_model_options(parser)
    # the old spelling of --seed (before --seed became the weights' seed here too, as in every command)
    parser.add_argument("--weights-seed", type=int, dest="seed", help=argparse.SUPPRESS)
    _add_model_file_options(parser)
    parser.add_argument("--layer", required=True, metavar="PATH", help="the module to read, e.g. layer3.1")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--channel", type=int, metavar="K", help="the channel to excite (default: the whole layer)")
    what.add_argument("--direction", metavar="FILE", help="a direction over the layer's channels (.npy or text)")
    parser.add_argument("--steps", type=int, default=256, help="optimisation steps (default: 256)")
    parser.add_argument("--size", type=int, default=224, help="image size in pixels (default: 224)")
    parser.add_argument("--opt-seed", type=int, default=0, metavar="N",
                        help="seed of the optimisation: one seed, one image (default: 0)")  # fmt: skip
    parser.add_argument("--negative", action="store_true", help="minimise instead: what the channel responds to least")
    parser.add_argument("--images", type=int, default=1, metavar="N", help="several images side by side (default: 1)")
    parser.add_argument("--diversity", type=float, default=0.0, metavar="W", help="with --images: make them differ")
    parser.add_argument("--out", required=True, metavar="FILE.png",
                        help="the picture to write (after Ctrl-C or SIGTERM: the picture so far)")  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def run_visualize(args: argparse.Namespace) -> int:
    """visualize: optimise an image for a channel; one final line with the objective and the time per step.

    Ctrl-C or SIGTERM stops at the next step: the picture so far is written, and one line says so (exit 130 or 143).
    """
    import numpy as np
    from PIL import Image

    from app.core.engine.devices import resolve_device
    from app.core.engine.memory_fit import available_memory, refuse_unless_fits
    from app.core.teaching.visualize import (
        Objective,
        VisualizeSettings,
        find_module,
        load_direction,
        memory_need,
        visualize,
    )

    out = Path(args.out)
    if args.steps < 1:  # no step, no time per step to report
        raise HookscopeError(f"--steps must be at least 1, not {args.steps}.")
    if out.suffix.lower() not in Image.registered_extensions():
        raise HookscopeError(f"Cannot write '{out}': give a picture file name such as out.png.", path=str(out))
    if not out.parent.is_dir():
        missing = (
            f"a file is in the way: '{out.parent}'"
            if out.parent.exists()
            else f"the folder '{out.parent}' does not exist"
        )
        raise HookscopeError(f"Cannot write '{out}': {missing}.", path=str(out))
    direction = load_direction(args.direction) if args.direction else None
    objective = Objective(args.layer, args.channel, direction=direction, negative=args.negative)
    settings = VisualizeSettings(steps=args.steps, size=args.size, seed=args.opt_seed, images=args.images,
                                 diversity=args.diversity, device=str(resolve_device(args.device)))  # fmt: skip
    with sigterm_raises():  # kill PID while the model loads: one line, exit 143
        loaded = load_for_cli(args)
        loaded.module.to(settings.device)
        find_module(loaded.module, args.layer)  # a wrong name first, in its own words
        need, free = memory_need(loaded.module, loaded.preprocess, args.layer), available_memory(settings.device)
        refuse_unless_fits("one image", args.size, lambda size: need(size, 1), 16, free, "--size")
        refuse_unless_fits(f"images of {args.size}x{args.size} pixels", args.images,
                           lambda images: need(args.size, images), 1, free, "--images")  # fmt: skip

    with ProgressLine("visualize", "steps") as line, stop_on_signals() as stop:
        result = visualize(loaded.module, objective, loaded.preprocess, settings, cancelled=stop,
                           progress=lambda step, value, _image: line.update(step, settings.steps,
                                                                             f"objective {value:.4g}"))  # fmt: skip
    strip = np.concatenate(result.images, axis=1) if len(result.images) > 1 else result.image
    try:
        Image.fromarray(strip).save(out)
    except (OSError, ValueError) as error:
        raise HookscopeError(f"Cannot write '{out}': {error}", path=str(out)) from error
    if stop.requested:
        print(f"hookscope: stopped ({stop.signal_name}) after {result.steps_done} of {settings.steps} steps; the "
              f"picture so far: {out}", file=sys.stderr)  # fmt: skip
        return stop.exit_status
    print(
        f"{objective.describe()} of {loaded.display_name} ({loaded.weights_text}), {result.steps_done} steps at "
        f"{settings.size}x{settings.size}, opt-seed {settings.seed}: objective {result.objective_start:.4g} -> "
        f"{result.objective_end:.4g}; {result.step_ms:.1f} ms per step vs a bare forward+backward "
        f"{result.bare_ms:.1f} ms (ratio {result.ratio:.2f}, median of {len(result.pair_ratios)} adjacent pairs) -> {out}"
    )
    if result.non_finite_line():
        print(f"hookscope: warning: {result.non_finite_line()}", file=sys.stderr)
    return 0


def build_lessons_parser() -> argparse.ArgumentParser:
    from app.core.teaching.lessons import LESSONS

    parser = argparse.ArgumentParser(
        prog="hookscope lessons",
        description=f"The four hooks in {len(LESSONS)} lessons (as in the window's Help > Learn the hooks): list "
        "the lessons, or run every one on a model with real hooks and check that it reproduces its claim "
        "(--run-all; exit 0 when every lesson does, 1 otherwise).",
    )
    _add_model_options(parser)
    _add_model_file_options(parser)
    parser.add_argument("--image", metavar="PATH", help="image A (default: the bundled sample photograph)")
    parser.add_argument("--size", type=int, default=112, help="input size in pixels (default: 112; 0: the model's own)")
    parser.add_argument("--run-all", action="store_true", help="run every lesson and print one line each")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def run_lessons(args: argparse.Namespace) -> int:
    """lessons: the list; with --run-all one line per lesson (its numbers, ok or failed)."""
    from app.core.common.resources import resource, sample_image
    from app.core.engine.devices import resolve_device
    from app.core.models.images import read_image
    from app.core.teaching.lessons import LESSONS, lesson_inputs, model_code_for, result_line

    if not args.run_all:
        for item in LESSONS:
            print(f"{item.id:<20} {item.hook:<9} {item.title}")
        print("hookscope: run them all on a model with --run-all", file=sys.stderr)
        return 0
    if args.size < 0:
        raise HookscopeError(f"--size must be a number of pixels (or 0 for the model's own), not {args.size}.")
    device = resolve_device(args.device)
    image = read_image(args.image or sample_image())
    other = resource("coffee.png")
    loaded = load_for_cli(args)
    loaded.module.to(device)
    inputs = lesson_inputs(loaded.module, loaded.preprocess, image, read_image(other), args.size or None)
    if inputs.note:
        print(f"hookscope: {inputs.note}", file=sys.stderr)
    failed = []
    with ProgressLine("lessons", "lessons") as line, sigterm_raises():  # kill PID: the lessons so far, one line, 143
        for index, item in enumerate(LESSONS):
            line.update(index, len(LESSONS), f"running {item.id}")
            result = item.run(loaded.module, inputs.x, picks=inputs.picks, other=inputs.other,
                              model_code=model_code_for(loaded), other_text=other.name)  # fmt: skip
            line.echo(result_line(result), file=sys.stdout)
            if not result.ok:
                failed.append(item.id)
                line.echo(f"hookscope: {item.id}: {result.claim}")
        line.update(len(LESSONS), len(LESSONS))
    size = "x".join(map(str, inputs.x.shape[-2:]))
    if failed:
        print(f"hookscope: {len(failed)} of {len(LESSONS)} lessons failed on {loaded.display_name} at {size}: "
              f"{', '.join(failed)}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"hookscope: all {len(LESSONS)} lessons reproduced their claims on {loaded.display_name} at {size}",
          file=sys.stderr)  # fmt: skip
    return 0


def run_desktop_entry(install: bool) -> int:
    from app.system.desktop_entry import install_desktop_entry, uninstall_desktop_entry

    if install:
        path = install_desktop_entry()
        print(f"hookscope: menu entry written: {path}")
    else:
        path = uninstall_desktop_entry()
        print(f"hookscope: menu entry removed: {path}" if path else "hookscope: there was no menu entry to remove")
    return 0


def run_window(args: argparse.Namespace) -> int:
    if args.install_desktop_entry or args.uninstall_desktop_entry:
        return run_desktop_entry(args.install_desktop_entry)
    from app.system.startup import report_startup_error

    try:
        from app.ui.app import run_gui
    except (ImportError, OSError) as error:  # Qt (or a system library it needs) did not load: no window to say so
        import traceback

        return report_startup_error(f"The window's libraries could not be loaded ({error}).", traceback.format_exc())
    return run_gui(
        image=args.images[0] if args.images else None,
        more_images=args.images[1:],
        model=args.model,
        weights=args.weights,
        device=args.device,
        screenshot=args.screenshot,
        check=args.check,
        self_test=args.self_test,
        size=args.size,
        ticks=args.ticks,
    )


if __name__ == "__main__":
    raise SystemExit(main())
