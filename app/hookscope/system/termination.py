"""SIGTERM handled like Ctrl-C, and a stopped command that ends its process at once.

By default SIGTERM (``kill PID``, a service manager stopping a job, a closing terminal's session) ends a Python
process on the spot: no ``finally`` runs, and a half-written file stays (a download's ``.part`` file in the torch
hub cache). Inside ``sigterm_raises()`` SIGTERM raises :class:`Terminated` in the main thread instead, a
``KeyboardInterrupt``, so every cleanup written for Ctrl-C runs for it too.

A command stopped by a signal has said so in one line and kept what it finished; what is left to do is ending the
process, and that must not take long: :func:`end_process` runs the exit handlers (bounded by ``EXIT_GRACE_S``) and
ends the process without joining the threads a model file may have started, and without the interpreter's own
teardown (seconds, with PyTorch loaded on a busy machine). :func:`stop_deadline` is the last resort for a stop that
nothing answers (a model's ``build()`` that catches every exception and loops on): the signal's line is printed
and the process ended ``STOP_DEADLINE_S`` after the signal.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

SIGTERM_EXIT = 128 + 15  # the status a shell reports for a process ended by SIGTERM
INTERRUPT_EXIT = 128 + 2  # and by Ctrl-C (SIGINT)
STOP_STATUSES = (INTERRUPT_EXIT, SIGTERM_EXIT)
EXIT_GRACE_S = 1.0  # the exit handlers' time, once a stopped command has said so
STOP_DEADLINE_S = 10.0  # a signal whose exception nothing answered in this time ends the process anyway

# Armed by ``stop_deadline`` for the process's own command line; None in a library (the tests call main()).
_deadline: _Deadline | None = None


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (see :func:`sigterm_raises`)."""


def stopped_line(status: int) -> str:
    """The one line of a command stopped by a signal, where nothing more particular was said."""
    return "hookscope: stopped (SIGTERM)" if status == SIGTERM_EXIT else "hookscope: interrupted"


class _Deadline:
    """After the first signal, a timer: when it runs out the stop was not answered (the exception was caught by
    code that loops on, or the exit hangs), so the signal's line is printed and the process ends with its status."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._timer: threading.Timer | None = None

    def arm(self, status: int) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.seconds, self._expire, (status,))
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    @staticmethod
    def _expire(status: int) -> None:
        try:
            print(stopped_line(status), file=sys.stderr, flush=True)
        finally:
            _flush_and_exit(status)


def _arm(status: int) -> None:
    if _deadline is not None:
        _deadline.arm(status)


def _raise_terminated(signum: int, frame: object) -> None:
    _arm(SIGTERM_EXIT)
    raise Terminated(f"signal {signum}")


def _raise_interrupt(signum: int, frame: object) -> None:
    _arm(INTERRUPT_EXIT)
    raise KeyboardInterrupt


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`; the previous handler is restored after it.

    Only the main thread may install signal handlers; elsewhere (or where SIGTERM does not exist) this does nothing.
    """
    term = getattr(signal, "SIGTERM", None)
    if term is None or not _in_main_thread():
        yield
        return
    previous = signal.signal(term, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(term, previous)


@contextmanager
def stop_deadline(seconds: float = STOP_DEADLINE_S) -> Iterator[None]:
    """For the process's own command line: Ctrl-C and SIGTERM raise (as ``KeyboardInterrupt`` and
    :class:`Terminated`) and each arms a deadline: a process still running ``seconds`` after the signal prints the
    signal's line and ends. The handlers a command installs for itself inside the block (a scan that stops after its
    batch) take over while they are installed."""
    global _deadline
    if not _in_main_thread():
        yield
        return
    _deadline = _Deadline(seconds)
    previous = signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        with sigterm_raises():
            yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM are held and raised when it ends (the main thread only).

    For imports of compiled libraries: a ``KeyboardInterrupt`` raised in a Python function that PyTorch's C++ calls
    while it loads (``import torch`` runs Python from pybind11) cannot unwind through it, and the process aborts with
    "terminate called after throwing an instance of 'pybind11::error_already_set'" (status -6) instead of saying
    one line. Held until the import is done, the signal is the usual one-line stop."""
    if not _in_main_thread():
        yield
        return
    held: list[int] = []
    numbers = [n for n in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if n is not None]
    previous = {number: signal.signal(number, lambda signum, frame: held.append(signum)) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if held:
        status = SIGTERM_EXIT if held[0] != signal.SIGINT else INTERRUPT_EXIT
        _arm(status)
        raise Terminated(f"signal {held[0]}") if status == SIGTERM_EXIT else KeyboardInterrupt


def ignore_stops() -> None:
    """Ctrl-C and SIGTERM ignored from now on (the main thread only): for the moments after a command has finished
    and said so, when Python's default handler would end the process by the signal instead of its status."""
    for number in (signal.SIGINT, getattr(signal, "SIGTERM", None)):
        if number is not None and _in_main_thread():
            signal.signal(number, signal.SIG_IGN)


def end_process(status: int, grace: float = EXIT_GRACE_S) -> NoReturn:
    """End the process now with ``status``, after its exit handlers (at most ``grace`` seconds of them).

    For a command stopped by a signal, once it has said so: further signals are ignored (the line is said), the
    threads are not waited for (a model file's own thread could hold the exit for ever), and the interpreter's
    teardown is skipped (nothing is left to write: every file was closed by the command's own cleanup)."""
    if _deadline is not None:
        _deadline.cancel()
    ignore_stops()
    watchdog = threading.Timer(grace, _flush_and_exit, (status,))
    watchdog.daemon = True
    watchdog.start()
    try:
        atexit._run_exitfuncs()
    finally:
        _flush_and_exit(status)


def _flush_and_exit(status: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: nothing more can be said there
    os._exit(status)
