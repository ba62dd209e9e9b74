"""Sessions and Export run built from a workspace and a fake host: a saved session reopened in a fresh workspace
gives identical arrays, ticks, edits, images and every panel's settings (its A / B / A − B view included); a moved
image is one problem line; a dropped session opens; a model file's session reopens the file, asks for trust
again and notices a change; Export run writes the command line's layout."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from fakes import FakeHost
from PySide6.QtGui import QKeySequence

from hookscope.core.common.resources import sample_image
from hookscope.core.common.vocabulary import kind_of
from hookscope.core.engine.hooks import TENSOR
from hookscope.core.engine.interventions import parse_edit
from hookscope.core.engine.target_words import Objective
from hookscope.core.models.files import file_sha256
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.outputs.session import load_session, panels_ui, save_session, session_from
from hookscope.core.pictures.panels import PanelSettings
from hookscope.ui.features.session_files import SessionFilesFeature
from hookscope.ui.state.requests import ImageSource
from hookscope.ui.state.workspace import Workspace

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def feature(workspace, host) -> SessionFilesFeature:
    return SessionFilesFeature(workspace, host)


@pytest.fixture
def other(qtbot) -> Iterator[Workspace]:
    """A second workspace (another window), on its default start."""
    space = Workspace(weights="none", ticks=["layer4.1.conv2"])
    space.attach_view(lambda: (300, 300))
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        space.start("resnet18", None)
    yield space
    space.shutdown()


def records(space: Workspace) -> dict:
    return {(r.kind, r.key): r.tensor for r in space.last.result.records}


def edits(space: Workspace) -> list[str]:
    return [("" if edit.enabled else "#") + edit.spec for _, edit, _ in space.registry.edits()]


def test_it_contributes_its_file_actions_and_a_drop_handler(feature, host) -> None:
    titles = {id_: (spec.title, spec.menu) for id_, spec in host.actions.items()}
    assert titles == {
        "file.open_session": ("Open session…", "File"),
        "file.save_session": ("Save session…", "File"),
        "file.export_run": ("Export run…", "File"),
    }
    assert QKeySequence(host.actions["file.save_session"].shortcut) == QKeySequence("Ctrl+S")
    assert QKeySequence(host.actions["file.export_run"].shortcut) == QKeySequence("Ctrl+E")
    assert host.drop_handlers == [feature.open_dropped]


def test_a_saved_session_reopened_in_a_fresh_workspace_gives_identical_arrays(
    feature, workspace, host, other, qtbot, tmp_path, photos
) -> None:
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.open_paths([str(photos[0]), str(photos[1])])
        workspace.select_image(1)
        workspace.set_image_b(ImageSource.from_path(photos[2]))
        workspace.tick("layer2.0.conv1", "pre")
        workspace.tick("layer1.0.conv1", "tensor", False)
        workspace.tick("layer2.0.conv1", "grad_input")
        assert workspace.add_edit(parse_edit("zero:layer1.0.conv1:3,5")) is not None
        workspace.set_target(281)
    workspace.set_all("scaling", "shared")
    workspace.set_panel_settings("layer1.0.conv1", "forward", PanelSettings("magma", "shared", "max", "diff"))
    expected = records(workspace)
    assert expected[("forward", "layer1.0.conv1")][0, [3, 5]].abs().sum() == 0  # the edit worked
    path = tmp_path / "look.hookscope.json"
    assert feature.save(path)
    assert any(line.startswith(f"Session saved to {path}") for line in host.statuses)
    saved = json.loads(path.read_text())
    assert saved["edits"] == ["zero:layer1.0.conv1:3,5"] and saved["target"] == 281 and saved["scaling"] == "shared"
    assert [image["path"] for image in saved["images"]] == [str(photos[1]), str(photos[2])]
    assert ["layer1.0.conv1", "act", "magma", "shared", "max", "diff"] in saved["ui"]["panels"]  # the words
    assert saved["ui"]["image_list"] == [str(photos[0]), str(photos[1])]

    other_host = FakeHost()  # the other window
    qtbot.addWidget(other_host.parent)
    restorer = SessionFilesFeature(other, other_host)
    assert other.ticked_pairs() != workspace.ticked_pairs()
    with qtbot.waitSignals([restorer.restored, other.run_applied], timeout=RUN_TIMEOUT_MS):
        restorer.open(path)
    assert restorer.last_problems == [] and other_host.statuses[-1] == "Session restored."
    assert other.loaded is not workspace.loaded and other.loaded.name == "resnet18"
    assert other.ticked_pairs() == workspace.ticked_pairs()
    for pair in workspace.ticked_pairs():  # real hooks on the restored model's modules
        module = other.registry.module(pair[0])
        assert {
            "pre": module._forward_pre_hooks,
            "forward": module._forward_hooks,
            "tensor": module._forward_hooks,
            "grad_input": module._backward_hooks,
        }[pair[1]]
    assert edits(other) == ["zero:layer1.0.conv1:3,5"] and other.target == Objective("class", index=281)
    assert other.image.path == str(photos[1]) and list(other.image_list) == [str(photos[0]), str(photos[1])]
    assert other.image_b.path == str(photos[2]) and other.last.comparison is not None
    assert other.default_settings == workspace.default_settings
    assert other.settings_for("layer1.0.conv1", "forward").view == "diff"  # the panel reopens on A − B
    assert {pair: other.settings_for(*pair) for pair in other.ticked_pairs()} == {
        pair: workspace.settings_for(*pair) for pair in workspace.ticked_pairs()
    }
    got = records(other)
    assert set(got) == set(expected)
    for key, tensor in expected.items():
        assert torch.equal(got[key], tensor), key


def test_a_moved_image_is_one_problem_and_the_rest_is_restored(
    feature, workspace, host, qtbot, tmp_path, photos
) -> None:
    image = tmp_path / "moving.png"
    shutil.copy(photos[2], image)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.open_paths([str(image)])
        workspace.tick("layer3.1.conv1", "forward")
    saved_ticks = workspace.ticked_pairs()
    path = tmp_path / "session.hookscope.json"
    assert feature.save(path)
    image.rename(tmp_path / "moved_away.png")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.untick_all()
        workspace.open_paths([str(photos[0])])

    with qtbot.waitSignals([feature.restored, workspace.run_applied], timeout=RUN_TIMEOUT_MS):
        rest = feature.open_dropped([str(path), str(tmp_path / "other.hookscope.json"), str(photos[1])])
    assert rest == [str(photos[1])]  # the image is left for the image list; the second session is left out
    assert any("drop one session file at a time (1 more left out)" in line for line in host.statuses)
    problems = feature.last_problems
    assert len(problems) == 1 and "moving.png" in problems[0] and "was not found" in problems[0]
    assert host.errors[-1].startswith("Session restored with 1 problem") and "moving.png" in host.errors[-1]
    assert workspace.ticked_pairs() == saved_ticks  # the rest is restored
    assert workspace.registry.module("layer3.1.conv1")._forward_hooks
    assert workspace.last.image.path == str(photos[0])  # the image on screen stays
    assert feature.open_dropped([str(photos[1])]) == [str(photos[1])]  # no session: nothing to do here


def test_a_file_that_is_not_a_session_is_one_clear_line(feature, workspace, host, tmp_path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"hello": "world"}))
    previous = workspace.loaded
    assert feature.open_dropped([str(bad)]) == []
    assert host.errors == [f"'{bad}' is not a Hookscope session file."]
    assert workspace.loaded is previous and not workspace.loading


def test_a_model_file_session_records_the_hash_taken_on_opening_and_notices_a_change(
    feature, workspace, qtbot, tmp_path
) -> None:
    torch.manual_seed(11)
    saved = torchvision.models.resnet18().state_dict()
    weights = tmp_path / "mine.pth"
    torch.save(saved, weights)
    source = ModelSource(file=str(weights), arch="resnet18")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.load_model_with("mine.pth", lambda: open_model(source, hash_file=True))
    opened_hash = file_sha256(weights)
    expected = records(workspace)
    torch.save({**saved, "fc.bias": saved["fc.bias"] + 1}, weights)  # the file changes after it was opened
    path = tmp_path / "mine.hookscope.json"
    assert feature.save(path)
    session, problems = load_session(path)  # the hash of the file as it was opened: the change is noticed
    assert session.model["source"] == "state_dict" and session.model["arch"] == "resnet18"
    assert session.model["sha256"] == opened_hash and len(problems) == 1 and "has changed" in problems[0]

    torch.save(saved, weights)  # back as it was opened: the session reopens it without a problem
    with qtbot.waitSignals([feature.restored, workspace.run_applied], timeout=RUN_TIMEOUT_MS):
        feature.open(path)
    assert feature.last_problems == [] and workspace.loaded.source == "state_dict"
    assert torch.equal(workspace.loaded.module.fc.weight, saved["fc.weight"])
    for key, tensor in expected.items():
        assert torch.equal(records(workspace)[key], tensor), key


def test_a_session_never_carries_trust(feature, workspace, host, qtbot, tmp_path, monkeypatch) -> None:
    code = tmp_path / "net.py"
    code.write_text(
        "from torch import nn\n"
        "def build():\n    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 6, 3))\n"
    )
    source = ModelSource(file=f"{code}:build", trust=True)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.load_model_with("net.py:build", lambda: open_model(source, hash_file=True))
    ticks, expected = workspace.ticked_pairs(), records(workspace)
    path = tmp_path / "net.hookscope.json"
    assert feature.save(path)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_model("resnet18", "none")
    previous = workspace.loaded

    asked = []
    monkeypatch.setattr(feature, "ask_trust", lambda file, objects: asked.append(file) or False)
    with qtbot.waitSignal(feature.restored, timeout=RUN_TIMEOUT_MS):
        feature.open(path)
    assert asked == [f"{code}:build"] and workspace.loaded is previous
    assert any("not trusted" in line for line in feature.last_problems)
    assert "The model on screen was kept." in feature.last_problems

    monkeypatch.setattr(feature, "ask_trust", lambda file, objects: True)
    with qtbot.waitSignals([feature.restored, workspace.run_applied], timeout=RUN_TIMEOUT_MS):
        feature.open(path)
    assert feature.last_problems == [] and workspace.loaded.source == "python"
    assert workspace.ticked_pairs() == ticks
    for key, tensor in expected.items():
        assert torch.equal(records(workspace)[key], tensor), key


def test_export_run_writes_the_command_line_layout(feature, workspace, host, qtbot, tmp_path) -> None:
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.tick("layer2.0.conv1", "pre")
    out = tmp_path / "run"
    with qtbot.waitSignal(feature.exported, timeout=RUN_TIMEOUT_MS):
        assert feature.export_run(out)
    assert host.statuses[-1] == f"Run exported to {out}."
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hook_kinds"] == ["act", "in", "grad"]
    assert manifest["model"]["name"] == "resnet18" and manifest["input_shape"] == [1, 3, 224, 224]
    record = next(r for r in workspace.last.result.records if (r.kind, r.key) == ("forward", "layer1.0.conv1"))
    with np.load(out / "activations.npz") as archive:
        assert set(archive.files) == {"layer1.0.conv1"}
        np.testing.assert_array_equal(archive["layer1.0.conv1"], record.tensor.numpy())
    with np.load(out / "inputs.npz") as archive:
        assert set(archive.files) == {"layer2.0.conv1"}
    np.testing.assert_array_equal(np.load(out / "input.npy"), workspace.last.result.input.numpy())
    assert (out / "png" / "activations" / "layer1.0.conv1.png").is_file()


def test_export_run_without_results_says_so(host, qtbot) -> None:
    space = Workspace(weights="none")  # nothing loaded or run yet
    try:
        feature = SessionFilesFeature(space, host)
        assert not feature.export_run("/nonexistent/never")
        host.trigger("file.export_run")  # the menu entry says so too, before asking for a folder
        assert host.errors == ["Nothing to export yet: no run has finished."] * 2
        assert not feature.save(Path("/nonexistent/never.json"))
        assert host.errors[-1] == "No model is loaded yet: there is no session to save."
    finally:
        space.shutdown()


def test_a_session_with_the_old_backward_ticks_opens_with_the_grad_column(
    feature, workspace, host, qtbot, tmp_path
) -> None:
    """Before the Grad column was a tensor hook it was a full backward hook ("backward"): such a session opens with
    the Grad column ("tensor") ticked and that panel's settings carried over, without a problem line; a session that
    has both ticks on one module gets one Grad tick."""
    loaded = workspace.loaded
    hooks = [
        ("layer1.0.conv1", "forward"),
        ("layer1.0.conv1", "backward"),
        ("layer3.0.conv2", "backward"),
        ("layer3.0.conv2", "tensor"),
        ("layer4.0.conv1", "grad_input"),
    ]
    ui = panels_ui(
        PanelSettings(),
        {
            ("layer1.0.conv1", "backward"): PanelSettings("magma", "shared", "max", "A"),
            ("layer3.0.conv2", "backward"): PanelSettings("plasma"),
            ("layer3.0.conv2", "tensor"): PanelSettings("cividis"),
        },
    )
    path = tmp_path / "old.hookscope.json"
    save_session(session_from(loaded, hooks, [str(sample_image())], ui=ui), path)
    assert ["layer1.0.conv1", "grad_out"] in json.loads(path.read_text())["hooks"]  # the full backward hook's

    with qtbot.waitSignals([feature.restored, workspace.run_applied], timeout=RUN_TIMEOUT_MS):
        feature.open(path)
    assert feature.last_problems == []
    assert workspace.ticked_pairs() == {
        ("layer1.0.conv1", "forward"),
        ("layer1.0.conv1", "tensor"),
        ("layer3.0.conv2", "tensor"),
        ("layer4.0.conv1", "grad_input"),
    }
    assert not any(kind == "backward" for _, kind in workspace.ticked_pairs())
    assert workspace.settings_for("layer1.0.conv1", "tensor") == PanelSettings("magma", "shared", "max", "A")
    assert workspace.settings_for("layer3.0.conv2", "tensor").colormap == "cividis"  # its own settings win
    # the Grad column's hook is a tensor hook (from a forward hook), not a full backward hook
    infos = {(h.path, h.kind): h for h in workspace.registry.handles()}
    assert infos[("layer1.0.conv1", "tensor")].method == TENSOR
    assert not workspace.registry.module("layer1.0.conv1")._backward_hooks
    assert workspace.registry.module("layer4.0.conv1")._backward_hooks  # Grad in: a full backward hook
    kinds = {(r.kind, r.key) for r in workspace.last.result.records}
    assert {("tensor", "layer1.0.conv1"), ("tensor", "layer3.0.conv2"), ("grad_input", "layer4.0.conv1")} <= kinds

    saved = tmp_path / "again.hookscope.json"  # saved again, it says what the window now ticks
    assert feature.save(saved)
    saved_hooks = [(path, kind_of(word)) for path, word in json.loads(saved.read_text())["hooks"]]
    assert sorted(saved_hooks) == sorted(workspace.ticked_pairs())
