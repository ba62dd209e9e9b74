"""``hookscope scan``: what excites each channel, over a folder of images (``hookscope.core.scan.run``), on this machine or on
a Ray cluster (``--ray``).

Progress, with the time left, is one line redrawn on a terminal and plain lines otherwise, on stderr; Ctrl-C (exit
130) or SIGTERM (exit 143) stops at the next batch, writes the checkpoint and says how to go on (``--resume``) in one
line; a second one stops at once. Errors are one line, as everywhere in the command line.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from hookscope.cli.common import (
    add_model_file_options,
    add_model_options,
    images_to_run,
    load_for_cli,
    model_source,
    positive_int,
    refuse_writing_over_inputs,
    select_layers,
)
from hookscope.cli.progress import ProgressLine
from hookscope.core.common.errors import HookscopeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from hookscope.core.models.loaded import LoadedModel
    from hookscope.core.scan.backends import ScanBackend
    from hookscope.core.scan.results import ScanResult, ScanSettings
    from hookscope.core.scan.run import ScanProgress

DEFAULT_BATCH = 32


def build_scan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope scan",
        description="What excites each channel: over every image in a folder, the top images per channel of each "
        "module (by the channel's maximum, or its mean), where the maximum is, the image region that position sees "
        "(its receptive field from the architecture; with --exact-boxes the pixels the gradient of that one unit "
        "reaches), and each channel's statistics over the whole set. Writes OUT/scan.json (and with --png one strip "
        "of top patches per channel).",
    )
    add_model_options(parser, default_weights="default")
    add_model_file_options(parser)
    parser.add_argument("--images", required=True, metavar="DIR", help="the folder of images")
    parser.add_argument("--recursive", action="store_true", help="look in subfolders too")
    parser.add_argument("--layers", required=True, metavar="PATHS", help="module paths separated by commas, or 'all'")
    parser.add_argument("--top", type=positive_int, default=9, metavar="K", help="top images per channel (default: 9)")
    parser.add_argument("--by", choices=("max", "mean"), default="max",
                        help="rank images by the channel's maximum (default) or its mean over positions")  # fmt: skip
    parser.add_argument("--attention", action="store_true",
                        help="rank the heads of the attention modules in --layers (all: every attention module whose "
                        "weights can be read) instead of their channels: per head the images on which the class "
                        "token's attention is most concentrated (1 - its normalised entropy over the patches)")  # fmt: skip
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (scan.json, png/)")
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"images per forward pass (default: {DEFAULT_BATCH}, or the most that fit in memory when fewer do: a "
        "detector's batches are large)",
    )
    parser.add_argument("--size", type=int, default=0, metavar="PX",
                        help="input size in pixels instead of the model's own (its crop; the resize keeps 256/224)")  # fmt: skip
    parser.add_argument("--png", action="store_true",
                        help="also write one PNG strip of the top patches per channel, each patch with its score and "
                        "image file name")  # fmt: skip
    parser.add_argument("--html", action="store_true",
                        help="also write OUT/index.html: a static page (one per module) of every channel's top images "
                        "with their boxes, scores and file names, to open in any browser")  # fmt: skip
    parser.add_argument("--no-boxes", action="store_true", help="skip the boxes; boxes are null")
    parser.add_argument("--exact-boxes", action="store_true",
                        help="every box by the gradient definition: the pixels whose change changes that unit in that "
                        "image (one gradient pass per top-k entry: minutes); by default a module's box is its "
                        "receptive field from the architecture, where the architecture allows it")  # fmt: skip
    parser.add_argument(
        "--resume", action="store_true", help="go on with a scan an earlier run of the same command stopped"
    )
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run on Ray: a local Ray, the cluster RAY_ADDRESS names, or ADDRESS ('auto', "
                        "'ray://head:10001'); needs pip install 'hookscope[ray]'")  # fmt: skip
    parser.add_argument(
        "--ray-actors",
        type=positive_int,
        default=2,
        metavar="N",
        help="with --ray: actors holding the model (default: 2)",
    )
    parser.add_argument(
        "--ray-gpus", type=float, default=0.0, metavar="G", help="with --ray: GPUs per actor (default: 0)"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks (and, with --ray, Ray's own log lines)")
    return parser


class _Interrupt:
    """Ctrl-C or SIGTERM asks the scan to stop at the next batch (it then writes its checkpoint); a second one stops
    now. Ctrl-C says so on its line; SIGTERM (a service manager, ``kill``) is answered by one line at the end."""

    def __init__(self) -> None:
        self.asked = False
        self.terminated = False  # the stop came from SIGTERM: exit 143, not 130
        self.line_drawn = lambda: False  # whether a progress line is drawn on the terminal (and not ended)

    def __call__(self, signum: int, _frame: object) -> None:
        from hookscope.system.termination import Terminated

        term = signum == getattr(signal, "SIGTERM", None)
        if self.asked:
            raise Terminated(f"signal {signum}") if term or self.terminated else KeyboardInterrupt
        self.asked = True
        self.terminated = term
        if not term:  # written here, without the progress line's lock: the handler may run while it is held
            start = "\n" if self.line_drawn() else ""
            sys.stderr.write(f"{start}hookscope: stopping after this batch (Ctrl-C again to stop now)\n")
            sys.stderr.flush()


@contextmanager
def _stop_signals() -> Iterator[_Interrupt]:
    """Ctrl-C and SIGTERM both go to one ``_Interrupt`` while the scan runs (the main thread only)."""
    interrupt = _Interrupt()
    signals = [s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if s is not None]
    previous = {}
    try:
        for number in signals:
            previous[number] = signal.signal(number, interrupt)
    except ValueError:  # not the main thread (a test calling main() from a thread): the signals stay as they are
        pass
    try:
        yield interrupt
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


UNITS = {"scan": "images", "boxes": "top-k entries", "PNG strips": "strips", "page": "module pages"}


class _Progress:
    """The scan's progress on stderr, every phase (the scan, the boxes, the strips, the page), each with its rate and
    the time left: ``hookscope.cli.progress.ProgressLine``, one line redrawn on a terminal, plain lines elsewhere."""

    def __init__(
        self, stream: TextIO | None = None, report_every: float | None = None, plain_every: float | None = None
    ) -> None:
        self.stream = stream
        self.every: dict[str, Any] = {
            k: v for k, v in (("tty_every_s", report_every), ("plain_every_s", plain_every)) if v is not None
        }
        self._phase: str | None = None
        self._line: ProgressLine | None = None

    @property
    def drawn(self) -> bool:
        return self._line is not None and bool(self._line._drawn)

    def __call__(self, progress: ScanProgress) -> None:
        if progress.phase != self._phase:
            if self._line is not None:
                self._line.close()
            self._phase = progress.phase
            self._line = ProgressLine(progress.phase, UNITS.get(progress.phase, "done"), stream=self.stream,
                                      **self.every)  # fmt: skip
        what = f"{progress.skipped} skipped" if progress.phase == "scan" and progress.skipped else ""
        assert self._line is not None  # made above, at the first progress of a phase
        self._line.update(progress.done, progress.total, what)

    def end_line(self) -> None:
        """End the line drawn so far, so that what follows starts on its own."""
        if self._line is not None:
            self._line.end_line()


def _fit_to_memory(loaded: LoadedModel, settings: ScanSettings, images: int, device: str, batch_asked: bool,
                   local: bool) -> ScanSettings:  # fmt: skip
    """--size, --top and --batch-size that cannot fit in memory are refused before the first image is read, each
    with the largest value that would fit. A batch size not asked for is ``DEFAULT_BATCH``, or the largest batch
    below it that fits (at least 1: one image that does not fit is refused with its own line). ``local``: the scan
    runs in this process (not on Ray's actors)."""
    from hookscope.core.engine.memory_fit import available_memory, largest_fitting, refuse_unless_fits
    from hookscope.core.scan.memory import scan_memory

    memory, free, size = scan_memory(loaded, settings, images, local), available_memory(device), loaded.preprocess.crop
    refuse_unless_fits("one image", size, lambda pixels: memory.need(pixels, 1), 16, free, "--size")
    refuse_unless_fits(f"the top images of {memory.channels} channels", settings.top,
                       lambda k: memory.top(k) + memory.need(size, 1), 1, free, "--top")  # fmt: skip
    top = memory.top(settings.top)  # held while every batch runs
    if not batch_asked and free is not None and memory.need(size, DEFAULT_BATCH) + top > free:
        fits = largest_fitting(lambda batch: memory.need(size, batch) + top, 1, DEFAULT_BATCH - 1, free) or 1
        settings = replace(settings, batch_size=fits)
    refuse_unless_fits(f"batches of {size}x{size} pixels", settings.batch_size,
                       lambda batch: memory.need(size, batch) + top, 1, free, "--batch-size",
                       " (or --no-boxes)" if settings.boxes else "")  # fmt: skip
    return settings


def run_scan_command(args: argparse.Namespace) -> int:
    from hookscope.core.engine.devices import resolve_device
    from hookscope.core.scan.results import ScanSettings

    if args.size < 0:
        raise HookscopeError(f"--size must be a number of pixels (or 0 for the model's own), not {args.size}.")
    refuse_writing_over_inputs(args)  # --out over --weights or --model-file
    unreadable: list[tuple[Path, str]] = []  # folders left out, with their reasons
    folder, out, images = images_to_run(args, unreadable)
    device = str(resolve_device(args.device))
    loaded = load_for_cli(args)
    if args.size:
        loaded.preprocess = replace(loaded.preprocess, crop=args.size, resize=args.size * 256 // 224)
    modules = _scanned_modules(args, loaded)
    settings = ScanSettings(tuple(modules), top=args.top, by=args.by, batch_size=args.batch_size or DEFAULT_BATCH,
                            boxes=not args.no_boxes, exact_boxes=args.exact_boxes,
                            heads=tuple(modules) if args.attention else ())  # fmt: skip
    settings = _fit_to_memory(loaded, settings, len(images), device, args.batch_size is not None, args.ray is None)
    backend = _backend(args, loaded, settings, images, device)
    try:
        done = _scan_and_write(args, backend, loaded, images, settings, folder, out)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    return done if isinstance(done, int) else _report(args, done, loaded, settings, len(images), unreadable)


def _scanned_modules(args: argparse.Namespace, loaded: LoadedModel) -> list[str]:
    """--layers' modules; with --attention, attention modules only (``all``: every one whose weights can be read),
    each checked to be one whose weights can be read exactly (one line naming it and why, else)."""
    if not args.attention:
        return select_layers(args.layers, [p for p, _ in loaded.module.named_modules()])
    from hookscope.core.scan.heads import capturable_heads, check_head_modules

    if args.layers == "all":
        return capturable_heads(loaded.module)
    modules = select_layers(args.layers, [p for p, _ in loaded.module.named_modules()])
    check_head_modules(loaded.module, modules)
    return modules


def _backend(args: argparse.Namespace, loaded: LoadedModel, settings: ScanSettings, images: list[Path],
             device: str) -> ScanBackend:  # fmt: skip
    """This process, or Ray (``--ray``)."""
    from hookscope.core.scan.backends import LocalScan

    if args.ray is None:
        return LocalScan(loaded, settings, images, device)
    from hookscope.core.scan.on_ray import RayScan

    source = replace(model_source(args), preprocess=loaded.preprocess)
    return RayScan(source, settings, images, address=args.ray or None, actors=args.ray_actors, gpus=args.ray_gpus,
                   device=device, quiet=not args.debug)  # fmt: skip


@dataclass
class _Written:
    """What a run of the command wrote: the scan (complete or not), scan.json, the strips and module pages."""

    result: ScanResult
    path: Path | None = None
    strips: int = 0
    pages: int = 0
    stop_code: int = 130  # the exit status of a stop: 143 when it came from SIGTERM


def _scan_and_write(args: argparse.Namespace, backend: ScanBackend, loaded: LoadedModel, images: list[Path],
                    settings: ScanSettings, folder: Path, out: Path) -> _Written | int:  # fmt: skip
    """The scan, then scan.json, the strips (``--png``) and the page (``--html``), until Ctrl-C or SIGTERM asks to
    stop (then the exit status, when the scan itself was stopped at once)."""
    from hookscope.core.scan.page import write_page
    from hookscope.core.scan.results import CHECKPOINT_FILE, write_scan, write_strips
    from hookscope.core.scan.run import run_scan
    from hookscope.system.termination import SIGTERM_EXIT, Terminated

    show = _Progress()
    try:
        with _stop_signals() as interrupt:
            interrupt.line_drawn = lambda: show.drawn
            result = run_scan(backend, loaded, images, settings, root=folder, out_dir=out, resume=args.resume,
                              progress=show, cancelled=lambda: interrupt.asked)  # fmt: skip
            written = _Written(result)
            if result.complete:
                try:
                    written.path = write_scan(result, out)
                except HookscopeError as error:  # a full disk: the checkpoint holds the finished scan
                    raise HookscopeError(f"{error} The finished scan is kept in '{out / CHECKPOINT_FILE}': make "
                                         "room and run the same command with --resume to write it.",
                                         path=error.path) from error  # fmt: skip
                if args.png:
                    written.strips = write_strips(result, out, progress=_counter(show, "PNG strips"),
                                                  cancelled=lambda: interrupt.asked)  # fmt: skip
                if args.html and not interrupt.asked:
                    written.pages = write_page(result, out, progress=_counter(show, "page"),
                                               cancelled=lambda: interrupt.asked)  # fmt: skip
            written.stop_code = SIGTERM_EXIT if interrupt.terminated else 130
    except HookscopeError:
        show.end_line()  # the error starts a line of its own
        raise
    except KeyboardInterrupt as stop:
        show.end_line()
        signal_name = " (SIGTERM)" if isinstance(stop, Terminated) else ""
        print(f"hookscope: stopped{signal_name}; run the same command with --resume to go on where it stopped.",
              file=sys.stderr)  # fmt: skip
        return SIGTERM_EXIT if isinstance(stop, Terminated) else 130
    show.end_line()
    return written


def _report(args: argparse.Namespace, written: _Written, loaded: LoadedModel, settings: ScanSettings, images: int,
            unreadable: list[tuple[Path, str]]) -> int:  # fmt: skip
    """The lines that end the command: where it stopped, or what was skipped and what was written where."""
    from hookscope.core.scan.results import shown_text
    from hookscope.system.termination import SIGTERM_EXIT

    result, out, stop_code = written.result, Path(args.out), written.stop_code
    said = " (SIGTERM)" if stop_code == SIGTERM_EXIT else ""
    if not result.complete:
        print(f"hookscope: stopped{said} after {result.processed} of {images} images; run the same command "
              "with --resume to go on where it stopped.", file=sys.stderr)  # fmt: skip
        return stop_code
    for reason in [r for _folder, r in unreadable] + [r for _index, r in result.skipped]:
        print(f"hookscope: skipped: {shown_text(reason)}", file=sys.stderr)  # a name's newline cannot end it
    left_out = [f"{len(result.skipped)} skipped"] if result.skipped else []
    left_out += [f"{len(unreadable)} folder{'s' if len(unreadable) != 1 else ''} unreadable"] if unreadable else []
    skipped = f" ({', '.join(left_out)})" if left_out else ""
    rate = result.processed / result.scan_s if result.scan_s > 0 else 0.0
    kinds = sorted({m.boxes for m in result.modules.values() if m.boxes})
    boxes = (
        f", boxes ({' and '.join(kinds)}) in {result.boxes_s:.1f} s" if settings.boxes else ", no boxes (--no-boxes)"
    )
    if set(settings.heads) == set(settings.modules):
        boxes = ", heads ranked (no boxes: a head's score is of the whole image)"
    unit = "head" if set(settings.heads) == set(settings.modules) else "channel"
    where, modules = " on Ray" if args.ray is not None else "", len(settings.modules)
    print(f"{modules} module{'s' if modules != 1 else ''} of {loaded.display_name} over "
          f"{result.processed} images{skipped}{where}: {rate:.1f} img/s{boxes} -> {written.path}")  # fmt: skip
    total = sum(m.channels for m in result.modules.values())
    if args.png:
        if written.strips < total:
            print(f"hookscope: stopped{said} after {written.strips} of {total} PNG strips; scan.json is complete.",
                  file=sys.stderr)  # fmt: skip
            return stop_code
        print(f"{written.strips} PNG strips of the top {settings.top} patches per {unit} -> {out / 'png'}")
    if args.html:
        if written.pages < len(result.modules):
            print(f"hookscope: stopped{said} before the HTML page was written; scan.json is complete.",
                  file=sys.stderr)  # fmt: skip
            return stop_code
        print(f"a page of every {unit}'s top images, to open in a browser -> {out / 'index.html'}")
    return 0


def _counter(show: _Progress, what: str) -> Callable[[int, int], None]:
    """A (done, total) callback drawn by the scan's progress line, as a phase of its own."""
    from hookscope.core.scan.run import ScanProgress

    return lambda done, total: show(ScanProgress(what, done, total, 0, 0, 0.0))
