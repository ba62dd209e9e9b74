"""Progress of a long command on stderr, with the time left; and a stop that keeps what was done.

On a terminal (stderr is a tty) :class:`ProgressLine` keeps one line that it redraws in place (``\\r``), cut to
the terminal's width so that it never wraps; elsewhere (a log file, a pipe, CI) it writes plain lines, the first
at once, then one every ``plain_every_s`` seconds, and the last. Each line says how many of how many, the rate
and the time left, e.g. ``export: 40/122 files (33%), 3.1 files/s, about 26 s left, layer2.0.conv1``.

Every error must start on its own line, never glued to a half-drawn progress line: the line is ended by
:meth:`ProgressLine.close` (also at the end of a ``with`` block, whatever ended it), and
:func:`end_progress_lines` ends any line still open (``hookscope``'s ``main`` calls it before printing an error).
:meth:`ProgressLine.echo` prints an ordinary line (a result on stdout, a warning) while a progress line is up: it
clears the progress line first, so both stay readable on a terminal.

:func:`stop_on_signals` turns Ctrl-C (SIGINT) and SIGTERM into a request that a loop reads between its steps
(``visualize``'s ``cancelled``), so the command can keep what it has done and say so; a second signal stops at
once, as usual.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from hookscope.system.termination import SIGTERM_EXIT, Terminated

TTY_EVERY_S = 0.1  # redraws of the terminal line at most this often
PLAIN_EVERY_S = 5.0  # plain lines at most this often (the first and the last always)
FIRST_RATE_AFTER_S = 1.0  # a rate from a single update only after this long (one quick small file says nothing)

_open_lines: list[ProgressLine] = []


def format_duration(seconds: float) -> str:
    """``"<1 s"``, ``"42 s"``, ``"3 min 05 s"``, ``"2 h 07 min"``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    if seconds < 1:
        return "<1 s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _rate_text(rate: float, unit: str) -> str:
    if rate >= 10:
        return f"{rate:.0f} {unit}/s"
    if rate >= 0.1:
        return f"{rate:.1f} {unit}/s"
    return f"{1 / rate:.0f} s per {unit.rstrip('s') or unit}" if rate > 0 else ""


