"""Scans saved with sessions, on real workspaces (ResNet-18, random weights) and fake hosts: File > Save session…
writes the scan on screen beside the session file, Open session in another window shows it again, and a session
whose scan file was deleted says so in one problem line and restores the rest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeHost
from PIL import Image

from hookscope.ui.features.scan import ScanFeature
from hookscope.ui.features.session_files import SessionFilesFeature
from hookscope.ui.state.workspace import Workspace

RUN_TIMEOUT_MS = 120_000
PATH = "layer1.0.conv1"  # the workspace fixture ticks it


def _pictures(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    for index in range(count):
        small = rng.integers(0, 256, size=(10, 12, 3), dtype=np.uint8)
        Image.fromarray(small).resize((80, 64), Image.BILINEAR).save(folder / f"img{index:02d}.png")
    return folder


@pytest.fixture
def other(qtbot) -> Iterator[Workspace]:
    """A second workspace (another window) on another tick."""
    space = Workspace(weights="none", ticks=["layer4.1.conv2"])
    space.attach_view(lambda: (300, 300))
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        space.start("resnet18", None)
    yield space
    space.shutdown()


def tops(scan: ScanFeature) -> list[list[tuple[int, float]]]:
    return [[(e.image, round(e.score, 5)) for e in channel] for channel in scan.result.modules[PATH].top]


def test_a_scan_is_saved_with_the_session_and_comes_back(workspace, host, other, qtbot, tmp_path) -> None:
    scan, sessions = ScanFeature(workspace, host), SessionFilesFeature(workspace, host)
    other_host = FakeHost()
    qtbot.addWidget(other_host.parent)
    other_scan, other_sessions = ScanFeature(other, other_host), SessionFilesFeature(other, other_host)
    try:
        with qtbot.waitSignal(scan.finished, timeout=RUN_TIMEOUT_MS) as done:
            scan.scan_folder(str(_pictures(tmp_path / "images", 5)))
        assert done.args == ["done"]
        expected = tops(scan)
        path = tmp_path / "look.hookscope.json"
        assert sessions.save(path)
        saved = json.loads(path.read_text())
        file = tmp_path / "look.hookscope.scan" / "scan.json"
        assert saved["parts"]["scan"]["relative"] == "look.hookscope.scan/scan.json" and file.is_file()

        assert other_scan.result is None
        with qtbot.waitSignals([other_sessions.restored, other.run_applied], timeout=RUN_TIMEOUT_MS):
            other_sessions.open(path)
        assert other_sessions.last_problems == []
        assert other_scan.result is not None and list(other_scan.result.modules) == [PATH]
        assert tops(other_scan) == expected  # every channel's top images, in order, with their scores
        assert other_scan.result.processed == 5

        # The scan file deleted: one problem line, the rest (the ticks) restored, no scan shown.
        file.unlink()
        other_scan.result = None
        other.untick_all()
        with qtbot.waitSignals([other_sessions.restored, other.run_applied], timeout=RUN_TIMEOUT_MS):
            other_sessions.open(path)
        assert len(other_sessions.last_problems) == 1
        assert "There is no scan" in other_sessions.last_problems[0]
        assert "the rest of the session was" in other_sessions.last_problems[0]
        assert other_scan.result is None and other.ticked_pairs() == workspace.ticked_pairs()

        # A window without a scan saves no scan part.
        bare = tmp_path / "bare.hookscope.json"
        assert other_sessions.save(bare)
        assert "parts" not in json.loads(bare.read_text())
    finally:
        scan.shutdown()
        other_scan.shutdown()


def test_a_panel_orders_its_tiles_by_the_scans_channel_means(make_window, qtbot, tmp_path) -> None:
    window = make_window(ticks=[PATH])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    space, scan = window.workspace, window.features["scan"]
    panel = window.panel_area.panels[("forward", PATH)]
    assert "dataset" not in panel.sort_box._items  # no scan yet: no such choice
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):  # a scan shown redraws the results
        with qtbot.waitSignal(scan.finished, timeout=RUN_TIMEOUT_MS):
            scan.scan_folder(str(_pictures(tmp_path / "images", 5)))
    means = scan.result.modules[PATH].mean
    expected = np.argsort(-means, kind="stable")
    assert panel.sort_box._items["dataset"] == "by dataset mean"
    panel.choose(sort="dataset")
    assert np.array_equal(panel.picture.arrangement.order, expected)
    assert np.all(np.diff(means[panel.picture.arrangement.order]) <= 0)
    assert not np.array_equal(expected, np.argsort(-panel.picture.means, kind="stable"))  # not this image's order
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):  # the next run keeps it (the worker orders)
        space.run_again()
    panel = window.panel_area.panels[("forward", PATH)]
    assert panel.settings.sort == "dataset" and np.array_equal(panel.picture.arrangement.order, expected)
    # A module the scan did not cover offers no such order.
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        space.tick("layer2", "forward")
    assert "dataset" not in window.panel_area.panels[("forward", "layer2")].sort_box._items
