"""The scan feature on a real workspace (ResNet-18, random weights) and a fake host: File > Scan a folder… for the
ticked activations in the background on a copy of the model (the live model and its registry untouched), progress
and Cancel, the Channel view's channel then showing its top images with boxes computed on demand, a click opening
one as image A, and a scan.json from the command line opened in the window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtWidgets import QFileDialog, QToolButton

from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.results import ScanSettings, write_scan
from hookscope.core.scan.run import scan_images
from hookscope.ui.features.scan import DOCK_ID, ScanFeature

RUN_TIMEOUT_MS = 120_000
PATH = "layer1.0.conv1"  # the workspace fixture ticks its activations and gradients


def _pictures(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    for index in range(count):
        size = (int(rng.integers(60, 110)), int(rng.integers(50, 100)))
        small = rng.integers(0, 256, size=(size[1] // 8 + 2, size[0] // 8 + 2, 3), dtype=np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(folder / f"img{index:02d}.png")
    return folder


@pytest.fixture
def folder(tmp_path) -> Path:
    return _pictures(tmp_path / "images", 6)


@pytest.fixture
def feature(workspace, host) -> ScanFeature:
    made = ScanFeature(workspace, host)
    yield made
    made.shutdown()


def forward_picture(workspace, path: str = PATH):
    return next(p for p in workspace.last.pictures if p.kind == "forward" and p.path == path)


def hook_counts(model) -> dict[str, int]:
    return {name: len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
            for name, m in model.named_modules()}  # fmt: skip


def test_file_scan_a_folder_scans_the_ticked_modules_on_a_copy(feature, workspace, host, folder, qtbot, monkeypatch):
    assert "file.scan_folder" in host.actions and host.actions["file.scan_folder"].menu == "File"
    assert feature.ticked_modules() == (PATH,)
    live = workspace.loaded.module
    before, ticks = hook_counts(live), workspace.ticked_pairs()
    during: list[dict[str, int]] = []
    feature.progressed.connect(lambda _p: during.append(hook_counts(live)))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        host.trigger("file.scan_folder")
        assert feature.running and not feature.cancel_button.isHidden()
    assert done.args == ["done"]
    assert not host.docks[DOCK_ID].isHidden() and feature.progress.isHidden()
    result = feature.result
    assert list(result.modules) == [PATH] and result.processed == 6 and result.complete
    assert len(result.modules[PATH].top) == 64 and all(len(t) == 6 for t in result.modules[PATH].top)
    # The scan ran on a copy: the live model's hooks (the registry's ticks) never changed, before, during or after.
    assert during and all(counts == before for counts in during) and hook_counts(live) == before
    assert workspace.ticked_pairs() == ticks
    assert feature._scan_model.module is not live
    # ... and it is what a scan of the live model's weights gives.
    expected = scan_images(
        workspace.loaded, find_images(folder), ScanSettings((PATH,), top=9, batch_size=16, boxes=False)
    )
    assert [[e.image for e in c] for c in expected.modules[PATH].top] == [
        [e.image for e in c] for c in result.modules[PATH].top
    ]


def test_a_scan_asked_for_during_a_run_waits_for_it(feature, workspace, folder, qtbot):
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
            workspace.run_again()
            assert workspace.scheduler.busy
            assert feature.scan_folder(str(folder))
            assert "waiting for the run" in feature.title.text() and feature._copy_job is None
    assert done.args == ["done"]


def test_the_channel_shown_gets_its_top_images_and_a_click_opens_one(feature, workspace, host, folder, qtbot):
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.scan_folder(str(folder))
    with qtbot.waitSignal(feature.patches_shown, timeout=RUN_TIMEOUT_MS) as shown:
        host.open_channel(forward_picture(workspace), 3)
    assert shown.args == [PATH, 3]
    entries = feature.entries
    assert [e.image for e in entries] == [e.image for e in feature.result.top(PATH, 3)]
    assert all(e.box is not None for e in entries)  # computed on demand, for this channel only
    assert all(e.box is None for c, top in enumerate(feature.result.modules[PATH].top) if c != 3 for e in top)
    buttons = feature.widget.findChildren(QToolButton)
    assert len(buttons) == 6 and "channel 3" in feature.stats.text() and "active" in feature.stats.text()
    first = Path(feature.result.images[entries[0].image])
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.widget.findChild(QToolButton, "scan_patch_0").click()
    assert Path(workspace.image.path) == first
    # A module the scan did not cover says so.
    workspace.tick("layer2", "forward")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        pass
    host.open_channel(forward_picture(workspace, "layer2"), 0)
    assert "no layer2" in feature.stats.text() and feature.entries == []


def test_cancel_stops_the_scan_and_keeps_the_previous_results(feature, workspace, folder, tmp_path, qtbot):
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.scan_folder(str(folder))
    previous = feature.result
    many = _pictures(tmp_path / "many", 60)
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        feature.scan_folder(str(many))
        qtbot.waitUntil(lambda: feature._scan is not None, timeout=RUN_TIMEOUT_MS)
        feature.cancel()
    assert done.args == ["cancelled"] and feature.result is previous and not feature.running


def test_nothing_ticked_or_no_images_is_one_clear_message(feature, workspace, host, tmp_path, qtbot):
    (tmp_path / "empty").mkdir()
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        feature.scan_folder(str(tmp_path / "empty"))
    assert done.args == ["failed"] and "no image files" in host.errors[-1]
    workspace.untick_all()
    assert not feature.scan_folder(str(tmp_path))
    assert host.errors[-1] == "Tick the activations (Act) of the modules to scan first."


def test_a_scan_json_from_the_command_line_opens_in_the_window(feature, workspace, host, folder, tmp_path, qtbot):
    made = scan_images(workspace.loaded, find_images(folder), ScanSettings((PATH,), top=2, batch_size=4))
    write_scan(made, tmp_path / "out")
    assert feature.open_scan(str(tmp_path / "out" / "scan.json"))
    with qtbot.waitSignal(feature.patches_shown, timeout=RUN_TIMEOUT_MS):
        host.open_channel(forward_picture(workspace), 5)
    assert [(e.image, e.box) for e in feature.entries] == [(e.image, e.box) for e in made.top(PATH, 5)]
    assert not feature.open_scan(str(tmp_path / "nothing.json"))
    assert "There is no scan" in host.errors[-1]


def test_in_the_window_a_tile_click_shows_the_top_images_under_the_channel_view(make_window, folder, qtbot):
    from PySide6.QtCore import Qt

    window = make_window(ticks=[PATH])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    feature = window.features["scan"]
    assert "file.scan_folder" in window.menus.actions and "file.open_scan" in window.menus.actions
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        feature.scan_folder(str(folder))
    assert done.args == ["done"]
    with qtbot.waitSignal(feature.patches_shown, timeout=RUN_TIMEOUT_MS):
        window.open_channel(forward_picture(window.workspace), 2)
    dock = window.dock(DOCK_ID)
    assert dock.isVisible() and window.dock("channel").isVisible()
    assert window.dockWidgetArea(dock) == Qt.DockWidgetArea.BottomDockWidgetArea
    assert dock in window.tabifiedDockWidgets(window.dock("channel"))  # a tab beside the channel view, under the cards
    # after a scan, the click brings the Top images to the front (issue 44, item 9): the tab in front is theirs
    from PySide6.QtWidgets import QTabBar

    bars = [bar for bar in window.findChildren(QTabBar) if {bar.tabText(i) for i in range(bar.count())} >= {"Channel",
            "Top images"}]  # fmt: skip
    assert len(bars) == 1 and bars[0].tabText(bars[0].currentIndex()) == "Top images"
    assert len(feature.entries) == 6


def test_another_model_drops_the_scan_whether_it_was_running_or_done(feature, workspace, folder, qtbot):
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.scan_folder(str(folder))
    assert feature.result is not None
    with qtbot.waitSignal(workspace.model_changed, timeout=RUN_TIMEOUT_MS):
        feature.scan_folder(str(folder))  # running (or just done) when the new model arrives
        workspace.set_model("resnet18")
    qtbot.waitUntil(lambda: not feature.running, timeout=RUN_TIMEOUT_MS)
    assert feature.result is None and feature._scan_model is None
    assert "previous model" in feature.title.text() or "another model" in feature.title.text()


# ---- issue 23, item 7: a session's scan that is damaged or hostile -----------------------------------------------
@pytest.fixture
def session_scan(workspace, folder, tmp_path) -> tuple[Path, dict]:
    """A real scan.json beside a session file, and the document in it."""
    import json

    made = scan_images(workspace.loaded, find_images(folder), ScanSettings((PATH,), top=2, batch_size=4, boxes=False))
    file = write_scan(made, tmp_path / "my.hookscope.scan")
    return file, json.loads(file.read_text())


# (a scan path of /dev/zero goes through the same read_scan: tests/core/test_hostile_files.py checks it in a
# process of its own with bounded memory, since a regression would read it whole)
@pytest.mark.parametrize("damage", ["channels 1e999", "image 10**18", "image -3"])
def test_a_damaged_scan_in_a_session_is_one_problem_line_and_the_restore_finishes(feature, session_scan, damage):
    import json

    file, document = session_scan
    entry = {"path": str(file), "relative": "my.hookscope.scan/scan.json"}
    if damage == "channels 1e999":
        document["modules"][PATH]["channels"] = 1e999
    else:
        document["modules"][PATH]["top"][0][0]["image"] = 10**18 if damage == "image 10**18" else -3
    file.write_text(json.dumps(document).replace("Infinity", "1e999"))
    problems = feature.restore_from_session(entry, str(file.parent.parent))
    assert len(problems) == 1 and problems[0].endswith("The scan was not restored; the rest of the session was.")
    assert "\n" not in problems[0] and feature.result is None


def test_a_session_scan_box_larger_than_its_image_shows_the_image(feature, workspace, host, session_scan, qtbot):
    import json

    file, document = session_scan
    for channel in document["modules"][PATH]["top"]:
        for entry in channel:
            entry["box"] = [0, 0, 20000, 20000]  # a decompression bomb's size, were it cropped as it is
    file.write_text(json.dumps(document))
    assert feature.restore_from_session({"path": str(file)}, str(file.parent.parent)) == []
    with qtbot.waitSignal(feature.patches_shown, timeout=RUN_TIMEOUT_MS):
        host.open_channel(forward_picture(workspace), 3)
    assert len(feature.entries) == 2 and "reading its top images" not in feature.stats.text()


def test_a_tile_shows_any_file_name_as_named(feature, workspace, host, tmp_path, qtbot):
    """Issue 46, item 9: a file named with a newline, with markup, or with a byte that is not UTF-8 is shown in its
    tile's tooltip as named (escaped), not as two lines, as bold text or as an error."""
    import os
    import re

    from PySide6.QtGui import Qt, QTextDocument

    names = {b"new\nline.png": "new\\nline.png", b"<b>bold & co.png": "<b>bold & co.png",
             b"latin1 caf\xe9.png": "latin1 caf\\xe9.png"}  # fmt: skip
    folder = _pictures(tmp_path / "odd", len(names))
    for source, name in zip(sorted(folder.iterdir()), names):
        os.rename(source, os.path.join(os.fsencode(folder), name))
    made = scan_images(workspace.loaded, find_images(folder), ScanSettings((PATH,), top=3, batch_size=4, boxes=False))
    write_scan(made, tmp_path / "out")
    assert feature.open_scan(str(tmp_path / "out" / "scan.json"))
    with qtbot.waitSignal(feature.patches_shown, timeout=RUN_TIMEOUT_MS):
        host.open_channel(forward_picture(workspace), 5)
    shown = []
    for rank in range(len(names)):
        tip = feature.widget.findChild(QToolButton, f"scan_patch_{rank}").toolTip()
        document = QTextDocument()  # what Qt shows: the tip as rich text where it looks like markup
        document.setHtml(tip) if Qt.mightBeRichText(tip) else document.setPlainText(tip)
        shown.append(re.split("[\n\u2028]", document.toPlainText())[0])
    assert sorted(shown) == sorted(names.values())
