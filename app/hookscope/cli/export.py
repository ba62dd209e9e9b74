"""``hookscope export``: images through a hooked model, and what the hooks saw written in the export layout
(``hookscope.core.outputs.export``): one image or several (``--image``), a folder (``--images``, resumable, with
summary.csv), a saved session (``--session``) or a range of a video's frames (``--video``); ``--script`` also writes
the run as a standalone PyTorch script.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from hookscope.cli.common import (
    add_model_file_options,
    add_model_options,
    building,
    command_line_notice,
    hooks_help,
    images_to_run,
    kinds_argument,
    load_for_cli,
    parse_edits,
    refuse_writing_over_inputs,
    register_for_cli,
    target_argument,
)
from hookscope.cli.progress import ProgressLine
from hookscope.core.common.errors import HookscopeError
from hookscope.system.termination import SIGTERM_EXIT, Terminated, sigterm_raises

if TYPE_CHECKING:
    from collections.abc import Callable

    from hookscope.core.engine.capture import RunResult
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.target_words import Target
    from hookscope.core.live.video import VideoSource
    from hookscope.core.models.loaded import LoadedModel
    from hookscope.core.outputs.batch import BatchProgress


def build_export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope export", description="Run images through a hooked model and write what the hooks saw."
    )
    add_model_options(parser)
    parser.add_argument("--image", action="append", help="image file (repeat for several)")
    parser.add_argument("--images", metavar="DIR", help="every image in a folder: one subfolder each plus summary.csv")
    parser.add_argument("--recursive", action="store_true", help="with --images: look in subfolders too")
    parser.add_argument("--resume", action="store_true", help="with --images: keep images an earlier run finished")
    parser.add_argument(
        "--session", metavar="FILE", help="run a saved session (model, hooks, edits, images) headlessly"
    )
    parser.add_argument("--video", metavar="FILE", help="a video file: the frames --frames names, one folder each")
    parser.add_argument("--frames", type=frame_range, metavar="A:B",
                        help="with --video: frames A to B-1, counted from 0 (A: to the end, N: frame N alone)")  # fmt: skip
    parser.add_argument("--layers", default="all", help="'all' or module paths separated by commas (default: all)")
    parser.add_argument(
        "--hooks",
        type=kinds_argument,
        default=["forward", "tensor"],  # the window's Act and Grad: the same files as its File > Export run
        help=hooks_help("act,grad"),
    )
    parser.add_argument(
        "--target",
        type=target_argument,
        default="top1",
        help="what the gradient is of: top1, a class index, class:C, class:C@x0,y0,x1,y1 (segmentation), "
        "box:N (detection), similar:IMAGE or text:PROMPT (embeddings) (default: top1)",
    )
    parser.add_argument("--out", default="hookscope-out", help="output folder (default: hookscope-out)")
    parser.add_argument("--no-png", action="store_true", help="skip the PNG mosaics")
    parser.add_argument(
        "--script", metavar="OUT.py",
        help="also write a standalone Python script that redoes the run in plain PyTorch (with --image or --session)",
    )  # fmt: skip
    parser.add_argument(
        "--edit",
        action="append",
        metavar="SPEC",
        help="change what flows through a hook (repeat for several): zero:PATH:3,5, keep:PATH:7, scale:PATH:0.5, "
        "scale-input:PATH:2, scale-grad:PATH:1.6, scale-grad-input:PATH:1.6, mix:PATH:0.7:OTHER_IMAGE",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    add_model_file_options(parser)
    return parser


def frame_range(text: str) -> tuple[int, int | None]:
    """``A:B`` (frames A to B-1, counted from 0, as a Python slice), ``A:`` (A to the end) or ``N`` (frame N)."""
    if not text.strip():  # not "frame 0": nothing was named
        raise argparse.ArgumentTypeError("frames are A:B (from A up to, not including, B), A: or N; not ''")
    start_text, colon, stop_text = text.partition(":")
    try:
        start = int(start_text) if start_text.strip() else 0
        stop = (int(stop_text) if stop_text.strip() else None) if colon else start + 1
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"frames are A:B (from A up to, not including, B), A: or N; not '{text}'"
        ) from None
    if start < 0 or (stop is not None and stop <= start):
        raise argparse.ArgumentTypeError(f"frames A:B need 0 <= A < B; not '{text}'")
    return start, stop


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


def _warn_non_finite(manifest: dict) -> None:
    """NaN or inf in the weights, output or captures: one warning line (the manifest's non_finite has the detail).
    The export itself succeeded (what the hooks saw is written, NaN included), so the exit status stays 0."""
    from hookscope.core.engine.numeric import NumericReport

    line = NumericReport.from_description(manifest.get("non_finite")).line()
    if line:
        print(f"hookscope: warning: {line}", file=sys.stderr)


def _warn_non_finite_batch(images: list, root: Path, out: Path) -> None:
    """After a batch: one warning line when any image's manifest says NaN or inf (the first one's sentence)."""
    import json

    from hookscope.core.engine.numeric import NumericReport
    from hookscope.core.outputs.batch import folder_names

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
        from hookscope.core.teaching.script_export import check_script_path

        check_script_path(args.script)
    for flag, value in (("--edit", getattr(args, "edit", None)), ("--model-file", getattr(args, "model_file", None))):
        if value and given[0] == "--session":
            raise HookscopeError(f"{flag} cannot be combined with --session: the session names its own.")
    return given[0]


def run_export(args: argparse.Namespace) -> int:
    mode = _export_mode(args)
    refuse_writing_over_inputs(args)
    if mode == "--images":
        return run_export_batch(args)
    if mode == "--session":
        return run_export_session(args)
    if mode == "--video":
        return run_export_video(args)
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.run import run_image
    from hookscope.core.models.images import read_image
    from hookscope.core.outputs.export import write_run

    resolve_device(args.device)
    images = [read_image(path) for path in args.image]  # fail on a bad image before the slow part
    parse_edits(args)  # and on a bad --edit
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
                                         png=not args.no_png, edits=args.edit or (), progress=line.update)  # fmt: skip
                _report_export(name, folder, manifest, result)
            _write_script(args, loaded, registry, args.image[0], args.target, args.device)
    return 0


def _export_progress(name: str, index: int, count: int) -> ProgressLine:
    """The progress line of one image's export: the run, then every file written (most of the time: the PNGs)."""
    return ProgressLine(f"export {name}" + (f" ({index + 1} of {count})" if count > 1 else ""), "files")


