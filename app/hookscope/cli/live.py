"""``hookscope live``: a video file or a camera through the hooked model, frame after frame; with ``--measure``, against
the model alone (``hookscope.core.live``). ``export --video`` (the captures of a range of a file's frames) is in ``hookscope.cli.export``.

Errors a user can cause are one line and exit 2, as everywhere in the command line; Ctrl-C and SIGTERM stop a live
run with one line, after saying what it processed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import TYPE_CHECKING

from hookscope.cli.common import (
    add_model_file_options,
    add_model_options,
    comma_list,
    hooks_help,
    kinds_argument,
    load_for_cli,
    not_negative_int,
    positive_int,
    refuse_writing_over_inputs,
    register_for_cli,
    target_argument,
)
from hookscope.cli.words import cli_words
from hookscope.core.common.errors import HookscopeError

if TYPE_CHECKING:
    from hookscope.core.engine.capture import RunResult
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.live.video import Frame, RecordingFull, VideoRecorder

BARE_RUNS = 5  # --measure's runs of the model alone before and after the frames, when --bare-runs does not say


def build_live_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope live",
        description="Play a video file (or a camera) through the hooked model frame after frame, the newest frame "
        "winning when the model is slower than the source, and say what was processed; with --measure, next to the "
        "model's own forward+backward rate, measured in the same run.",
    )
    add_model_options(parser)
    add_model_file_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--video", metavar="FILE", help="a video file (mp4, avi, mkv, webm, mov, ...)")
    source.add_argument("--camera", type=not_negative_int, metavar="N", help="camera number N (see --list-cameras)")
    source.add_argument("--list-cameras", action="store_true", help="list the cameras found and exit")
    parser.add_argument("--layers", default="all", help="'all' or module paths separated by commas (default: all)")
    parser.add_argument("--hooks", type=kinds_argument, default=["forward", "backward"],
                        help=hooks_help("act,grad_out"))  # fmt: skip
    parser.add_argument(
        "--target", type=target_argument, default="top1", help="'top1' or a class index for the gradient"
    )
    parser.add_argument("--frames", type=positive_int, metavar="N",
                        help="frames to run through the hooks, or fewer when the file ends first (default: the whole "
                        "file; a camera, or --loop, until Ctrl-C)")  # fmt: skip
    parser.add_argument(
        "--unpaced", action="store_true",
        help="read the file as fast as the model takes frames, none dropped, instead of at its own frame rate "
        "(as a camera gives them, the newest winning)",
    )  # fmt: skip
    parser.add_argument("--loop", action="store_true", help="play the file again from the start when it ends")
    parser.add_argument("--measure", action="store_true",
                        help="the benchmark: also time the model alone before and after the frames (--bare-runs) and "
                        "print the processed rate against it")  # fmt: skip
    parser.add_argument("--bare-runs", type=positive_int, metavar="K",
                        help="with --measure (giving it measures): runs of the model alone before and after the hooked "
                        f"frames (default: {BARE_RUNS})")  # fmt: skip
    parser.add_argument(
        "--record", metavar="OUT.mp4",
        help="write what was seen as a video (.mp4 or .avi): the input as the model sees it with --record-layer's "
        "panel beside it, each picture held until the next processed frame, at the source's frame rate",
    )  # fmt: skip
    parser.add_argument("--record-layer", metavar="PATH",
                        help="the module whose panel --record shows (default: the first of --layers)")  # fmt: skip
    parser.add_argument("--record-cam", action="store_true",
                        help="--record shows --record-layer's Grad-CAM over the input instead of its panel (needs "
                        "act and a gradient in --hooks, e.g. act,grad)")  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def _close_recording(recorder: VideoRecorder | None) -> RecordingFull | None:
    """Close --record's file; the error to end with when its disk filled up (what the file kept, read back)."""
    from hookscope.core.live.video import RecordingFull

    if recorder is None:
        return None
    try:
        recorder.close()
    except RecordingFull as full:
        return full
    return None


def _record_panel(args: argparse.Namespace) -> tuple[str, str]:
    """--record's module and hook kind (activations when they are hooked, else the first kind)."""
    layer = args.record_layer or (
        comma_list(args.layers)[0] if args.layers != "all" and comma_list(args.layers) else None
    )
    if layer is None:
        raise HookscopeError("--record with --layers all needs --record-layer PATH: the module whose panel to show.")
    if args.layers != "all" and layer not in comma_list(args.layers):
        raise HookscopeError(f"--record-layer {layer} is not one of --layers; hook it too.")
    if args.record_cam:
        from hookscope.core.engine.hooks import OUTPUT_GRADIENT_KINDS
        from hookscope.core.live.runner import GRAD_CAM

        if "forward" not in args.hooks or not set(args.hooks) & set(OUTPUT_GRADIENT_KINDS):
            raise HookscopeError("--record-cam needs activations and gradients: --hooks act,grad (or "
                                 "act,grad_out).")  # fmt: skip
        return layer, GRAD_CAM
    return layer, "forward" if "forward" in args.hooks else args.hooks[0]


