"""The Attention panel on a real X server (issue 43, item 2), read back from the server's own pixels
(``attention_screen.py`` drives the window): the overlay and the heads' tiles show their pictures' colours, and a
click on a patch of the input, through the X server, makes that patch the query. The Modules dock's tree shows
every tick column, Attn too, whole inside its viewport without scrolling sideways, each title drawn (titles written
upwards over box-wide columns where they do not fit side by side: a ViT at 1024x700)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_real_screen import x_server

DRIVER = Path(__file__).with_name("attention_screen.py")
ROOT = Path(__file__).resolve().parents[2]
MATCH_NEEDED = 0.9


@pytest.mark.parametrize(
    "size",
    [
        pytest.param((1024, 700), id="1024x700"),  # the size where the Attn column once fell off the dock
        pytest.param((1366, 768), id="1366x768", marks=pytest.mark.slow),
        pytest.param((1920, 1080), id="1920x1080", marks=pytest.mark.slow),
    ],
)
def test_the_attention_panel_shows_its_pictures_and_takes_a_click_on_the_real_screen(tmp_path, size):
    pytest.importorskip("timm")
    if not shutil.which("xdotool"):
        pytest.skip("xdotool is needed to click through the X server")
    home = tmp_path / "home"
    with x_server(*size, window_manager=True) as display:
        env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "HOME": str(home),
               "XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
        env.pop("QT_SCALE_FACTOR", None)
        done = subprocess.run([sys.executable, str(DRIVER), "--out", str(tmp_path), "--size", f"{size[0]}x{size[1]}"],
                              env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, f"the window's session failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["class token"]["query"] == 0
    assert report["patch clicked"]["query"] == 1 + 3 * 14 + 5  # the clicked patch, after the class token
    for step in ("class token", "patch clicked"):
        seen = report[step]
        for view in ("input", "tiles"):
            samples, matched = seen[view]["samples"], seen[view]["matched"]
            assert samples >= 50 and matched >= MATCH_NEEDED * samples, (step, view, seen[view])
    for step in ("tree", "tree after"):
        tree = report[step]
        assert set(tree["columns"]) == {"In", "Act", "Grad", "Grad in", "Attn"}, tree
        assert tree["scroll_x"] == 0, tree
        for title, (left, right) in tree["columns"].items():
            assert 0 <= left and right <= tree["viewport"], (step, title, tree)  # Attn past the edge at 1024x700
            assert tree["ink"][title] >= 15, (step, title, tree)  # its title is on the screen, not clipped away
        if tree["upright"]:
            assert tree["header_height"] >= tree["upright_height"], tree  # the longest title, "Grad in", whole