def _report_export(name: str, folder: Path, manifest: dict, result: RunResult) -> None:
    """After one image's export: its line on stdout, a warning for NaN or inf."""
    top = result.top5[0] if result.top5 else None
    best = f"{top.label} ({top.probability:.1%})" if top else "no class scores"
    print(f"{name}: {len(result.records)} records -> {folder}  top-1: {best}")
    _warn_no_target(result)
    _warn_non_finite(manifest)


def _warn_no_target(result: RunResult) -> None:
    """A run whose output held nothing to take the gradient of (a detector that found no object): its forward
    records are written; one line says why there are no gradients."""
    if result.no_target:
        print(f"hookscope: no gradient taken: {result.no_target}", file=sys.stderr)


def _batch_progress(line: ProgressLine) -> Callable[[BatchProgress], None]:
    """The batch's progress on ``line``: "12/100 images (12%), 3.1 images/s, about 28 s left, cat.jpg, skipped 1";
    the rate and the time left count only the images run in this call (not those an earlier run finished)."""

    def show(progress: BatchProgress) -> None:
        what = [progress.image]
        if progress.skipped:
            what.append(f"skipped {progress.skipped}")
        if progress.resumed:
            what.append(f"{progress.resumed} done earlier")
        line.update(progress.handled, progress.total, ", ".join(what), rate=progress.rate)

    return show


