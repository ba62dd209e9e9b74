"""Sessions in the window: saved, reopened in a fresh window and run again they give identical arrays; a moved
image is reported and the rest restored; a panel switched to A − B reopens as A − B; a dropped session file opens;
a model file's session reopens it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
import torchvision
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from hookscope.core.engine.interventions import parse_edit
from hookscope.core.engine.target_words import Objective
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.outputs.session import load_session
from hookscope.ui.main_window import MainWindow

RUN_TIMEOUT_MS = 120_000


def drop_files(window: MainWindow, paths: list[Path]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(
        QPoint(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window, enter)
    drop = QDropEvent(
        QPointF(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window, drop)


def fresh_window(make_window, qtbot) -> MainWindow:
    window = make_window()
    window.show_dialogs = False
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    return window


def records(window: MainWindow) -> dict:
    return {(r.kind, r.key): r.tensor for r in window.workspace.last.result.records}


def panel_looks(window: MainWindow) -> dict:
    return {
        ident: (p.settings.colormap, p.settings.scaling, p.settings.sort, p.settings.view)
        for ident, p in window.panel_area.panels.items()
    }


def test_a_saved_session_reopened_in_a_fresh_window_gives_identical_arrays(
    window, make_window, qtbot, tmp_path, photos
):
    space = window.workspace
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.open_paths([str(photos[1])])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.tick("layer2.0.conv1", "pre", True)
        space.tick("layer1.0.conv1", "tensor", False)
        space.tick("layer2.0.conv1", "grad_input", True)
        space.add_edit(parse_edit("zero:layer4.1.conv2:3,5"))
        space.set_target(281)
    window.panel_area.panels[("forward", "layer4.1.conv2")].choose(colormap="magma", sort="max")
    window.menus.actions["view.scaling.shared"].trigger()  # View > Scaling (all panels) > shared scaling
    expected_records, expected_ticks = records(window), space.ticked_pairs()
    expected_looks = panel_looks(window)
    assert expected_records[("forward", "layer4.1.conv2")][0, [3, 5]].abs().sum() == 0  # the edit worked
    path = tmp_path / "look.hookscope.json"
    assert window.features["sessions"].save(path)
    saved = json.loads(path.read_text())
    assert saved["model"]["name"] == "resnet18" and saved["edits"] == ["zero:layer4.1.conv2:3,5"]
    assert saved["target"] == 281 and saved["scaling"] == "shared"
    assert saved["images"][0]["path"] == str(photos[1])

    other = fresh_window(make_window, qtbot)
    sessions = other.features["sessions"]
    assert other.workspace.ticked_pairs() != expected_ticks
    with qtbot.waitSignals([sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        sessions.open(path)
    assert sessions.last_problems == []
    assert other.workspace.loaded is not space.loaded and other.workspace.loaded.name == "resnet18"
    assert other.workspace.ticked_pairs() == expected_ticks
    assert other.workspace.target == Objective("class", index=281) and other.workspace.last.image.path == str(photos[1])
    assert [edit.spec for _, edit, _ in other.workspace.registry.edits()] == ["zero:layer4.1.conv2:3,5"]
    assert panel_looks(other) == expected_looks
    got = records(other)
    assert set(got) == set(expected_records)
    for key, tensor in expected_records.items():
        assert torch.equal(got[key], tensor), key


def test_a_panel_switched_to_a_minus_b_reopens_as_a_minus_b(window, make_window, qtbot, tmp_path, photos):
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.features["image_b"].set_image_b(str(photos[1]))
    window.panel_area.panels[("forward", "layer4.1.conv2")].choose_view("diff")
    path = tmp_path / "ab.hookscope.json"
    assert window.features["sessions"].save(path)
    saved = json.loads(path.read_text())
    assert ["layer4.1.conv2", "act", "viridis", "channel", "none", "diff"] in saved["ui"]["panels"]
    assert saved["images"][1]["path"] == str(photos[1])

    other = fresh_window(make_window, qtbot)
    sessions = other.features["sessions"]
    with qtbot.waitSignals([sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        sessions.open(path)
    assert sessions.last_problems == [] and other.workspace.image_b.path == str(photos[1])
    panel = other.panel_area.panels[("forward", "layer4.1.conv2")]
    assert panel.view_box.isVisibleTo(panel) and panel.view_box.value == "diff"
    a, b = (
        next(r for r in result.records if (r.kind, r.key) == ("forward", "layer4.1.conv2"))
        for result in (other.workspace.last.result, other.workspace.last.comparison.result)
    )
    np.testing.assert_array_equal(panel.picture.channels.data, a.tensor[0].numpy() - b.tensor[0].numpy())
    assert other.panel_area.panels[("tensor", "layer4.1.conv2")].view_box.value == "A"  # only that one


def test_a_moved_image_is_reported_and_the_rest_restored(window, make_window, qtbot, tmp_path, photos):
    image = tmp_path / "moving.png"
    shutil.copy(photos[2], image)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.open_paths([str(image)])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.tick("layer3.1.conv1", "forward", True)
    window.menus.actions["view.colormap.plasma"].trigger()  # View > Colormap (all panels) > plasma
    path = tmp_path / "session.hookscope.json"
    assert window.features["sessions"].save(path)
    image.rename(tmp_path / "moved_away.png")

    other = fresh_window(make_window, qtbot)
    sessions = other.features["sessions"]
    shown_before = other.workspace.last.image.path
    with qtbot.waitSignals([sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        drop_files(other, [path])  # a dropped session file opens as a session, not as an image
    problems = sessions.last_problems
    assert len(problems) == 1 and "moving.png" in problems[0] and "was not found" in problems[0]
    assert "Session restored with 1 problem" in other.last_error and "moving.png" in other.last_error
    assert other.workspace.ticked_pairs() == window.workspace.ticked_pairs()  # the rest is restored
    assert {p.settings.colormap for p in other.panel_area.panels.values()} == {"plasma"}
    assert other.workspace.last.image.path == shown_before  # the image on screen stays
    assert ("forward", "layer3.1.conv1") in records(other)


def test_a_model_file_session_reopens_the_file_and_notices_a_change(window, make_window, qtbot, tmp_path):
    torch.manual_seed(11)
    saved = torchvision.models.resnet18().state_dict()
    weights = tmp_path / "mine.pth"
    torch.save(saved, weights)
    source = ModelSource(file=str(weights), arch="resnet18")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.load_model_with("mine.pth", lambda: open_model(source, hash_file=True))
    path = tmp_path / "mine.hookscope.json"
    assert window.features["sessions"].save(path)
    session, problems = load_session(path)
    assert problems == [] and session.model["source"] == "state_dict" and session.model["arch"] == "resnet18"
    assert session.model["path"] == str(weights) and len(session.model["sha256"]) == 64

    other = fresh_window(make_window, qtbot)
    sessions = other.features["sessions"]
    with qtbot.waitSignals([sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        sessions.open(path)  # the session names the architecture: nothing is asked
    assert sessions.last_problems == []
    loaded = other.workspace.loaded
    assert loaded.source == "state_dict" and torch.equal(loaded.module.fc.weight, saved["fc.weight"])
    for key, tensor in records(window).items():
        assert torch.equal(records(other)[key], tensor), key

    torch.save({**saved, "fc.bias": saved["fc.bias"] + 1}, weights)  # the file changes after the session
    with qtbot.waitSignals([sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        sessions.open(path)
    assert len(sessions.last_problems) == 1 and "has changed" in sessions.last_problems[0]
    assert torch.equal(other.workspace.loaded.module.fc.bias, saved["fc.bias"] + 1)  # the file as it is now


def test_a_session_that_is_not_one_is_one_clear_line(window, qtbot, tmp_path):
    window.show_dialogs = False
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"hello": "world"}))
    previous = window.workspace.loaded
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS) as shown:
        drop_files(window, [bad])
    assert shown.args[0] == f"'{bad}' is not a Hookscope session file."
    assert window.workspace.loaded is previous


def test_a_session_never_carries_trust(window, make_window, qtbot, tmp_path, monkeypatch):
    code = tmp_path / "net.py"
    code.write_text(
        "from torch import nn\n"
        "def build():\n    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 6, 3))\n"
    )
    source = ModelSource(file=f"{code}:build", trust=True)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.load_model_with("net.py:build", lambda: open_model(source, hash_file=True))
    path = tmp_path / "net.hookscope.json"
    assert window.features["sessions"].save(path)

    other = fresh_window(make_window, qtbot)
    sessions = other.features["sessions"]
    previous = other.workspace.loaded
    asked = []
    monkeypatch.setattr(sessions, "ask_trust", lambda file, objects: asked.append(file) or False)
    with qtbot.waitSignal(sessions.restored, timeout=RUN_TIMEOUT_MS):
        sessions.open(path)
    assert asked == [f"{code}:build"] and other.workspace.loaded is previous
    assert any("not trusted" in line for line in sessions.last_problems)

    monkeypatch.setattr(sessions, "ask_trust", lambda file, objects: True)
    with qtbot.waitSignals([sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        sessions.open(path)
    assert sessions.last_problems == [] and other.workspace.loaded.source == "python"
    assert other.workspace.ticked_pairs() == window.workspace.ticked_pairs()
    for key, tensor in records(window).items():
        assert torch.equal(records(other)[key], tensor), key
