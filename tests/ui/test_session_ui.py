"""Sessions in the window: saved, reopened in a fresh window and run again they give identical arrays; a moved
image is reported and the rest restored; a dropped session file opens; a model file's session reopens it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torchvision
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.core.interventions import parse_edit
from app.core.session import load_session
from app.ui.main_window import MainWindow

RUN_TIMEOUT_MS = 120_000


def drop_files(window: MainWindow, paths: list[Path]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(QPoint(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    drop = QDropEvent(QPointF(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, drop)


def view_menu(window: MainWindow, submenu: str, label: str) -> None:
    """View > SUBMENU > LABEL, as a click does."""
    view = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    sub = next(a.menu() for a in view.actions() if a.text() == submenu)
    next(a for a in sub.actions() if a.text() == label).trigger()


def fresh_window(make_window, qtbot) -> MainWindow:
    window = make_window()
    window.show_dialogs = False
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    return window


def records(window: MainWindow) -> dict:
    return {(r.kind, r.key): r.tensor for r in window.last_outcome.result.records}


def panel_looks(window: MainWindow) -> dict:
    return {ident: (p.settings.colormap, p.settings.scaling, p.settings.sort) for ident, p in window.panel_area.panels.items()}


def test_a_saved_session_reopened_in_a_fresh_window_gives_identical_arrays(window, make_window, qtbot, tmp_path, photos):
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.open_paths([str(photos[1])])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tick("layer2.0.conv1", "pre", True)
        window.tick("layer1.0.conv1", "backward", False)
        window.registry.add_edit(parse_edit("zero:layer4.1.conv2:3,5"))
        window.set_target(281)
    window.panel_area.panels[("forward", "layer4.1.conv2")].choose(colormap="magma", sort="max")
    view_menu(window, "Scaling (all panels)", "shared scaling")
    expected_records, expected_ticks = records(window), window.ticked_pairs()
    expected_looks = panel_looks(window)
    assert expected_records[("forward", "layer4.1.conv2")][0, [3, 5]].abs().sum() == 0  # the edit worked
    path = tmp_path / "look.hookscope.json"
    assert window.sessions.save(path)
    saved = json.loads(path.read_text())
    assert saved["model"]["name"] == "resnet18" and saved["edits"] == ["zero:layer4.1.conv2:3,5"]
    assert saved["target"] == 281 and saved["scaling"] == "shared"
    assert saved["images"][0]["path"] == str(photos[1])

    other = fresh_window(make_window, qtbot)
    assert other.ticked_pairs() != expected_ticks
    with qtbot.waitSignals([other.sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        other.sessions.open(path)
    assert other.sessions.last_problems == []
    assert other.loaded is not window.loaded and other.loaded.name == "resnet18"
    assert other.ticked_pairs() == expected_ticks
    assert other.target == 281 and other.last_outcome.image.path == str(photos[1])
    assert [edit.spec for _, edit, _ in other.registry.edits()] == ["zero:layer4.1.conv2:3,5"]
    assert panel_looks(other) == expected_looks
    got = records(other)
    assert set(got) == set(expected_records)
    for key, tensor in expected_records.items():
        assert torch.equal(got[key], tensor), key


def test_a_moved_image_is_reported_and_the_rest_restored(window, make_window, qtbot, tmp_path, photos):
    image = tmp_path / "moving.png"
    shutil.copy(photos[2], image)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.open_paths([str(image)])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tick("layer3.1.conv1", "forward", True)
    view_menu(window, "Colormap (all panels)", "plasma")
    path = tmp_path / "session.hookscope.json"
    assert window.sessions.save(path)
    image.rename(tmp_path / "moved_away.png")

    other = fresh_window(make_window, qtbot)
    shown_before = other.last_outcome.image.path
    with qtbot.waitSignals([other.sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        drop_files(other, [path])  # a dropped session file opens as a session, not as an image
    problems = other.sessions.last_problems
    assert len(problems) == 1 and "moving.png" in problems[0] and "was not found" in problems[0]
    assert "Session restored with 1 problem" in other.last_error and "moving.png" in other.last_error
    assert other.ticked_pairs() == window.ticked_pairs()  # the rest is restored
    assert {p.settings.colormap for p in other.panel_area.panels.values()} == {"plasma"}
    assert other.last_outcome.image.path == shown_before  # the image on screen stays
    assert ("forward", "layer3.1.conv1") in records(other)


def test_a_model_file_session_reopens_the_file_and_notices_a_change(window, make_window, qtbot, tmp_path, monkeypatch):
    torch.manual_seed(11)
    saved = torchvision.models.resnet18().state_dict()
    weights = tmp_path / "mine.pth"
    torch.save(saved, weights)
    monkeypatch.setattr(window.model_files, "ask_architecture", lambda file, keys: ("resnet18", False))
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.model_files.open(weights)
    path = tmp_path / "mine.hookscope.json"
    assert window.sessions.save(path)
    session, problems = load_session(path)
    assert problems == [] and session.model["source"] == "state_dict" and session.model["arch"] == "resnet18"
    assert session.model["path"] == str(weights) and len(session.model["sha256"]) == 64

    other = fresh_window(make_window, qtbot)
    monkeypatch.setattr(other.model_files, "ask_architecture", lambda *a: (_ for _ in ()).throw(AssertionError))
    with qtbot.waitSignals([other.sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        other.sessions.open(path)
    assert other.sessions.last_problems == []
    assert other.loaded.source == "state_dict" and torch.equal(other.loaded.module.fc.weight, saved["fc.weight"])
    for key, tensor in records(window).items():
        assert torch.equal(records(other)[key], tensor), key

    torch.save({**saved, "fc.bias": saved["fc.bias"] + 1}, weights)  # the file changes after the session
    with qtbot.waitSignals([other.sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        other.sessions.open(path)
    assert len(other.sessions.last_problems) == 1 and "has changed" in other.sessions.last_problems[0]
    assert torch.equal(other.loaded.module.fc.bias, saved["fc.bias"] + 1)  # the file as it is now


def test_a_session_that_is_not_one_is_one_clear_line(window, qtbot, tmp_path):
    window.show_dialogs = False
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"hello": "world"}))
    previous = window.loaded
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS) as shown:
        drop_files(window, [bad])
    assert shown.args[0] == f"'{bad}' is not a Hookscope session file."
    assert window.loaded is previous


def test_a_session_never_carries_trust(window, make_window, qtbot, tmp_path, monkeypatch):
    code = tmp_path / "net.py"
    code.write_text("from torch import nn\n"
                    "def build():\n    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 6, 3))\n")
    monkeypatch.setattr(window.model_files, "ask_trust", lambda file, objects: True)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.model_files.open(f"{code}:build")
    path = tmp_path / "net.hookscope.json"
    assert window.sessions.save(path)

    other = fresh_window(make_window, qtbot)
    previous = other.loaded
    asked = []
    monkeypatch.setattr(other.model_files, "ask_trust", lambda file, objects: asked.append(file) or False)
    with qtbot.waitSignal(other.sessions.restored, timeout=RUN_TIMEOUT_MS):
        other.sessions.open(path)
    assert asked == [f"{code}:build"] and other.loaded is previous
    assert any("not trusted" in line for line in other.sessions.last_problems)

    monkeypatch.setattr(other.model_files, "ask_trust", lambda file, objects: True)
    with qtbot.waitSignals([other.sessions.restored, other.run_finished], timeout=RUN_TIMEOUT_MS):
        other.sessions.open(path)
    assert other.sessions.last_problems == [] and other.loaded.source == "python"
    assert other.ticked_pairs() == window.ticked_pairs()
    for key, tensor in records(window).items():
        assert torch.equal(records(other)[key], tensor), key