class ProgressLine:
    """One progress report: ``update(done, total, what)`` as the work goes, ``close()`` at the end.

    The rate is measured from the first update on (what came before it, such as loading a model or a first
    slow step, does not count), or from the line's start (or its last :meth:`stage`) when there has been only one
    update; ``update(..., rate=...)`` gives it instead (a batch that skips the images an earlier run finished knows its own rate).
    """

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        tty_every_s: float = TTY_EVERY_S,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if terminal is None:
            isatty = getattr(self.stream, "isatty", None)
            terminal = bool(isatty and isatty())
        self.terminal = terminal
        self.every_s = tty_every_s if terminal else plain_every_s
        self.started = time.monotonic()
        self._counting_since = self.started  # the start of the counted work (the last stage)
        self._first: tuple[float, int] | None = None  # (time, done) of the first update
        self._last_shown = -math.inf
        self._drawn = 0  # characters of the line now on the terminal (0: none, or ended)
        self._last_text = ""
        self._lock = threading.Lock()
        self.closed = False
        _open_lines.append(self)

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- what a line says

    def text(self, done: int, total: int, what: str = "", rate: float | None = None, now: float | None = None) -> str:
        """The line for ``done`` of ``total``: count, share, rate, time left, and ``what``."""
        now = time.monotonic() if now is None else now
        if rate is None:
            rate = self._rate(done, now)
        parts = [f"{done}/{total} {self.unit}" + (f" ({done / total:.0%})" if total else "")]
        if rate and rate > 0:
            parts.append(_rate_text(rate, self.unit))
            if total and done < total:
                parts.append(f"about {format_duration((total - done) / rate)} left")
        if total and done >= total:
            parts.append(f"done in {format_duration(now - self.started)}")
        if what:
            parts.append(what)
        return f"{self.label}: " + ", ".join(parts) if self.label else ", ".join(parts)

    def _rate(self, done: int, now: float) -> float:
        if self._first is None:
            return 0.0
        first_time, first_done = self._first
        if done > first_done and now > first_time:
            return (done - first_done) / (now - first_time)
        since = self._counting_since  # one update so far: over the time since the start, once that means something
        return done / (now - since) if now - since >= FIRST_RATE_AFTER_S else 0.0

    # -- drawing

    def update(self, done: int, total: int, what: str = "", *, rate: float | None = None) -> None:
        """``done`` of ``total`` units are done; ``what``: the item at hand. Throttled; the last is always shown."""
        with self._lock:
            if self.closed:
                return
            now = time.monotonic()
            if self._first is None:
                self._first = (now, done)
            last = bool(total) and done >= total
            first = self._last_shown == -math.inf
            if not (first or last or now - self._last_shown >= self.every_s):
                return
            self._last_shown = now
            self._show(self.text(done, total, what, rate, now))

    def stage(self, what: str) -> None:
        """Say what is being done (``"label: running the model"``), not throttled; the rate is measured from the
        last stage on (what came before it is not counted work)."""
        with self._lock:
            self._counting_since, self._first = time.monotonic(), None
            if not self.closed:
                self._show(f"{self.label}: {what}" if self.label else what)

    def _show(self, text: str) -> None:
        if text == self._last_text and not self.terminal:
            return
        self._last_text = text
        if not self.terminal:
            self.stream.write(text + "\n")
            self.stream.flush()
            return
        text = text[: self._width()]
        pad = max(0, self._drawn - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._drawn = len(text)

    def _width(self) -> int:
        """The terminal's width (of stderr's terminal, not stdout's) less one: some terminals wrap at the last
        column, and a wrapped line cannot be redrawn with ``\r``. COLUMNS, when set, wins, as for shutil."""
        columns = 0
        if "COLUMNS" not in os.environ:
            try:
                columns = os.get_terminal_size(self.stream.fileno()).columns
            except (AttributeError, OSError, ValueError):
                pass
        if columns <= 0:  # not known (a pseudo-terminal nobody sized reports 0)
            columns = shutil.get_terminal_size((100, 24)).columns
        return max(columns - 1, 20)

    def _clear(self) -> None:
        """Wipe the terminal line (the next update draws it again)."""
        if self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0
            self._last_shown = -math.inf  # redraw at the next update

    def echo(self, text: str, file: TextIO | None = None) -> None:
        """Print ``text`` as a line of its own (to ``file``, default stderr) while the progress line is up."""
        with self._lock:
            if self.terminal:
                self._clear()
        print(text, file=file if file is not None else sys.stderr, flush=True)

    def end_line(self) -> None:
        """End the terminal line where it is (what was drawn stays), so that whatever follows starts a line."""
        with self._lock:
            if self._drawn:
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = 0

    def close(self) -> None:
        """End the line; later updates are ignored. Safe to call twice."""
        self.end_line()
        self.closed = True
        if self in _open_lines:
            _open_lines.remove(self)


def end_progress_lines() -> None:
    """End every progress line still drawn, so that the error printed next starts on its own line."""
    for line in list(_open_lines):
        line.close()


class StopRequest:
    """What :func:`stop_on_signals` saw: ``requested`` once Ctrl-C or SIGTERM came, ``signal_name`` which."""

    def __init__(self) -> None:
        self.signal_number: int | None = None

    @property
    def requested(self) -> bool:
        return self.signal_number is not None

    def __call__(self) -> bool:  # usable as a ``cancelled`` callback
        return self.requested

    @property
    def signal_name(self) -> str:
        return "SIGTERM" if self.signal_number == getattr(signal, "SIGTERM", None) else "Ctrl-C"

    @property
    def exit_status(self) -> int:
        """143 after SIGTERM (what a shell reports for it), 130 after Ctrl-C."""
        return SIGTERM_EXIT if self.signal_name == "SIGTERM" else 130


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Within the block, the first Ctrl-C or SIGTERM only sets ``request.requested`` (for a loop to stop at its
    next step and keep its work); a second one raises ``KeyboardInterrupt`` (``Terminated`` for SIGTERM) at
    once. The previous handlers come back after the block. Outside the main thread this does nothing."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    numbers = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])

    def handle(signum: int, _frame: object) -> None:
        if request.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(f"signal {signum}")
        request.signal_number = signum

    previous = {number: signal.signal(number, handle) for number in numbers}
    try:
        yield request
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class DownloadBar:
    """A one-line progress bar on stderr: bytes, percentage and speed, redrawn in place (``drawn`` once drawn);
    a download's ``progress(done, total, rate)``."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.drawn = False

    def __call__(self, done: int, total: int | None, rate: float) -> None:
        self.drawn = True
        if total:
            filled = min(24, int(24 * done / total))
            bar = f"[{'#' * filled}{'.' * (24 - filled)}] {done / total:4.0%} {done / 1e6:.1f}/{total / 1e6:.1f} MB"
        else:
            bar = f"{done / 1e6:.1f} MB"
        sys.stderr.write(f"\r{self.label} {bar} {rate / 1e6:.1f} MB/s ")
        sys.stderr.flush()


class HubDownloadBar(DownloadBar):
    """The progress bar of a download from the Hugging Face Hub, announced by one line when bytes start to come
    (not before: the Hub may answer that the name does not exist, or be unreachable with the files cached)."""

    def __init__(self, label: str) -> None:
        from hookscope.core.models import hub as hub_models

        super().__init__(label)
        self._hub = hub_models

    def __call__(self, done: int, total: int | None, rate: float) -> None:
        if not self.drawn:
            print(f"hookscope: downloading {self.label} from {self._hub.hub_endpoint()} into {self._hub.hub_cache()}",
                  file=sys.stderr)  # fmt: skip
        super().__call__(done, total, rate)
