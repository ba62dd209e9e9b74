"""The Interventions feature built from a workspace and a fake host: its dock, its action and menu entries, edits
that are real hooks on the live module, switches and removals that restore the values exactly, and an edit that
fails in a run switched off by the error's fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import no_run_asked
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QMenu

from hookscope.core.common.errors import DeviceError, ImageError, RunError
from hookscope.core.engine.interventions import Intervention
from hookscope.ui.dialogs.edit_dialog import EditDialog, parse_channels
from hookscope.ui.features.interventions import ADD_ACTION, DOCK_ID, ON, REMOVE, InterventionsFeature
from hookscope.ui.state.workspace import RunFailure

RUN_TIMEOUT_MS = 120_000
PATH = "layer1.0.conv1"  # ticked for activations and gradients by the workspace fixture


@pytest.fixture
def feature(workspace, host) -> InterventionsFeature:
    return InterventionsFeature(workspace, host)


def action_named(menu: QMenu, text: str):
    actions = {action.text(): action for action in menu.actions()}
    assert text in actions, f"no '{text}' in {list(actions)}"
    return actions[text]


def activations(workspace, path: str = PATH) -> np.ndarray:
    return next(r for r in workspace.last.result.records if (r.kind, r.key) == ("forward", path)).tensor.numpy().copy()


def forward_hooks(workspace, path: str = PATH) -> int:
    return len(workspace.registry.module(path)._forward_hooks)


def picture_of(workspace, kind: str = "forward", path: str = PATH):
    return next(p for p in workspace.last.pictures if (p.kind, p.key) == (kind, path))


def test_it_contributes_a_dock_an_action_and_menu_entries(feature, workspace, host) -> None:
    assert host.docks[DOCK_ID].widget() is feature.widget
    spec = host.actions[ADD_ACTION]
    assert (spec.title, spec.menu) == ("Add intervention…", "Hooks")
    assert [a.text() for a in host.module_menu(PATH).actions() if not a.isSeparator()] == [
        "Switch off channels…",
        "Scale output…",
        "Scale input…",
        "Scale gradient (tensor hook)…",
        "Scale grad_input (full backward hook)…",
        "Mix with another image…",
    ]
    assert [a.text() for a in host.tile_menu(picture_of(workspace), 5).actions()] == [
        "Switch off channel 5",
        "Keep only channel 5",
        "Scale channel 5…",
    ]
    host.trigger(ADD_ACTION)
    assert isinstance(feature.dialog, EditDialog) and feature.dialog.kind == "zero"
    assert feature.dialog.parent() is host.dialog_parent()
    assert feature.rows() == [] and not feature.clear_button.isEnabled()
    feature.dialog.reject()  # not left on screen


def test_switching_off_a_channel_from_the_tile_menu_then_switching_and_removing_it(
    feature, workspace, host, qtbot
) -> None:
    original = activations(workspace)
    before = forward_hooks(workspace)
    menu = host.tile_menu(picture_of(workspace), 5)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        action_named(menu, "Switch off channel 5").trigger()
        assert forward_hooks(workspace) == before + 1  # on the live module at once, before any run
    ((edit_id, edit, info),) = workspace.registry.edits()
    assert edit == Intervention("zero", PATH, channels=(5,)) and info.reads_or_edits == "edits"
    captured = activations(workspace)[0]
    assert not captured[5].any()
    np.testing.assert_array_equal(np.delete(captured, 5, axis=0), np.delete(original[0], 5, axis=0))
    assert workspace.last.result.baseline_scores is not None  # the predictions view shows the changes from it
    assert feature.rows() == [(edit_id, True, edit.describe(), "zero:layer1.0.conv1:5")]

    # Off: the handle is removed (not just ignored); the run gives the original values bit for bit.
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.item_of(edit_id).setCheckState(ON, Qt.CheckState.Unchecked)
        assert forward_hooks(workspace) == before
    assert not workspace.registry.edit(edit_id).enabled
    np.testing.assert_array_equal(activations(workspace), original)
    assert feature.rows()[0][1] is False

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.item_of(edit_id).setCheckState(ON, Qt.CheckState.Checked)
    assert forward_hooks(workspace) == before + 1 and not activations(workspace)[0, 5].any()

    # The ✕ button: the hook goes, the list empties, the arrays are the original ones again.
    remove = feature.tree.itemWidget(feature.item_of(edit_id), REMOVE)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(remove, Qt.MouseButton.LeftButton)
    assert forward_hooks(workspace) == before
    assert workspace.registry.edits() == [] and feature.rows() == []
    np.testing.assert_array_equal(activations(workspace), original)


def test_scale_input_from_the_module_menu_doubles_a_bias_free_convolution(feature, workspace, host, qtbot) -> None:
    original = activations(workspace)
    pre_hooks = len(workspace.registry.module(PATH)._forward_pre_hooks)
    action_named(host.module_menu(PATH), "Scale input…").trigger()
    dialog = feature.dialog
    assert dialog is not None and dialog.kind == "scale-input" and dialog.path_edit.text() == PATH
    dialog.factor_box.setValue(2.0)
    assert dialog.value() == Intervention("scale-input", PATH, factor=2.0)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        dialog.accept()
    assert len(workspace.registry.module(PATH)._forward_pre_hooks) == pre_hooks + 1
    np.testing.assert_allclose(activations(workspace), 2 * original, rtol=1e-5, atol=1e-6)


def test_an_edit_the_engine_refuses_is_an_error_and_adds_nothing(feature, workspace, qtbot) -> None:
    before, handles = workspace.last, workspace.registry.handle_count()
    with no_run_asked(workspace), qtbot.waitSignal(workspace.error, timeout=5000) as blocker:
        assert feature.add_edit(Intervention("zero", PATH, channels=(99,))) is None
    assert blocker.args[0] == "layer1.0.conv1 has 64 channels; channel 99 does not exist."
    assert workspace.registry.edits() == [] and workspace.registry.handle_count() == handles
    assert feature.rows() == []
    assert workspace.last is before  # nothing re-ran


def test_the_dialog_refuses_what_describes_no_edit(workspace, host) -> None:
    dialog = EditDialog(workspace.registry.paths, host.dialog_parent(), kind="zero", path="layer9")
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert not ok.isEnabled() and "no module 'layer9'" in dialog.problem.text()
    dialog.path_edit.setText(PATH)
    dialog.channels_edit.setText("3, 5 8-9")
    assert ok.isEnabled() and dialog.value() == Intervention("zero", PATH, channels=(3, 5, 8, 9))
    assert parse_channels("2-4") == (2, 3, 4)
    dialog.channels_edit.setText("4-2")
    assert not ok.isEnabled() and "backwards" in dialog.problem.text()


def test_a_mix_edit_whose_other_image_fails_is_switched_off_and_the_run_repeats(
    feature, workspace, qtbot, tmp_path: Path
) -> None:
    original = activations(workspace)
    broken = tmp_path / "other.png"
    broken.write_bytes(b"not an image at all")
    with qtbot.waitSignal(workspace.failed, timeout=RUN_TIMEOUT_MS) as blocker:
        edit_id = feature.add_edit(Intervention("mix", PATH, factor=0.5, other_image=str(broken)))
    assert isinstance(blocker.args[0].error, ImageError)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        pass  # the run again, without the failed edit
    assert not workspace.registry.edit(edit_id).enabled
    assert edit_id in feature.failed and "other.png" in feature.failed[edit_id]
    ((_, on, description, _),) = feature.rows()
    assert on is False and description.endswith("— failed")
    assert forward_hooks(workspace) == 2  # only the ticks' capture hooks: Act, and Grad's tensor hook put there
    np.testing.assert_array_equal(activations(workspace), original)

    # Switched on again by hand, it is no longer marked failed (and fails, and is switched off, again).
    with qtbot.waitSignal(workspace.failed, timeout=RUN_TIMEOUT_MS):
        feature.item_of(edit_id).setCheckState(ON, Qt.CheckState.Checked)
        assert edit_id not in feature.failed
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        pass
    assert edit_id in feature.failed and not workspace.registry.edit(edit_id).enabled


def test_a_failure_is_routed_by_the_errors_fields_not_its_text(feature, workspace, qtbot) -> None:
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        first = feature.add_edit(Intervention("zero", PATH, channels=(1,)))
        second = feature.add_edit(Intervention("scale", "layer2", factor=0.5))
    # Errors that name no edit and are about the image or the device switch nothing off, whatever they say.
    for error in (ImageError("zero:layer1.0.conv1:1 layer2", path="/nowhere/a.png"), DeviceError("layer2")):
        workspace.failed.emit(RunFailure(str(error), error))
        assert [e.enabled for _, e, _ in workspace.registry.edits()] == [True, True] and not feature.failed
    # An error naming an edit by its field switches that one off, even though its text names the other.
    error = RunError("zero:layer1.0.conv1:1 broke", edit_spec="scale:layer2:0.5")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.failed.emit(RunFailure(str(error), error))
    assert [(i, e.enabled) for i, e, _ in workspace.registry.edits()] == [(first, True), (second, False)]
    assert set(feature.failed) == {second}
    assert len(workspace.registry.module("layer2")._forward_hooks) == 0
    # An error naming nothing is blamed on the edits switched on since the last run that came back.
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        third = feature.add_edit(Intervention("keep", PATH, channels=(0,)))
        error = RuntimeError("something inside a hook")
        workspace.failed.emit(RunFailure(str(error), error))
    assert [(i, e.enabled) for i, e, _ in workspace.registry.edits()] == [
        (first, True),
        (second, False),
        (third, False),
    ]
    assert set(feature.failed) == {second, third}
    # A failed load is no run's fault.
    error = RunError("no", edit_spec="zero:layer1.0.conv1:1")
    workspace.failed.emit(RunFailure(str(error), error, load=True))
    assert workspace.registry.edit(first).enabled


def test_remove_all_removes_every_edit_and_its_hooks(feature, workspace, qtbot) -> None:
    handles = workspace.registry.handle_count()
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.add_edit(Intervention("keep", PATH, channels=(0, 1)))
        feature.add_edit(Intervention("scale-grad", "layer4.1.conv2", factor=1.6))
    assert len(workspace.registry.module("layer4.1.conv2")._forward_hooks) == 1  # the tensor hook's carrier
    kept = activations(workspace)[0]
    assert kept[:2].any() and not kept[2:].any()
    assert feature.clear_button.isEnabled() and len(feature.rows()) == 2
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(feature.clear_button, Qt.MouseButton.LeftButton)
    assert workspace.registry.edits() == [] and feature.rows() == []
    assert workspace.registry.handle_count() == handles
    assert not workspace.registry.module("layer4.1.conv2")._forward_hooks
    assert workspace.ticked_pairs() == {(PATH, "forward"), (PATH, "tensor")}  # the ticks stay


def test_edits_and_their_failed_marks_move_with_a_device_change(feature, workspace, qtbot, monkeypatch) -> None:
    from hookscope.ui.state import workspace as workspace_module

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.add_edit(Intervention("zero", PATH, channels=(2,)))
        broken = feature.add_edit(Intervention("scale", "layer3", factor=3.0))
    error = RunError("scale:layer3:3 failed", edit_spec="scale:layer3:3")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.failed.emit(RunFailure(str(error), error))
    assert set(feature.failed) == {broken}
    monkeypatch.setattr(workspace_module, "available_devices", lambda: ["cpu", "cuda:7"])  # offered, not present
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_device("cuda:7")  # every hook is removed, then registered again: the edits under new ids
        (zero_id, zero), (scale_id, scale) = [(i, e) for i, e, _ in workspace.registry.edits()]
        assert (zero.enabled, scale.enabled) == (True, False) and scale_id != broken
        assert set(feature.failed) == {scale_id}  # the mark moved with its edit
        assert [row[1:3] for row in feature.rows()] == [
            (True, zero.describe()),
            (False, scale.describe() + " — failed"),
        ]
        # Moved is not switched on: an error that names nothing blames no edit that worked before.
        error = RuntimeError("something else")
        workspace.failed.emit(RunFailure(str(error), error))
        assert workspace.registry.edit(zero_id).enabled
    assert workspace.last.result.device == "cpu"  # the device failed; back on the CPU, with the edits (new ids)
    (zero_id, zero), (scale_id, scale) = [(i, e) for i, e, _ in workspace.registry.edits()]
    assert (zero.enabled, scale.enabled) == (True, False) and set(feature.failed) == {scale_id}
    assert not activations(workspace)[0, 2].any()
