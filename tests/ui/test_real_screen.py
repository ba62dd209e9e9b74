"""The window on a real X server, read back from the server's own pixels (``real_screen.py`` drives it).

Every other GUI test renders offscreen, where each widget is re-rendered on its own: a paint placed at the wrong
offset in the window's shared backing store (the feature maps that went black after the first run) cannot be seen
there. This starts Xvfb, with and without a window manager, runs a person's session in the window on the xcb
platform, and after each step compares sampled screen pixels of every mosaic in view with the colours of the
mosaic under their centres.

Needs Xvfb (Debian's ``xvfb``; ``.ci/run`` installs it) and, for the window-manager case, ``openbox``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from real_screen import MATCH_NEEDED

DRIVER = Path(__file__).with_name("real_screen.py")
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "resources"
STEPS = (
    "start",
    "open image",
    "next image",
    "click a class",
    "scroll",
    "scroll to the end",
    "scroll back",
    "zoom",
    "double-click",
    "channel view",
    "top images",
    "lessons",
    "resize",
    "image b",
    "a minus b",
    "pop out",
    "channel view closed",
    "run again",
    "video",
    "video resumed",
)


@contextmanager
def x_server(width: int, height: int, window_manager: bool) -> Iterator[str]:
    """An Xvfb of ``width`` x ``height`` on a free display (optionally with openbox); yields its DISPLAY."""
    xvfb = shutil.which("Xvfb")
    assert xvfb, "Xvfb is needed for the real-screen tests (Debian: apt-get install xvfb; .ci/run installs it)"
    read, write = os.pipe()
    server = subprocess.Popen(
        [xvfb, "-displayfd", str(write), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    with os.fdopen(read) as answer:
        number = answer.readline().strip()
    assert number, "Xvfb did not start"
    display = f":{number}"
    manager = None
    try:
        if window_manager:
            openbox = shutil.which("openbox")
            assert openbox, "openbox is needed for the window-manager case (apt-get install openbox)"
            manager = subprocess.Popen(
                [openbox], env={**os.environ, "DISPLAY": display}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        yield display
    finally:
        for process in (manager, server):
            if process is not None:
                process.terminate()
                process.wait(10)


def drive(display: str, size: tuple[int, int], out: Path, home: Path) -> list[dict]:
    photos = [str(SAMPLES / "coffee.png"), str(SAMPLES / "chelsea.png")]  # the shipped CC0 photographs
    env = {
        **os.environ,
        "DISPLAY": display,
        "QT_QPA_PLATFORM": "xcb",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("QT_SCALE_FACTOR", None)
    done = subprocess.run(
        [
            sys.executable,
            str(DRIVER),
            "--out",
            str(out),
            "--size",
            f"{size[0]}x{size[1]}",
            "--photos",
            ",".join(photos),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"the window's session failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return json.loads((out / "report.json").read_text())


# The whole twenty-step session (about a minute bare, two under a window manager) runs with -m slow, to keep the
# default run under 15 minutes: python -m pytest -m slow tests/ui/test_real_screen.py. The default run reads the real
# screen in test_window_polish_screen.py (1024x700: every control in reach, maps behind a file dialog, a video) and
# test_attention_screen.py.
@pytest.mark.parametrize(
    ("size", "window_manager"),
    [pytest.param((1366, 768), False, marks=pytest.mark.slow), pytest.param((1024, 700), True, marks=pytest.mark.slow)],
    ids=["1366x768-bare", "1024x700-openbox"],
)
def test_every_mosaic_in_view_shows_its_picture_on_the_real_screen(tmp_path, size, window_manager) -> None:
    with x_server(*size, window_manager) as display:
        report = drive(display, size, tmp_path / "shots", tmp_path / "home")
    assert [entry["step"] for entry in report] == list(STEPS)
    for entry in report:
        assert "error" not in entry, f"step {entry['step']!r} could not be taken: {entry.get('error')}"
        plots = entry["plots"]
        assert not entry["waiting"], (
            f"after {entry['step']!r} panels in view still wait for their pictures: {entry['waiting']}"
        )
        assert plots, f"after {entry['step']!r} no mosaic was in view ({entry['screenshot']})"
        for plot in plots:
            assert plot["ratio"] >= MATCH_NEEDED, (
                f"after {entry['step']!r}, {plot['panel']} shows {plot['matched']} of {plot['checked']} sampled "
                f"pixels in its mosaic's colours (at {plot['rect']}; e.g. {plot['misses'][:2]}); "
                f"see {tmp_path / 'shots' / entry['screenshot']}"
            )
    steps = {entry["step"]: entry for entry in report}
    assert steps["channel view"]["channel_view"], "clicking a tile did not open the Channel view"
    assert not steps["channel view closed"]["channel_view"]
    # a video played through the window: what is on screen is a frame of it, painted over the frames before
    frames = [steps[name]["image"] for name in ("video", "video resumed")]
    assert all(" · frame " in name for name in frames) and frames[0] != frames[1], frames
