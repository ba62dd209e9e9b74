"""Progress on stderr, with the rate and the time left, both ways a user meets it: stderr not a terminal (plain
lines, no ``\r``) and a real pseudo-terminal (``os.openpty``; one line redrawn in place, and an error on a line of its
own)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.cli import main
from hookscope.cli.progress import ProgressLine, end_progress_lines, format_duration
from hookscope.core.teaching.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "resources" / "chelsea.png")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


# ---- the helper ---------------------------------------------------------------------------------------------
def test_plain_lines_say_count_rate_and_time_left():
    stream = io.StringIO()
    clock = [100.0]
    line = ProgressLine("export", "files", stream=stream, plain_every_s=0)
    line.started = line._counting_since = clock[0]  # a known start: 2 s per file from here on
    original = time.monotonic
    try:
        time.monotonic = lambda: clock[0]  # type: ignore[assignment]
        for done in range(1, 6):
            clock[0] += 2.0
            line.update(done, 5, f"f{done}.png")
    finally:
        time.monotonic = original  # type: ignore[assignment]
        line.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 5
    assert lines[0] == "export: 1/5 files (20%), 0.5 files/s, about 8 s left, f1.png"
    assert lines[2] == "export: 3/5 files (60%), 0.5 files/s, about 4 s left, f3.png"
    assert lines[-1] == "export: 5/5 files (100%), 0.5 files/s, done in 10 s, f5.png"


def test_plain_lines_are_throttled_but_the_first_and_last_always_come():
    stream = io.StringIO()
    with ProgressLine("x", "steps", stream=stream, plain_every_s=3600) as line:
        for done in range(101):
            line.update(done, 100)
    lines = stream.getvalue().splitlines()
    assert [entry.split(",")[0] for entry in lines] == ["x: 0/100 steps (0%)", "x: 100/100 steps (100%)"]


def test_a_terminal_line_is_redrawn_in_place_and_ended_before_an_error():
    stream = io.StringIO()
    line = ProgressLine("visualize", "steps", stream=stream, terminal=True, tty_every_s=0)
    line.update(1, 4, "a long description of the step")
    line.update(2, 4)
    assert "\n" not in stream.getvalue() and stream.getvalue().count("\r") == 2
    shorter = stream.getvalue().split("\r")[-1]
    assert len(shorter) == len(stream.getvalue().split("\r")[1])  # the longer line before is blanked out
    end_progress_lines()  # what main() does before it prints an error
    assert stream.getvalue().endswith("\n") and line.closed
    line.update(3, 4)  # ignored once closed
    assert stream.getvalue().endswith("\n")


def test_a_terminal_line_is_cut_to_the_width_so_that_it_never_wraps(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    stream = io.StringIO()
    with ProgressLine("export " + "a-long-file-name" * 5, "files", stream=stream, terminal=True) as line:
        line.update(1, 9)
    assert stream.getvalue() == "\r" + ("export " + "a-long-file-name" * 5)[:39] + "\n"


def test_echo_clears_the_terminal_line_and_the_next_update_draws_it_again(capsys):
    stream = io.StringIO()
    with ProgressLine("lessons", "lessons", stream=stream, terminal=True, tty_every_s=3600) as line:
        line.update(0, 9, "running a")
        line.echo("a  ok", file=sys.stdout)
        line.update(1, 9, "running b")  # drawn at once although throttled: the line was wiped
    assert capsys.readouterr().out == "a  ok\n"
    drawn = stream.getvalue()
    assert re.fullmatch(r"\rlessons: 0/9 [^\r]*\r +\r\rlessons: 1/9 [^\r\n]*\n", drawn), repr(drawn)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.2, "<1 s"), (42.4, "42 s"), (185, "3 min 05 s"), (7620, "2 h 07 min")]
)
def test_durations_read_as_a_person_says_them(seconds, text):
    assert format_duration(seconds) == text


# ---- progress on stderr, not a terminal and a terminal (item 2) -------------------------------------------------
def test_export_image_prints_plain_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hookscope", "export", "--weights", "none", "--image", SAMPLE, "--layers",
                           "conv1,layer1", "--out", str(tmp_path / "o")], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"export {SAMPLE}: ")]
    assert lines[0].endswith(": running the model") and lines[1].endswith(": writing the files")
    files = 3 + 4  # input_grad.npy, two archives; a picture per record (2 modules x 2 kinds)
    assert re.search(rf": {files}/{files} files \(100%\), .*done in ", lines[-1]), lines[-1]
    assert len(list((tmp_path / "o" / "png").rglob("*.png"))) == 4


def _run_on_a_terminal(args: list[str], timeout: float = 300) -> tuple[int, str, str]:
    """``hookscope ARGS`` with stderr on a pseudo-terminal: (status, what the terminal got, stdout)."""
    primary, secondary = os.openpty()
    process = subprocess.Popen([sys.executable, "-m", "hookscope", *args], stdout=subprocess.PIPE, stderr=secondary,
                               env=ENV, cwd=ROOT)  # fmt: skip
    os.close(secondary)
    got = bytearray()
    stdout: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout.append(process.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        got += chunk
    os.close(primary)
    status = process.wait(timeout=30)
    reader.join(30)
    return status, got.decode(errors="replace"), b"".join(stdout).decode()


@pytest.mark.slow  # a whole export on a pseudo-terminal; the redraw itself is checked in the default run
def test_export_image_on_a_terminal_redraws_one_line_and_an_error_starts_its_own(tmp_path):
    out = tmp_path / "o"
    status, terminal, stdout = _run_on_a_terminal(["export", "--weights", "none", "--image", SAMPLE, "--layers",
                                                   "conv1,layer1", "--out", str(out)])  # fmt: skip
    assert status == 0, terminal
    assert "records ->" in stdout
    progress = terminal.split("\n")[0]  # the pty turns \n into \r\n: the line is everything up to the first
    assert progress.count("\r") >= 3 and "running the model" in progress and "files (100%)" in progress
    # The same run with a file where a picture's folder must go: the error comes after a half-drawn line
    blocked = tmp_path / "b"
    (blocked / "png").mkdir(parents=True)
    (blocked / "png" / "activations").write_text("not a folder")
    status, terminal, _ = _run_on_a_terminal(["export", "--weights", "none", "--image", SAMPLE, "--layers",
                                              "conv1,layer1", "--out", str(blocked)])  # fmt: skip
    assert status != 0 and "writing the files" in terminal
    error = terminal.index("hookscope: ")
    assert terminal[error - 2 : error] == "\r\n", repr(terminal)  # on a line of its own, not after the progress
    assert "Traceback" not in terminal


def _images(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for index in range(count):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(folder / f"im{index:03d}.png")
    return folder


@pytest.mark.slow  # the same line as test_cli_stops.py's SIGTERM test, to its end
def test_export_images_reports_images_rate_and_time_left(tmp_path):
    folder = _images(tmp_path / "in", 4)
    done = subprocess.run([sys.executable, "-m", "hookscope", "export", "--weights", "none", "--images", str(folder),
                           "--layers", "conv1", "--no-png", "--out", str(tmp_path / "o")], capture_output=True,
                          text=True, env=ENV, cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("export: ")]
    assert lines[0].startswith("export: 1/4 images (25%), ") and "left" in lines[0]
    assert lines[-1].startswith("export: 4/4 images (100%), ") and "done in" in lines[-1]


@pytest.mark.slow  # all nine lessons again; export's progress lines are checked in the default run
def test_lessons_run_all_shows_its_progress_between_the_lessons(capsys):
    code = main(["lessons", "--run-all", "--weights", "none", "--size", "32"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    progress = [line for line in captured.err.splitlines() if line.startswith("lessons: ")]
    assert progress[0] == f"lessons: 0/{len(LESSONS)} lessons (0%), running {LESSONS[0].id}"
    assert progress[-1].startswith(f"lessons: {len(LESSONS)}/{len(LESSONS)} lessons (100%)")
    assert len(captured.out.splitlines()) == len(LESSONS)  # the results on stdout, untouched
