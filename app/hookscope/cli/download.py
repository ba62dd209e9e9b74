"""``hookscope download``: a catalogue model's pretrained weights into the torch hub cache, or a model (``hf:``) or
timm's weights (``timm/``) from the Hugging Face Hub into its cache, with a progress bar on stderr; Ctrl-C or SIGTERM
stop it with one line.
"""

from __future__ import annotations

import argparse
import sys

from hookscope.cli.progress import DownloadBar, HubDownloadBar
from hookscope.core.common.errors import HookscopeError
from hookscope.system.termination import SIGTERM_EXIT, Terminated, sigterm_raises


def build_download_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope download",
        description="Download a catalogue model's pretrained weights into the torch hub cache, verified against "
        "the hash in the file name. HOOKSCOPE_WEIGHTS_URL replaces the base address (mirrors).",
    )
    parser.add_argument("--model", default="resnet18", help="torchvision model name, hf:ORG/NAME (a model from the "
                        "Hugging Face Hub, into its cache) or timm/NAME (timm's weights, from the Hub) "
                        "(default: resnet18)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="download again even when the file is cached")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds without data before giving up (default: 30)"
    )
    parser.add_argument(
        "--min-rate", type=float, default=10.0, metavar="KB/S",
        help="give up when a 30 s window averages less than this many kB/s (default: 10; 0: never)",
    )  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def run_download(args: argparse.Namespace) -> int:
    from hookscope.core.models.catalogue import default_weights_file
    from hookscope.core.models.weights import download_weights, weights_url

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
    bar = DownloadBar(target.name)
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


def run_hub_download(args: argparse.Namespace) -> int:
    """hookscope download --model hf:ORG/NAME (the model's files) or timm/NAME (timm's pretrained weights), into the
    Hugging Face cache; Ctrl-C keeps the part that came, and the next download resumes it."""
    from hookscope.core.models import hub as hub_models
    from hookscope.core.models.catalogue import check_model_name

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
    bar = HubDownloadBar(label)
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
