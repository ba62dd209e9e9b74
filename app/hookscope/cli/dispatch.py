"""The ``hookscope`` command: the window by default, and headless subcommands (``SUBCOMMANDS``), each a parser and a
function in a module of its own (``COMMANDS``).

Every error a user can cause ends in one readable line on stderr and a non-zero exit; ``--debug`` shows the
traceback instead.

Building the parsers imports no torch, no Qt and no engine module that needs them: ``hookscope --help`` and
``hookscope SUBCOMMAND --help`` answer in a fraction of a second. Each command imports what it runs when it runs
(tests/core/test_cli_help.py checks it; ``python -m hookscope.core.bench.startup`` times it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from hookscope._version import __version__
from hookscope.cli.bench import build_bench_parser, run_bench
from hookscope.cli.common import add_model_options, comma_list, readable_error
from hookscope.cli.download import build_download_parser, run_download
from hookscope.cli.export import build_export_parser, run_export
from hookscope.cli.live import build_live_parser, run_live
from hookscope.cli.progress import end_progress_lines
from hookscope.cli.scan import build_scan_parser, run_scan_command
from hookscope.cli.teach import build_lessons_parser, build_visualize_parser, run_lessons, run_visualize
from hookscope.core.common.errors import HookscopeError, write_error
from hookscope.system.allocator import keep_freed_memory
from hookscope.system.termination import SIGTERM_EXIT, Terminated

SUBCOMMANDS = ("export", "bench", "download", "visualize", "lessons", "scan", "live")
COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], int]]] = {
    "export": (build_export_parser, run_export),
    "bench": (build_bench_parser, run_bench),
    "download": (build_download_parser, run_download),
    "visualize": (build_visualize_parser, run_visualize),
    "lessons": (build_lessons_parser, run_lessons),
    "scan": (build_scan_parser, run_scan_command),
    "live": (build_live_parser, run_live),
}
SUMMARIES = {  # one line each in 'hookscope --help'
    "export": "run images (a file, a folder, a session, a video) through a hooked model; write what the hooks saw",
    "scan": "a dataset scan: each channel's top images and where in them it fires",
    "visualize": "dream a channel: optimise an image that excites it",
    "lessons": "the hook lessons of the window's Help > Learn the hooks, run and checked on a model",
    "live": "a video file or a camera through a hooked model, frame by frame",
    "bench": "time hooked against bare runs (also --batch, --scan)",
    "download": "download a model's pretrained weights into the torch hub cache",
}


def build_window_parser() -> argparse.ArgumentParser:
    """``hookscope`` without a subcommand: the window, its images and options."""
    parser = argparse.ArgumentParser(
        prog="hookscope",
        description="Look inside a PyTorch network: tick modules, drop an image, see what they compute.",
        epilog="Headless subcommands: ('hookscope SUBCOMMAND --help' for the options of each)\n"
        + "".join(f"  {name:<10} {SUMMARIES.get(name, '')}\n" for name in SUBCOMMANDS)
        + "\nThe user guide: Help > User guide in the window.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="images to open: the first is shown, the rest wait in the image list (default: the sample photograph)",
    )
    add_model_options(parser)
    parser.add_argument(
        "--screenshot", metavar="OUT.png", help="save a screenshot of the window after the run and exit"
    )
    parser.add_argument(
        "--check", type=comma_list, metavar="PATH,PATH", help="modules to tick (in the --ticks columns)"
    )
    parser.add_argument(
        "--ticks", metavar="in,act,grad,grad_in", help="which columns --check ticks (default: act,grad)"
    )
    parser.add_argument("--size", metavar="WxH", help="window size in pixels, e.g. 1366x768 (for --screenshot too)")
    parser.add_argument("--self-test", action="store_true", help="run the app offscreen end to end and report")
    parser.add_argument(
        "--install-desktop-entry",
        action="store_true",
        help="add this installation to the desktop's applications menu (Linux) and exit",
    )
    parser.add_argument(
        "--uninstall-desktop-entry",
        action="store_true",
        help="remove Hookscope from the desktop's applications menu (Linux) and exit",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"hookscope {__version__}")
    return parser


def build_parsers() -> tuple[
    argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser
]:
    """The window's parser and those of export, bench and download."""
    return build_window_parser(), build_export_parser(), build_bench_parser(), build_download_parser()


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()  # every command, the window too: a run's freed memory serves the next run
    args_list = list(sys.argv[1:] if argv is None else argv)
    command: Callable[[argparse.Namespace], int]
    if args_list and args_list[0] in SUBCOMMANDS:
        build, command = COMMANDS[args_list[0]]  # only the parser asked for is built (lessons' imports the lessons)
        args = build().parse_args(args_list[1:])
    else:
        # files after options too, as a desktop's %F passes them
        args = build_window_parser().parse_intermixed_args(args_list)
        command = run_window
    try:
        return command(args)
    except HookscopeError as error:
        end_progress_lines()  # every error on its own line, never glued to a progress line
        if args.debug:
            raise
        print(f"hookscope: error: {readable_error(error)}", file=sys.stderr)
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


def run_desktop_entry(install: bool) -> int:
    from hookscope.system.desktop_entry import install_desktop_entry, uninstall_desktop_entry

    if install:
        path = install_desktop_entry()
        print(f"hookscope: menu entry written: {path}")
    else:
        removed = uninstall_desktop_entry()
        print(
            f"hookscope: menu entry removed: {removed}" if removed else "hookscope: there was no menu entry to remove"
        )
    return 0


def run_window(args: argparse.Namespace) -> int:
    if args.install_desktop_entry or args.uninstall_desktop_entry:
        return run_desktop_entry(args.install_desktop_entry)
    from hookscope.system.startup import report_startup_error

    try:
        import torch  # noqa: F401  (torch before any Qt import: a known DLL clash on Windows otherwise)

        from hookscope.ui.app import run_gui
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
