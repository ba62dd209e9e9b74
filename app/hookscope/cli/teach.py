"""The teaching commands: ``hookscope visualize`` (dream a channel: an image optimised to excite it, read through a
forward hook) and ``hookscope lessons`` (the window's Help > Learn the hooks, run and checked on a model). The work is
in ``hookscope.core.teaching``; this parses, opens the model, shows progress and prints the result lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hookscope.cli.common import add_model_file_options, add_model_options, load_for_cli, refuse_writing_over_inputs
from hookscope.cli.progress import ProgressLine, stop_on_signals
from hookscope.core.common.errors import HookscopeError
from hookscope.core.teaching.lesson_ids import LESSON_IDS
from hookscope.system.termination import sigterm_raises


def build_visualize_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope visualize",
        description="Dream a channel: optimise an image that excites one channel of a module (activation "
        "maximisation, read through a forward hook), and write it as a picture.",
    )
    add_model_options(parser)
    add_model_file_options(parser)
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

    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.engine.memory_fit import available_memory, refuse_unless_fits
    from hookscope.core.teaching.visualize import (
        Objective,
        VisualizeSettings,
        find_module,
        load_direction,
        memory_need,
        visualize,
    )

    out = Path(args.out)
    refuse_writing_over_inputs(args)  # --out over --direction, --weights or --model-file
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
    device = str(resolve_device(args.device))
    settings = VisualizeSettings(steps=args.steps, size=args.size, seed=args.opt_seed, images=args.images,
                                 diversity=args.diversity, device=device)  # fmt: skip
    with sigterm_raises():  # kill PID while the model loads: one line, exit 143
        loaded = load_for_cli(args)
        loaded.module.to(device)
        find_module(loaded.module, args.layer)  # a wrong name first, in its own words
        need, free = memory_need(loaded.module, loaded.preprocess, args.layer), available_memory(device)
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
    parser = argparse.ArgumentParser(
        prog="hookscope lessons",
        description=f"The four hooks in {len(LESSON_IDS)} lessons (as in the window's Help > Learn the hooks): list "
        "the lessons, or run every one on a model with real hooks and check that it reproduces its claim "
        "(--run-all; exit 0 when every lesson does, 1 otherwise).",
    )
    add_model_options(parser)
    add_model_file_options(parser)
    parser.add_argument("--image", metavar="PATH", help="image A (default: the bundled sample photograph)")
    parser.add_argument("--size", type=int, default=112, help="input size in pixels (default: 112; 0: the model's own)")
    parser.add_argument("--run-all", action="store_true", help="run every lesson and print one line each")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def run_lessons(args: argparse.Namespace) -> int:
    """lessons: the list; with --run-all one line per lesson (its numbers, ok or failed)."""
    from hookscope.core.common.resources import resource, sample_image
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.models.images import read_image
    from hookscope.core.teaching.lessons import LESSONS, result_line
    from hookscope.core.teaching.lessons.inputs import lesson_inputs
    from hookscope.core.teaching.lessons.networks import model_code_for

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
