"""SIGTERM does what Ctrl-C does: sent to a real ``hookscope`` process, whose exit status, last line and files are
checked (the picture so far, the images finished, a resume that redoes none of them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "resources" / "chelsea.png")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def _images(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for index in range(count):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(folder / f"im{index:03d}.png")
    return folder


def _stop_after(args: list[str], ready: str, stop: int) -> tuple[int, str]:
    """Start ``hookscope ARGS``, wait for a stderr line that ``ready`` (a pattern) matches at its start, send
    ``stop``; (status, stderr)."""
    process = subprocess.Popen([sys.executable, "-m", "hookscope", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=ENV, cwd=ROOT)  # fmt: skip
    guard = threading.Timer(240, process.kill)  # a hang fails the test instead of stalling the run
    guard.start()
    seen = []
    try:
        for line in process.stderr:
            seen.append(line)
            if re.match(ready, line):
                process.send_signal(stop)
                break
        err = "".join(seen) + process.communicate(timeout=120)[1]
    finally:
        guard.cancel()
        process.kill()
        process.wait()
    return process.returncode, err


@pytest.mark.parametrize(("stop", "status", "said"), [
    (signal.SIGTERM, 143, "stopped (SIGTERM)"),
    pytest.param(signal.SIGINT, 130, "stopped (Ctrl-C)", marks=pytest.mark.slow),  # the same path, Ctrl-C's number
])  # fmt: skip
def test_visualize_stops_on_sigterm_like_ctrl_c_and_keeps_the_picture_so_far(tmp_path, stop, status, said):
    out = tmp_path / "dream.png"
    code, err = _stop_after(["visualize", "--weights", "none", "--layer", "layer1", "--steps", "100000", "--size",
                             "32", "--out", str(out)], r"visualize: \d+/100000 steps", stop)  # fmt: skip
    assert code == status, err
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(rf"hookscope: {re.escape(said)} after \d+ of 100000 steps; the picture so far: {re.escape(str(out))}",
                        last), err  # fmt: skip
    assert "Traceback" not in err
    assert Image.open(out).size == (32, 32)


@pytest.mark.slow  # SIGTERM during export is checked in the default run (test_hostile_signals.py)
def test_export_images_stops_on_sigterm_keeps_the_finished_images_and_resumes(tmp_path):
    folder, out = _images(tmp_path / "in", 12), tmp_path / "o"
    args = ["export", "--weights", "none", "--images", str(folder), "--layers", "conv1", "--no-png", "--out", str(out)]
    # the first progress line comes once the first image is done (later plain lines come 5 s apart: too late on an
    # idle machine, where the 12 images take about a second)
    code, err = _stop_after(args, r"export: 1/12 images", signal.SIGTERM)
    assert code == 143, err
    finished = sorted(path.parent.name for path in out.glob("*/done.json"))
    assert 1 <= len(finished) < 12
    assert err.strip().splitlines()[-1] == (
        f"hookscope: stopped (SIGTERM); {len(finished)} of 12 images are written in {out}; run the same command "
        "with --resume to go on where it stopped."
    )
    assert "Traceback" not in err and (out / "summary.csv").is_file()
    again = subprocess.run([sys.executable, "-m", "hookscope", *args, "--resume"], capture_output=True, text=True, env=ENV,
                           cwd=ROOT, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"12 of 12 images written to {out}, {len(finished)} of them finished by an earlier run" in again.stdout
