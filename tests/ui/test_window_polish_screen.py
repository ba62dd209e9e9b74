"""Issue 44's window items on a real X server (Xvfb + openbox, the xcb platform), read back from the server's own
pixels at the three sizes of the issue; ``polish_screen.py`` drives the window and checks each step, and saves
the screen after each (look at them: ``DIR/NN-step.png``).

Item 2 (another model leaves nothing of the old one on screen), item 4 (F1 shows the guide, its picture, a link
clicked through the X server, Back), item 6 (four kinds of one layer fill the page), item 7 (the frame slider in
sight, "Frozen" said and kept, the record questions pause the video and the title is whole, Image B's row still in
reach with a video open), item 9 (the lessons beside their list; class names keep their room with an edit on) and
the polish (the badge clear of the save icon, the Predictions hint whole, the tree's Type and the inspector's
columns as wide as their words, File's video entries greyed with no video, the maps behind File > Open image's
real dialog and after Escape closed it, the ticked mask box drawn, the Input… button in sight).

The whole session (about four minutes a size on a loaded two-core machine: three model switches) runs at the three
sizes with -m slow: python -m pytest -m slow tests/ui/test_window_polish_screen.py. The default run drives the
steps of the leftovers at 1024x700, where they were seen (``test_every_control_and_column_in_reach_at_1024x700``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_real_screen import x_server

DRIVER = Path(__file__).with_name("polish_screen.py")
ROOT = Path(__file__).resolve().parents[2]
STEPS = [
    "in reach",
    "four kinds",
    "file dialog",
    "file dialog closed",
    "file menu",
    "guide",
    "guide link",
    "guide back",
    "guide cli",
    "guide api",
    "video frozen",
    "record dialog",
    "recorded",
    "video in reach",
    "lessons",
    "inspector",
    "edit on",
    "default size",  # only where the screen holds the window's 1560x980
    "segmenter",
    "detector",
    "vit",
]
# Issue 44's leftovers at the size where they were seen (every control of the docks in sight, the tree's and the
# inspector's columns whole or hidden, never scrolled to, a ViT's Attn column too; the guide's generated pages; Image
# B's row with a video open; the maps around File > Open image's real dialog and after Escape closed it): in the
# default run, about 20 s on a loaded two-core machine (the dialog and the video add about 7 s of it: 14 s -> 21 s).
IN_REACH = ["in_reach", "four_kinds", "file_dialog", "references", "video_in_reach", "inspector", "vit"]


def session(tmp_path: Path, size: tuple[int, int], steps: list[str] | None = None) -> tuple[list[dict], Path]:
    """Drive ``polish_screen.py`` on an Xvfb + openbox of ``size``: its report, and where it saved the screens."""
    out, home = tmp_path / "shots", tmp_path / "home"
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "xcb",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("QT_SCALE_FACTOR", None)
    command = [sys.executable, str(DRIVER), "--out", str(out), "--size", f"{size[0]}x{size[1]}"]
    with x_server(*size, window_manager=True) as display:
        done = subprocess.run(
            command + (["--steps", ",".join(steps)] if steps else []),
            env={**env, "DISPLAY": display},
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert done.returncode == 0, f"the window's session failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    report = json.loads((out / "report.json").read_text())
    errors = [f"{entry['step']}: {entry['error']}" for entry in report if "error" in entry]
    assert not errors, f"steps that could not be taken: {errors}\n{done.stdout}"
    return report, out


def failures(report: list[dict], out: Path) -> list[str]:
    return [
        f"{entry['step']}: {name}: {detail} (see {out / entry['screenshot']})"
        for entry in report
        for name, (ok, detail) in entry["checks"].items()
        if not ok
    ]


@pytest.mark.slow
@pytest.mark.parametrize("size", [(1024, 700), (1366, 768), (1920, 1080)], ids=["1024x700", "1366x768", "1920x1080"])
def test_issue_44s_window_items_on_the_real_screen(tmp_path, size) -> None:
    report, out = session(tmp_path, size)
    expected = [step for step in STEPS if step != "default size" or (size[0] >= 1560 and size[1] >= 980)]
    assert [entry["step"] for entry in report] == expected
    failed = failures(report, out)
    assert not failed, "\n".join(failed)


def test_every_control_and_column_in_reach_at_1024x700(tmp_path) -> None:
    """Issue 44's leftovers: at 1024x700 the Input dock scrolled to Image B's button (with a video open too: its
    Frozen sentence and slider took the room), and the tree's and the inspector's columns were reached by scrolling
    sideways (a ViT's Attn column too); the guide's generated pages were stand-ins; the maps were said to go blank
    behind a file dialog (checked while File > Open image's dialog is open, and after Escape closed it)."""
    report, out = session(tmp_path, (1024, 700), IN_REACH)
    steps = [entry["step"] for entry in report]
    assert steps == [
        "in reach",
        "four kinds",
        "file dialog",
        "file dialog closed",
        "guide cli",
        "guide api",
        "video in reach",
        "inspector",
        "vit",
    ]
    failed = failures(report, out)
    assert not failed, "\n".join(failed)
