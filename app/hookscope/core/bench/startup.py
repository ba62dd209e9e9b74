"""Start-up: how long ``hookscope --help`` and each subcommand's ``--help`` take, and what ``import hookscope`` and
loading the engine cost beyond ``import torch``.

Every figure is measured in fresh interpreters (``runs`` of each, the cases interleaved round after round so that a
machine getting busier or quieter tilts none of them) and printed as the median with the spread (lowest-highest):

* ``hookscope [SUBCOMMAND] --help``: the wall-clock time of ``python -m hookscope [SUBCOMMAND] --help``, the whole
  process (what a user waits for), next to a bare ``python -c pass`` for the interpreter's own share;
* ``import torch``, and ``import hookscope; hookscope.capture`` (the first use of a public name loads the engine)
  after it, timed inside one interpreter, with the heavy modules the engine brought in (torchvision's import, about
  a second, is left to the code that needs it: opening a model by name, preprocessing a picture);
* ``import hookscope`` alone, and whether it imported torch or Qt (it must not).

Run it with ``python -m hookscope.core.bench.startup [--runs 5]``; the figures are in docs/performance.md. No timed
test asserts them (the machines are noisy); tests/core/test_cli_help.py checks what makes them small: building the
command line's parsers imports no torch and no Qt.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

HELP_TARGET_S = 1.0  # hookscope --help and every SUBCOMMAND --help (issue 42)
ENGINE_TARGET_S = 0.3  # import hookscope; hookscope.capture, beyond import torch (issue 42)
HEAVY = ("torch", "torchvision", "PySide6", "pyqtgraph", "superqt")

# Each snippet prints its durations in seconds, one per line, measured with perf_counter inside the interpreter.
_TORCH_THEN_ENGINE = f"""
import time
t0 = time.perf_counter(); import torch; t1 = time.perf_counter()
import hookscope; hookscope.capture; t2 = time.perf_counter()
import sys
print(t1 - t0); print(t2 - t1); print(",".join(m for m in {HEAVY!r} if m in sys.modules and m != "torch"))
"""
_HOOKSCOPE_ALONE = f"""
import sys, time
t0 = time.perf_counter(); import hookscope; t1 = time.perf_counter()
print(t1 - t0); print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""


@dataclass(frozen=True)
class Figure:
    """One measured quantity: every run's value in seconds."""

    label: str
    values: tuple[float, ...]
    target_s: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def line(self, width: int) -> str:
        text = f"  {self.label:<{width}} {_seconds(self.median)} ({_seconds(min(self.values), False)}-{_seconds(max(self.values), False)})"
        if self.target_s is not None:
            met = "met" if self.median <= self.target_s else "NOT met"
            text += f"  [target <= {self.target_s:g} s: {met}]"
        return text


@dataclass
class StartupResult:
    runs: int
    interpreter: Figure
    helps: list[Figure]
    torch: Figure
    engine: Figure  # import hookscope; hookscope.capture, after import torch
    alone: Figure  # import hookscope, nothing before
    alone_imported: set[str] = field(default_factory=set)  # heavy modules import hookscope brought in (none expected)
    engine_imported: set[str] = field(default_factory=set)  # heavy modules beyond torch the engine brought in


def _seconds(value: float, unit: bool = True) -> str:
    text = f"{value:.3f}" if value < 1 else f"{value:.2f}"
    return f"{text} s" if unit else text


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def _wall(argv: list[str]) -> float:
    """The whole process's wall-clock time; a command that fails is an error, not a figure."""
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed


def _printed(snippet: str) -> list[str]:
    done = subprocess.run(_python("-c", snippet), capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"the timing snippet failed: {done.stderr.strip()}")
    return done.stdout.splitlines()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # nothing written beside the sources while timing


def subcommands() -> list[str]:
    """The subcommands ``hookscope`` dispatches to, as the command line itself lists them (asked in a subprocess: the
    engine does not import the command line)."""
    return _printed("from hookscope.cli.dispatch import SUBCOMMANDS; print(*SUBCOMMANDS, sep='\\n')")


def measure(
    runs: int = 5, commands: Sequence[str] | None = None, note: Callable[[str], None] | None = None
) -> StartupResult:
    """Every figure, ``runs`` fresh interpreters each, the cases interleaved round by round."""
    commands = list(subcommands() if commands is None else commands)
    helps: dict[str, list[float]] = {name: [] for name in ("", *commands)}
    interpreter: list[float] = []
    torch_s: list[float] = []
    engine: list[float] = []
    alone: list[float] = []
    imported: set[str] = set()
    engine_imported: set[str] = set()
    for round_ in range(runs):
        if note:
            note(f"round {round_ + 1} of {runs}")
        interpreter.append(_wall(_python("-c", "pass")))
        for name in helps:
            helps[name].append(_wall(_python("-m", "hookscope", *([name] if name else []), "--help")))
        first, second, beyond = (_printed(_TORCH_THEN_ENGINE) + [""])[:3]
        torch_s.append(float(first))
        engine.append(float(second))
        engine_imported.update(filter(None, beyond.split(",")))
        seconds, heavy = (_printed(_HOOKSCOPE_ALONE) + [""])[:2]
        alone.append(float(seconds))
        imported.update(filter(None, heavy.split(",")))
    return StartupResult(
        runs=runs,
        interpreter=Figure("python -c pass (the interpreter alone)", tuple(interpreter)),
        helps=[
            Figure(f"hookscope {name} --help".replace("  ", " "), tuple(values), HELP_TARGET_S)
            for name, values in helps.items()
        ],
        torch=Figure("import torch", tuple(torch_s)),
        engine=Figure("import hookscope; hookscope.capture, after import torch", tuple(engine), ENGINE_TARGET_S),
        alone=Figure("import hookscope (alone)", tuple(alone)),
        alone_imported=imported,
        engine_imported=engine_imported,
    )


def report(result: StartupResult) -> list[str]:
    """The benchmark's lines."""
    figures = [result.interpreter, *result.helps, result.torch, result.engine, result.alone]
    width = max(len(figure.label) for figure in figures)
    try:
        torch_version = metadata.version("torch")
        torchvision_version = metadata.version("torchvision")
    except metadata.PackageNotFoundError:
        torch_version = torchvision_version = "?"
    lines = [
        f"start-up, median of {result.runs} fresh interpreters each (lowest-highest), {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, torch {torch_version}, torchvision {torchvision_version}:",
        result.interpreter.line(width),
        *(figure.line(width) for figure in result.helps),
        result.torch.line(width),
        result.engine.line(width) + f"; it imported {', '.join(sorted(result.engine_imported)) or 'none'} of "
        f"{', '.join(m for m in HEAVY if m != 'torch')}",
        result.alone.line(width) + f"; it imported {', '.join(sorted(result.alone_imported)) or 'none'} of "
        f"{', '.join(HEAVY)}",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hookscope.core.bench.startup", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per figure (default: 5)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    result = measure(args.runs, note=lambda text: print(f"startup: {text}", file=sys.stderr, flush=True))
    for line in report(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