def _write_script(
    args: argparse.Namespace, loaded: LoadedModel, registry: HookRegistry, image: str, target: Target, device: str
) -> None:
    """--script OUT.py: the run of ``image`` as a standalone PyTorch script (written after the run, so that the hooks
    are the ones the run used: a full backward hook or its tensor-hook fallback)."""
    if not getattr(args, "script", None):
        return
    from hookscope.core.teaching.script_export import standalone_script, write_script

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
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.outputs.batch import run_batch

    resolve_device(args.device)
    folder, out, images = images_to_run(args)
    parse_edits(args)  # a bad --edit fails before the slow part
    report, stopped_by = None, ""
    try:
        with sigterm_raises():  # kill PID stops like Ctrl-C: the images finished so far stay, for --resume
            loaded = load_for_cli(args)
            with HookRegistry(loaded.module) as registry, ProgressLine("export", "images") as line:
                others = register_for_cli(registry, args, loaded.preprocess)
                report = run_batch(
                    loaded, registry, images, out, root=folder, device=args.device, target=args.target,
                    kinds=tuple(args.hooks), png=not args.no_png, resume=args.resume, progress=_batch_progress(line),
                    others=others, edits=args.edit or (),
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
    from hookscope.core.outputs.batch import DONE_FILE, folder_names

    return sum((out / name / DONE_FILE).is_file() for name in folder_names(images, root))


def run_export_session(args: argparse.Namespace) -> int:
    """--session FILE: the saved model, weights, preprocessing, hooks, edits, target and images, headlessly."""
    from hookscope.core.common.errors import DeviceError, ImageError
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.run import run_image
    from hookscope.core.models.images import read_image
    from hookscope.core.models.source import ModelSource, open_model
    from hookscope.core.outputs.export import write_run
    from hookscope.core.outputs.session import apply_session_edits, load_session, register_session_hooks, session_survey

    session, problems = load_session(args.session)
    # The one line that matters when the session cannot run (its model or weights file is missing); raised
    # before the problem lines are printed.
    source = ModelSource.from_session(session, trust=args.trust, non_strict=args.non_strict)
    for problem in problems:
        print(f"hookscope: {problem}", file=sys.stderr)
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
    loaded.notice = command_line_notice(loaded.notice)
    if loaded.notice:
        print(f"hookscope: {loaded.notice}", file=sys.stderr)
    with HookRegistry(loaded.module) as registry:
        lines = register_session_hooks(registry, session)
        survey = session_survey(loaded.module, session, loaded.preprocess)
        if survey is not None:  # the edits' channels are checked against it: a bad one is a line, not a failed run
            registry.adopt_survey(survey)
        edit_lines, others = apply_session_edits(registry, session, loaded.preprocess)
        for text in lines + edit_lines:
            print(f"hookscope: {text}", file=sys.stderr)
        edits = [edit.spec for edit in registry.enabled_edits()]
        folders = _output_folders(images, Path(args.out))
        for index, (name, image, folder) in enumerate(zip(images, pictures, folders)):
            with _export_progress(name, index, len(images)) as line, sigterm_raises():
                line.stage("running the model")
                result = run_image(
                    loaded, registry, image, device=device, target=session.target, others=others,
                    baseline=bool(edits),
                )  # fmt: skip
                if name == images[0]:
                    line.end_line()
                    _write_script(args, loaded, registry, name, session.target, device)
                line.stage("writing the files")
                manifest = write_run(
                    result, loaded, folder, image=name, kinds=session.kinds, png=not args.no_png,
                    colormap=session.colormap, scaling=session.scaling, edits=edits, progress=line.update,
                )  # fmt: skip
            _report_export(name, folder, manifest, result)
    return 0


def run_export_video(args: argparse.Namespace) -> int:
    """export --video FILE --frames A:B: one folder per frame (OUT/frame-000012), as ``export --image`` writes."""
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.live.video import open_video
    from hookscope.core.outputs.frames import kept_text

    if args.frames is None:
        raise HookscopeError("--video needs --frames A:B, the frames to write (e.g. --frames 0:10).")
    if getattr(args, "script", None):
        raise HookscopeError("--script goes with --image or --session (a script redoes one image's run).")
    start, stop = args.frames
    resolve_device(args.device)
    source = open_video(args.video)  # a bad file fails before the model is built
    if source.info.frame_count and start >= source.info.frame_count:
        source.close()
        raise HookscopeError(f"'{source.info.name}' has {source.info.frame_count} frames (0-{source.info.frame_count - 1}); "
                             f"--frames {start}:{'' if stop is None else stop} starts after them.")  # fmt: skip
    parse_edits(args)
    out = Path(args.out)
    written: list[int] = []
    try:
        with sigterm_raises():  # kill PID stops like Ctrl-C: the frames written whole stay, one line says which
            loaded = load_for_cli(args)
            last = (stop if stop is not None else (source.info.frame_count or 1_000_000)) - 1
            _export_frames(args, loaded, source, out, max(6, len(str(last))), written)
    except KeyboardInterrupt as stop_signal:
        source.close()
        said = "stopped (SIGTERM)" if isinstance(stop_signal, Terminated) else "interrupted"
        print(f"hookscope: {said}; {kept_text(written, out)}; the frame being written was not kept.", file=sys.stderr)
        return SIGTERM_EXIT if isinstance(stop_signal, Terminated) else 130
    if not written:
        raise HookscopeError(f"'{args.video}' has no frame in --frames {start}:{'' if stop is None else stop}.")
    if stop is not None and start + len(written) < stop:
        print(f"hookscope: the video ended at frame {start + len(written) - 1}; {len(written)} of the {stop - start} "
              f"frames asked for were written", file=sys.stderr)  # fmt: skip
    return 0


def _export_frames(
    args: argparse.Namespace, loaded: LoadedModel, source: VideoSource, out: Path, width: int, written: list[int]
) -> None:
    """export --video's frames, each into its folder whole or not at all (``core.outputs.frames``), their indexes
    added to ``written`` as they are. A full disk is one line naming the disk and what is kept."""
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.objectives import with_reference
    from hookscope.core.engine.run import run_image
    from hookscope.core.live.runner import frame_input
    from hookscope.core.outputs.export import write_run
    from hookscope.core.outputs.frames import disk_full, frame_name, full_disk_error, remove_leftovers, write_frame

    start, stop = args.frames
    index = start
    try:
        with source, HookRegistry(loaded.module) as registry:
            others = register_for_cli(registry, args, loaded.preprocess)
            target = with_reference(args.target, loaded)  # similar:/text: the embedding compared with, made once
            remove_leftovers(out)
            source.skip_to(start)
            while stop is None or source.frames_read < stop:
                frame = source.read()  # raises for a truncated file, after the frames it holds were written
                if frame is None:
                    break
                index = frame.index
                result = run_image(loaded, registry, frame_input(loaded, frame), device=args.device, target=target,
                                   others=others, baseline=bool(args.edit))  # fmt: skip
                extra = {"video": {"file": str(args.video), "frame": frame.index, "time_s": round(frame.time_s, 6)}}
                write = partial(write_run, result, loaded, image=f"{args.video}#frame={frame.index}",
                                kinds=tuple(args.hooks), png=not args.no_png, edits=args.edit or (), extra=extra)  # fmt: skip
                manifest = write_frame(out, frame_name(frame.index, width), write)
                written.append(frame.index)
                top = result.top5[0] if result.top5 else None
                best = f"{top.label} ({top.probability:.1%})" if top else "no class scores"
                print(f"frame {frame.index} ({frame.time_s:.3f} s): {len(result.records)} records -> "
                      f"{out / frame_name(frame.index, width)}  top-1: {best}")  # fmt: skip
                _warn_no_target(result)
                _warn_non_finite(manifest)
    except OSError as error:
        if disk_full(error, out):
            raise full_disk_error(error, out, index, written) from error
        raise
