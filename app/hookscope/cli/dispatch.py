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
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TextIO

from hookscope._version import __version__
from hookscope.cli.bench import build_bench_parser, run_bench
from hookscope.cli.common import add_model_options, comma_list, kinds_argument, readable_error
from hookscope.cli.download import build_download_parser, run_download
from hookscope.cli.export import build_export_parser, run_export
from hookscope.cli.live import build_live_parser, run_live
from hookscope.cli.progress import end_progress_lines
from hookscope.cli.reference import render_reference
from hookscope.cli.scan import build_scan_parser, run_scan_command
from hookscope.cli.teach import build_lessons_parser, build_visualize_parser, run_lessons, run_visualize
from hookscope.core.common.errors import HookscopeError, write_error
from hookscope.core.common.project import homepage, releases_page
from hookscope.core.common.vocabulary import word_of, words_text
from hookscope.core.teaching.guide import CLI_REFERENCE
from hookscope.system.allocator import keep_freed_memory
from hookscope.system.termination import (
    INTERRUPT_EXIT,
    SIGTERM_EXIT,
    STOP_STATUSES,
    Terminated,
    end_process,
    ignore_stops,
    stop_deadline,
    stopped_line,
    stops_deferred,
)

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


def about_lines() -> str:
    """The version and where the project and its downloads are ([project.urls], read from the metadata)."""
    lines = f"Hookscope {__version__}"
    if home := homepage():
        lines += f": {home}"
    if releases := releases_page():
        lines += f"\nDownloads (installers for Linux, Windows and macOS): {releases}"
    return lines + "\n"


class WindowParser(argparse.ArgumentParser):
    """The window's parser: its help ends with the version and the project's addresses, read only when the help
    is printed (the metadata lookup costs tens of milliseconds a window start does not need)."""

    def format_help(self) -> str:
        return super().format_help() + "\n" + about_lines()


class Renamed(argparse.Action):
    """An option under its old name: its value goes where the new name's does, said once in a warning line."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        new = "--" + self.dest.replace("_", "-")
        print(f"hookscope: warning: {option_string} is now {new}; the old name still works, for now.", file=sys.stderr)
        setattr(namespace, self.dest, values)


def build_window_parser() -> argparse.ArgumentParser:
    """``hookscope`` without a subcommand: the window, its images and options."""
    parser = WindowParser(
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
    parser.add_argument("--tick", type=comma_list, metavar="PATH,PATH", help="modules to tick (the --hooks columns)")
    parser.add_argument(  # the words of export's --hooks; a kind with no column is ticked as the column showing it
        "--hooks", type=kinds_argument, metavar="WORDS", help=f"what --tick ticks: {words_text()} (default: act,grad)"
    )
    # The names before one vocabulary (tick, not check; --hooks as export's): still taken, with a warning line.
    parser.add_argument("--check", type=comma_list, dest="tick", action=Renamed, help=argparse.SUPPRESS)
    parser.add_argument("--ticks", type=kinds_argument, dest="hooks", action=Renamed, help=argparse.SUPPRESS)
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


def main(argv: Sequence[str] | None = None) -> int:
    """The command; ``argv`` None: this process's own command line (the console script, ``python -m hookscope``).

    Ctrl-C or SIGTERM at any moment, parsing included, is one line and exit 130 or 143. For the process's own
    command line a signal also arms ``termination.stop_deadline``, and a stopped command ends its process at once
    (``termination.end_process``): nothing a model file started, and no slow teardown, keeps it alive."""
    process = argv is None
    args_list = list(sys.argv[1:] if argv is None else argv)
    subcommand = bool(args_list) and args_list[0] in SUBCOMMANDS
    try:
        with stop_deadline() if process and subcommand else nullcontext():
            with worded_warnings() if subcommand else nullcontext():
                status = _main(args_list)
    except KeyboardInterrupt as stop:  # outside the command's own handling: while parsing, or while saying an error
        end_progress_lines()
        status = SIGTERM_EXIT if isinstance(stop, Terminated) else INTERRUPT_EXIT
        print(stopped_line(status), file=sys.stderr)
    if process and status in STOP_STATUSES:
        end_process(status)
    if process and subcommand:
        ignore_stops()  # the work is done and said: a Ctrl-C in the interpreter's teardown no longer kills it (-2)
    return status


@contextmanager
def worded_warnings() -> Iterator[None]:
    """A library's warning (torch's, transformers') as one line in Hookscope's words, each said once, instead of its
    file, line and source text."""
    said: set[str] = set()
    previous = warnings.showwarning

    def show(  # warnings.showwarning's signature
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        text = " ".join(str(message).split())
        if text in said:
            return
        said.add(text)
        source = os.path.basename(os.path.dirname(filename)) if filename.endswith("__init__.py") else filename
        library = _library_of(source)
        end_progress_lines()
        print(f"hookscope: warning from {library}: {text}", file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def _library_of(filename: str) -> str:
    """The package a warning came from, by its file (``.../site-packages/torch/nn/modules/module.py``: torch)."""
    parts = filename.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return parts[parts.index(marker) + 1].removesuffix(".py")
    return "hookscope" if "hookscope" in parts else os.path.splitext(parts[-1])[0] or "a library"


def _main(args_list: list[str]) -> int:
    keep_freed_memory()  # every command, the window too: a run's freed memory serves the next run
    command: Callable[[argparse.Namespace], int]
    if args_list and args_list[0] in SUBCOMMANDS:
        build, command = COMMANDS[args_list[0]]  # only the parser asked for is built (lessons' imports the lessons)
        args = build().parse_args(args_list[1:])
    else:
        # files after options too, as a desktop's %F passes them
        args = build_window_parser().parse_intermixed_args(args_list)
        command = run_window
    try:
        if command is not run_window:
            with stops_deferred():  # a Ctrl-C inside torch's own loading aborts the process (-6) instead
                import torch  # noqa: F401
        return command(args)
    except HookscopeError as error:
        end_progress_lines()  # every error on its own line, never glued to a progress line
        if args.debug:
            raise
        print(f"hookscope: error: {readable_error(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        end_progress_lines()
        status = SIGTERM_EXIT if isinstance(stop, Terminated) else INTERRUPT_EXIT
        print(stopped_line(status), file=sys.stderr)
        return status
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


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """``{"": the window's parser, "export": ..., ...}``: every parser ``hookscope`` dispatches to, for the
    command-line reference (``reference.render_reference``)."""
    return {"": build_window_parser(), **{name: COMMANDS[name][0]() for name in SUBCOMMANDS}}


def provide_guide_pages() -> None:
    """The window's guide shows the command-line reference made from this command line's parsers (the window, under
    the command line, does not import them)."""
    from hookscope.ui.widgets.guide_reference import provide

    provide(CLI_REFERENCE, lambda: render_reference(command_parsers()))


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
    provide_guide_pages()
    return run_gui(
        image=args.images[0] if args.images else None,
        more_images=args.images[1:],
        model=args.model,
        weights=args.weights,
        device=args.device,
        screenshot=args.screenshot,
        check=args.tick,
        self_test=args.self_test,
        size=args.size,
        ticks=_words(args.hooks),
    )


def _words(kinds: list[str] | None) -> str | None:
    """Kinds as the window's --hooks text (``run_gui`` takes words)."""
    return ",".join(word_of(kind) for kind in kinds) if kinds else None
