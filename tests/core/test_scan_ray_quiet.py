"""``hookscope scan --ray`` prints Hookscope's lines only: no line of Ray's (its loggers, its C++ core, its
workers' forwarded output, Ray Data's progress bars and warnings) unless ``--debug`` (issue 22, item 6).

The real command line in a real process with a real local Ray (no address). Marked ``ray``: run it with
``pytest -m ray tests/core/test_scan_ray_quiet.py``. Skipped when Ray is not installed (``pip install 'hookscope[ray]'``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.core.scan.on_ray import ray_available

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not ray_available(), reason="Ray is not installed: pip install 'hookscope[ray]'"),
]

ROOT = Path(__file__).resolve().parents[2]
# What Ray's own lines look like: its Python loggers ("2026-01-02 10:11:12,345\tINFO worker.py:2038 -- ..."), its
# C++ core ("[2026-01-02 10:11:12,345 E 123 123] core_worker.cc:2465: ..."), a worker's forwarded output
# ("(MapWorker pid=123) ...", "(raylet) ..."), warnings from its files, Ray Data's progress bars.
RAY_LINE = re.compile(
    r"(INFO|WARNING|ERROR|DEBUG)\s+\w+\.py:\d+ --"
    r"|^\[\d{4}-\d\d-\d\d [\d:,]+ [DIWEF] \d+ \d+\]"
    r"|^\((raylet|\w+ pid=\d+)"
    r"|Started a local Ray instance|site-packages/ray/|Running \d+:|[▏▎▍▌▋▊▉█]"
)


def scan(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}  # a local Ray
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "hookscope", "scan", "--ray", "--weights", "none", "--images", str(tmp_path / "imgs"),
         "--layers", "layer2", "--top", "2", "--size", "64", "--out", str(tmp_path / f"out{len(extra)}"), *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_scan_on_ray_prints_no_ray_line_unless_debug(tmp_path: Path):
    rng = np.random.default_rng(5)
    (tmp_path / "imgs").mkdir()
    for index in range(6):
        Image.fromarray(rng.integers(0, 256, (70, 90, 3), dtype=np.uint8)).save(tmp_path / "imgs" / f"i{index}.png")

    quiet = scan(tmp_path)  # the boxes go out to the actors too
    assert quiet.returncode == 0, quiet.stderr
    ray_lines = [line for line in (quiet.stdout + quiet.stderr).splitlines() if RAY_LINE.search(line)]
    assert ray_lines == [], "\n".join(ray_lines)
    # nothing but Hookscope's progress lines on stderr and its one-line summary on stdout
    assert all(line.startswith(("scan: ", "boxes: ")) for line in quiet.stderr.splitlines()), quiet.stderr
    summary = quiet.stdout.splitlines()
    assert len(summary) == 1 and "on Ray" in summary[0] and summary[0].endswith("scan.json"), quiet.stdout

    loud = scan(tmp_path, "--debug")
    assert loud.returncode == 0, loud.stderr
    assert any(RAY_LINE.search(line) for line in loud.stderr.splitlines()), loud.stderr
    assert "Started a local Ray instance" in loud.stderr
