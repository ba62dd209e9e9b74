"""An output path that is blocked (a file where a folder must be, a folder where a file must be) ends every command
that writes with one readable line naming what is in the way, exit code 2, no traceback (issue 22).

Real processes on real files: the CLI as a user runs it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_output import message_lines
from PIL import Image

from hookscope.core.common.errors import write_error, write_problem

ROOT = Path(__file__).resolve().parents[2]


def hookscope(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hookscope", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip


@pytest.fixture()
def place(tmp_path: Path) -> Path:
    """tmp_path with two small images in imgs/ and a regular file named 'blocker'."""
    rng = np.random.default_rng(3)
    (tmp_path / "imgs").mkdir()
    for name in ("a", "b"):
        Image.fromarray(rng.integers(0, 256, (40, 52, 3), dtype=np.uint8)).save(tmp_path / "imgs" / f"{name}.png")
    (tmp_path / "blocker").write_text("a file, not a folder\n")
    return tmp_path


def _file_at(place: Path, relative: str) -> None:
    (place / relative).parent.mkdir(parents=True, exist_ok=True)
    (place / relative).write_text("in the way\n")


EXPORT_ONE = ("export", "--weights", "none", "--image", "imgs/a.png", "--layers", "layer1")
EXPORT_MANY = ("export", "--weights", "none", "--images", "imgs", "--layers", "layer1")
SCAN = ("scan", "--weights", "none", "--images", "imgs", "--layers", "layer1", "--size", "64", "--no-boxes")
VISUALIZE = ("visualize", "--weights", "none", "--layer", "layer1", "--channel", "0", "--steps", "1", "--size", "32")

CASES = [
    # (command, --out, a file to put in the way first, words the one line must hold)
    (EXPORT_ONE, "blocker", None, "Cannot write to 'blocker': a file is in the way."),
    (EXPORT_ONE, "blocker/sub", None, "Cannot write to 'blocker': a file is in the way."),
    (EXPORT_ONE, "out", "out/png", "Cannot write to 'out/png': a file is in the way."),
    (EXPORT_MANY, "blocker", None, "'blocker': a file is in the way."),
    (EXPORT_MANY, "blocker/sub", None, "a file is in the way: 'blocker'."),
    (EXPORT_MANY, "out", "out/a", "'out/a': a file is in the way."),
    (SCAN, "blocker", None, "'blocker': a file is in the way."),
    ((*SCAN, "--png"), "out", "out/png", "a file is in the way: 'out/png'."),
    (VISUALIZE, "blocker/v.png", None, "Cannot write 'blocker/v.png': a file is in the way: 'blocker'."),
]


@pytest.mark.parametrize(("command", "out", "in_the_way", "words"), CASES,
                         ids=[f"{c[0]}{'-many' if '--images' in c and c[0] == 'export' else ''}{'-png' if '--png' in c else ''}:{o}:{w}"
                              for c, o, w, _ in CASES])  # fmt: skip
def test_a_blocked_output_is_one_line_naming_it(place: Path, command, out, in_the_way, words):
    if in_the_way:
        _file_at(place, in_the_way)
    done = hookscope(*command, "--out", out, cwd=place)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr
    lines = message_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("hookscope: error: ") and words in lines[0], lines[0]


def test_a_folder_where_the_picture_goes(place: Path):
    (place / "v.png").mkdir()
    done = hookscope(*VISUALIZE, "--out", "v.png", cwd=place)
    assert done.returncode == 2, done.stderr
    lines = message_lines(done.stderr)
    assert lines == ["hookscope: error: Cannot write 'v.png': a folder is in the way."], done.stderr


def test_write_problem_names_the_file_in_the_way(tmp_path: Path):
    blocker = tmp_path / "png"
    blocker.write_text("x")
    with pytest.raises(OSError) as made:  # a folder made where a file is: EEXIST
        blocker.mkdir(parents=True, exist_ok=True)
    assert write_problem(made.value) == (str(blocker), "a file is in the way")
    with pytest.raises(OSError) as under:  # a folder under a file: ENOTDIR, the file named, not the folder asked for
        (blocker / "forward" / "x").mkdir(parents=True, exist_ok=True)
    assert under.value.errno == errno.ENOTDIR
    assert write_problem(under.value) == (str(blocker), "a file is in the way")
    assert str(write_error(under.value)) == f"Cannot write to '{blocker}': a file is in the way."
    with pytest.raises(OSError) as missing:  # not a blocked path: left to the caller
        (tmp_path / "nowhere" / "x.txt").read_text()
    assert write_problem(missing.value) is None and write_error(missing.value) is None