# long because: the command's steps in order (refuse before the model loads, run, one line per way the run ended), all
# on the same args, source, recorder and report
def run_live(args: argparse.Namespace) -> int:
    """live: the source through the hooks; one line of what ran, one of the rates; Ctrl-C/SIGTERM stop it."""
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.live.runner import SeenView, live_run, model_alone_text, seen_picture, source_bound_text
    from hookscope.core.live.video import VideoRecorder, list_cameras, no_camera_error, open_camera, open_video
    from hookscope.system.termination import SIGTERM_EXIT, sigterm_raises

    if args.list_cameras:
        cameras = list_cameras()
        for camera in cameras:
            print(f"{camera.index}: {camera.name}")
        if not cameras:
            print(f"hookscope: {cli_words(no_camera_error())}", file=sys.stderr)
        return 0
    if args.loop and args.camera is not None:
        raise HookscopeError("--loop goes with --video (a camera does not end).")
    if args.unpaced and args.camera is not None:
        raise HookscopeError("--unpaced goes with --video (a camera gives frames at its own rate).")
    if (args.record_layer or args.record_cam) and not args.record:
        raise HookscopeError(f"{'--record-layer' if args.record_layer else '--record-cam'} goes with --record OUT.mp4.")
    refuse_writing_over_inputs(args)  # --record over the --video it plays
    resolve_device(args.device)
    source = open_video(args.video) if args.video else open_camera(args.camera)  # a bad file fails before the model
    source.close()
    recorder = None
    if args.record:
        panel = _record_panel(args)
        recorder = VideoRecorder(args.record, source.info.fps or 25.0)  # a bad file name fails before the model too
    loaded = load_for_cli(args)
    if recorder is not None and panel[0] not in dict(loaded.module.named_modules()):
        raise HookscopeError(f"The model has no module named '{panel[0]}' (--record-layer).", module_path=panel[0])

    def register(registry: HookRegistry) -> None:
        register_for_cli(registry, args, loaded.preprocess)

    source = open_video(args.video) if args.video else open_camera(args.camera)

    def record(frame: Frame, result: RunResult) -> None:
        assert recorder is not None  # only called with --record
        recorder.add(frame.index, seen_picture(loaded, result, *panel))

    measure = args.measure or args.bare_runs is not None
    try:
        with sigterm_raises():  # kill PID stops the run as Ctrl-C does: the hooks go, the rates so far are printed
            report = live_run(loaded, source, register, frames=args.frames, paced=not args.unpaced, loop=args.loop,
                              device=args.device, target=args.target,
                              bare_runs=(args.bare_runs or BARE_RUNS) if measure else 0,
                              on_result=record if recorder is not None else None,
                              on_start=lambda: print(f"hookscope: playing {source.info.name} through the hooks; "
                                                     "Ctrl-C stops", file=sys.stderr, flush=True))  # fmt: skip
    finally:
        recording_full = _close_recording(recorder)  # a playable file, however the run ended
    info = source.info
    mode = "as fast as the model takes them" if args.unpaced else "at its own rate"
    size = "x".join(map(str, report.input_shape[-2:])) or "?"
    print(f"{loaded.display_name} on {resolve_device(args.device)}, {report.hooks} hooks ({'+'.join(args.hooks)}), "
          f"input {size}; source {info.describe()}, read {mode}")  # fmt: skip
    if report.frames:
        memory = ""
        if report.rss_mb:
            memory = f"; memory {report.rss_mb[0]:.0f} -> {report.rss_mb[1]:.0f} MB"
        alone, drift = model_alone_text(*report.bare_phases) if measure else ("", None)
        against = f"{alone}; processed/model {report.ratio:.3f}; " if measure else ""
        print(
            f"processed {report.frames} frames in {report.seconds:.2f} s: {report.processed_fps:.2f} fps "
            f"(source delivered {report.read} at {report.source_fps:.2f} fps, dropped {report.dropped}); "
            f"{against}hooked forward+backward median {statistics.median(report.hooked_ms):.1f} ms{memory}"
        )
        if drift is not None:
            print(f"hookscope: {drift}", file=sys.stderr)
        remedy = "--unpaced" if args.video else None  # a camera has its own rate
        bound = (
            None
            if args.unpaced or not measure
            else source_bound_text(report.processed_fps, report.source_fps, report.engine_fps, remedy)
        )
        if bound is not None:
            print(f"hookscope: {bound}", file=sys.stderr)
    if recording_full is not None:  # the disk filled up: how much of the recording is kept, exit 2
        raise recording_full
    if recorder is not None and recorder.frames_written:
        print(f"recorded {recorder.frames_written} pictures ({recorder.frames_written / recorder.fps:.1f} s at "
              f"{recorder.fps:g} fps) of {SeenView(*panel).describe()} -> {recorder.path}")  # fmt: skip
    if report.error is not None:
        raise report.error
    if report.ended_by in ("Ctrl-C", "SIGTERM"):
        print(f"hookscope: live stopped after {report.frames} frames ({report.ended_by})", file=sys.stderr)
        return SIGTERM_EXIT if report.ended_by == "SIGTERM" else 130
    if report.ended_by == "end" and not report.frames:
        raise HookscopeError(f"'{info.name}' gave no frame to run.")
    if report.ended_by == "end" and args.frames is not None and report.frames < args.frames:
        print(
            f"hookscope: the source ended after {report.frames} of the {args.frames} frames asked for", file=sys.stderr
        )
    return 0
