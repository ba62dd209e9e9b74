"""What the hostile-input tests (tests/core/test_hostile_*.py, one file per behaviour: files, video, targets, models,
signals, the scan) share: the one line an error must be, the real command in a process of its own, a real small
disk, and Ctrl-C as a terminal sends it.

A full disk is a real tmpfs mounted for the test (root only; the tests that need one skip elsewhere).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from cli_output import message_lines
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "resources" / "chelsea.png")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def error_lines(err: str) -> list[str]:
    return message_lines(err)


def one_error(err: str) -> str:
    """The one line of an error on stderr, progress lines aside."""
    lines = message_lines(err)
    assert len(lines) == 1, lines
    assert "Traceback" not in err and "unexpected error" not in err
    return lines[0]


def write_images(folder: Path, count: int = 5) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        pixels = np.random.default_rng(index).integers(0, 256, size=(40 + index, 50, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"photo{index}.png")
    return folder


def mounted_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """For a ``small_disk`` fixture (``yield from mounted_disk(tmp_path)``): a real tmpfs of a chosen size
    (``resize(bytes)``), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()

    def resize(size: int) -> Path:
        option = f"remount,size={size}" if os.path.ismount(where) else f"size={size}"
        command = (
            ["mount", "-o", option, str(where)]
            if os.path.ismount(where)
            else ["mount", "-t", "tmpfs", "-o", option, "tmpfs", str(where)]
        )
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        return where

    yield resize
    if os.path.ismount(where):
        subprocess.run(["umount", "-l", str(where)], check=True)


def ctrl_c_as_from_a_terminal() -> None:
    """A command started from a terminal gets Ctrl-C; one started in the background of a script inherits SIGINT
    ignored (and Python keeps it so), as these tests would when the suite itself runs in the background."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def hookscope_process(*args: str, **kwargs) -> subprocess.Popen:
    """``python -m hookscope ARGS`` in a process of its own, stdout and stderr piped, Ctrl-C as from a terminal."""
    return subprocess.Popen([sys.executable, "-m", "hookscope", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=ENV, preexec_fn=ctrl_c_as_from_a_terminal, **kwargs)  # fmt: skip


def run_bounded(args: list[str], timeout: float = 120) -> tuple[int, str, float]:
    """The real command in a process of its own: exit status, stderr and its peak memory in GB (a process that
    grows without bound is killed at the timeout, and the test fails on it)."""
    process = subprocess.Popen([sys.executable, "-m", "hookscope", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True, cwd=ROOT, env=ENV)  # fmt: skip
    try:
        err = process.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"hookscope {' '.join(args)} still ran after {timeout} s")
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # kB on Linux: the largest child so far
    return process.returncode, err, peak_gb
