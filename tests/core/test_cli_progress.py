"""Issue 22, items 2, 4 and 6: progress with the time left, one meaning per option, SIGTERM like Ctrl-C.

The progress line is checked both ways a user meets it: stderr not a terminal (plain lines, no ``\\r``) and a real
pseudo-terminal (``os.openpty``; one line redrawn in place, and an error on a line of its own). SIGTERM goes to a
real ``hookscope`` process, whose exit status, last line and files are checked.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.cli import main
from hookscope.cli.common import DEFAULT_WEIGHTS
from hookscope.cli.dispatch import SUBCOMMANDS, build_parsers
from hookscope.cli.progress import ProgressLine, end_progress_lines, format_duration
from hookscope.cli.scan import build_scan_parser
from hookscope.cli.teach import build_lessons_parser, build_visualize_parser
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


# ---- one meaning per option (item 4) ------------------------------------------------------------------------
def _default(parser, dest: str):
    return next(action.default for action in parser._actions if action.dest == dest)


def test_weights_have_one_default_and_seed_is_the_weights_seed_everywhere():
    gui, export, _bench, _download = build_parsers()
    parsers = {"window": gui, "export": export, "scan": build_scan_parser(), "visualize": build_visualize_parser(),
               "lessons": build_lessons_parser()}  # fmt: skip
    assert {name: _default(p, "weights") for name, p in parsers.items()} == dict.fromkeys(parsers, DEFAULT_WEIGHTS)
    for name, parser in parsers.items():
        seed = next(action for action in parser._actions if "--seed" in action.option_strings)
        assert "random weights" in seed.help, name
    visualize = build_visualize_parser()
    assert visualize.parse_args(["--layer", "x", "--out", "o.png", "--seed", "3"]).seed == 3
    assert visualize.parse_args(["--layer", "x", "--out", "o.png", "--weights-seed", "3"]).seed == 3  # old spelling
    assert visualize.parse_args(["--layer", "x", "--out", "o.png", "--opt-seed", "5"]).opt_seed == 5


def test_help_lists_every_subcommand_on_a_line_of_its_own(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert re.search(rf"^  {name} +\S", text, re.MULTILINE), name


def test_lessons_help_counts_the_lessons():
    assert f"in {len(LESSONS)} lessons" in build_lessons_parser().format_help().replace("\n", " ")


def test_visualize_seed_seeds_the_weights_and_opt_seed_the_optimisation(tmp_path, capsys):
    def run(*options: str) -> tuple[str, bytes]:
        out = tmp_path / "v.png"
        code = main(["visualize", "--weights", "none", "--layer", "layer1", "--steps", "1", "--size", "32",
                     "--out", str(out), *options])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        line = capsys.readouterr().out
        return line.split(": objective ")[1].split(" -> ")[0], out.read_bytes()

    start_1, picture_1 = run("--seed", "1")
    start_2, picture_2 = run("--seed", "2")
    assert start_1 != start_2  # other weights: another objective at the start
    assert run("--weights-seed", "2") == (start_2, picture_2)
    assert run("--seed", "2", "--opt-seed", "7")[1] != picture_2


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
    (blocked / "png" / "forward").write_text("not a folder")
    status, terminal, _ = _run_on_a_terminal(["export", "--weights", "none", "--image", SAMPLE, "--layers",
                                              "conv1,layer1", "--out", str(blocked)])  # fmt: skip
    assert status != 0 and "writing the files" in terminal
    error = terminal.index("hookscope: ")
    assert terminal[error - 2 : error] == "\r\n", repr(terminal)  # on a line of its own, not after the progress
    assert "Traceback" not in terminal


@pytest.mark.slow  # the same line as the SIGTERM test below, to its end
def test_export_images_reports_images_rate_and_time_left(tmp_path):
    folder = _images(tmp_path / "in", 4)
    done = subprocess.run([sys.executable, "-m", "hookscope", "export", "--weights", "none", "--images", str(folder),
                           "--layers", "conv1", "--no-png", "--out", str(tmp_path / "o")], capture_output=True,
                          text=True, env=ENV, cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("export: ")]
    assert lines[0].startswith("export: 1/4 images (25%), ") and "left" in lines[0]
    assert lines[-1].startswith("export: 4/4 images (100%), ") and "done in" in lines[-1]


def test_lessons_run_all_shows_its_progress_between_the_lessons(capsys):
    code = main(["lessons", "--run-all", "--weights", "none", "--size", "32"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    progress = [line for line in captured.err.splitlines() if line.startswith("lessons: ")]
    assert progress[0] == f"lessons: 0/{len(LESSONS)} lessons (0%), running {LESSONS[0].id}"
    assert progress[-1].startswith(f"lessons: {len(LESSONS)}/{len(LESSONS)} lessons (100%)")
    assert len(captured.out.splitlines()) == len(LESSONS)  # the results on stdout, untouched


# ---- SIGTERM does what Ctrl-C does (item 6) -----------------------------------------------------------------
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
