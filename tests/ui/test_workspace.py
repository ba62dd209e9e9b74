"""The workspace without a window: every change a method and a signal, runs scheduled and superseded."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import RUN_TIMEOUT_MS, photo

from hookscope.core.engine.interventions import parse_edit
from hookscope.ui.state.requests import ImageSource

pytestmark = pytest.mark.usefixtures("qtbot")


def test_a_tick_registers_the_hook_on_the_live_module_and_announces_it(workspace, qtbot) -> None:
    module = workspace.registry.module("layer2.0.conv1")
    assert not module._forward_hooks
    with qtbot.waitSignal(workspace.hooks_changed) as changed:
        assert workspace.tick("layer2.0.conv1", "forward")
    assert changed.args == [[("layer2.0.conv1", "forward", True)]]
    assert len(module._forward_hooks) == 1  # on the module the moment the method returns
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        pass
    keys = {(r.kind, r.key) for r in ran.args[0].result.records}
    assert ("forward", "layer2.0.conv1") in keys
    workspace.tick("layer2.0.conv1", "forward", False)
    assert not module._forward_hooks


def test_ticking_an_unknown_module_changes_nothing(workspace, qtbot) -> None:
    before = workspace.ticked_pairs()
    with qtbot.assertNotEmitted(workspace.hooks_changed):
        assert not workspace.tick("layer9.conv", "forward")
    assert workspace.ticked_pairs() == before


def test_a_burst_of_changes_ends_in_one_applied_run(workspace, qtbot) -> None:
    applied = len(workspace.applied_generations)
    for path in ("layer2.0.conv1", "layer2.0.conv2", "layer3.0.conv1"):
        workspace.tick(path, "forward")
    workspace.set_target(5)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        pass
    qtbot.wait(300)  # the wait is what is tested: no second run is applied in this time
    assert len(workspace.applied_generations) == applied + 1
    assert ran.args[0].result.target_index == 5
    assert ran.args[0].generation == workspace.generation


def test_an_unreadable_image_keeps_the_results_and_their_image(workspace, qtbot, tmp_path: Path) -> None:
    shown = workspace.last
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a picture")
    with qtbot.waitSignal(workspace.failed, timeout=RUN_TIMEOUT_MS) as failed:
        workspace.open_paths([str(broken)])
    assert "broken.png" in failed.args[0].message
    assert workspace.last is shown
    assert workspace.wanted_image == shown.image  # the next run uses the image on screen
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        workspace.tick("layer2.0.conv1", "forward")
    assert ran.args[0].image.name == shown.image.name


def test_edits_go_through_the_workspace_and_run(workspace, qtbot) -> None:
    edit = parse_edit("zero:layer1.0.conv1:0,1")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        edit_id = workspace.add_edit(edit)
    assert edit_id is not None
    record = next(r for r in ran.args[0].result.records if r.kind == "forward" and r.key == "layer1.0.conv1")
    assert float(record.tensor[:, :2].abs().max()) == 0.0
    assert float(record.tensor[:, 2:].abs().max()) > 0.0
    with qtbot.waitSignal(workspace.hooks_changed):
        workspace.remove_edit(edit_id)
    assert not workspace.registry.edits()


def test_a_refused_edit_is_an_error_message_and_changes_nothing(workspace, qtbot) -> None:
    with qtbot.waitSignal(workspace.error) as shown:
        assert workspace.add_edit(parse_edit("zero:layer1.0.conv1:999")) is None
    assert "999" in shown.args[0]
    assert not workspace.registry.edits()


def test_a_model_switch_carries_ticks_and_edits(workspace, qtbot) -> None:
    workspace.add_edit(parse_edit("scale:layer1.0.conv1:0.5"))
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_model("resnet34", "none")
    assert workspace.loaded.name == "resnet34"
    assert ("layer1.0.conv1", "forward") in workspace.ticked_pairs()
    assert [edit.spec for _, edit, _ in workspace.registry.edits()] == ["scale:layer1.0.conv1:0.5"]
    assert "carried over" in workspace.model_message or workspace.applied_generations


def test_image_b_runs_through_the_same_hooks(workspace, qtbot, tmp_path: Path) -> None:
    other = photo(tmp_path / "b.png", 3)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        workspace.set_image_b(ImageSource.from_path(other))
    outcome = ran.args[0]
    assert outcome.comparison is not None
    assert {r.key for r in outcome.comparison.result.records} >= {"layer1.0.conv1"}
