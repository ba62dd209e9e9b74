"""Interventions in the window, offscreen: edits from the tile and module menus are real hooks on the live model,
the run follows at once, the predictions show the change, and a switch or a removal restores the values exactly.
(tests/ui/test_interventions_feature.py tests the feature without a window.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from conftest import every_picture, no_run_asked
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.interventions import Intervention
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.pictures.compare import prediction_changes
from hookscope.ui.features.interventions import ADD_ACTION, ON, REMOVE, InterventionsFeature
from hookscope.ui.main_window import MainWindow
from hookscope.ui.widgets.predictions import PredictionsPanel, change_text

RUN_TIMEOUT_MS = 120_000
PATH = "layer1.0.conv1"


def action_named(menu: QMenu, text: str):
    actions = {action.text(): action for action in menu.actions()}
    assert text in actions, f"no '{text}' in {list(actions)}"
    return actions[text]


def interventions(window: MainWindow) -> InterventionsFeature:
    return window.features["interventions"]


def predictions(window: MainWindow) -> PredictionsPanel:
    panel = window.findChild(PredictionsPanel)
    assert panel is not None
    return panel


def records(window: MainWindow) -> dict[tuple[str, str], np.ndarray]:
    return {(r.kind, r.key): r.tensor.numpy().copy() for r in window.workspace.last.result.records}


def shown(window: MainWindow, qtbot) -> dict[tuple[str, str], np.ndarray]:
    return {ident: picture.channels.data.copy() for ident, picture in every_picture(window, qtbot).items()}


def forward_hooks(window: MainWindow, path: str = PATH) -> int:
    return len(window.workspace.loaded.module.get_submodule(path)._forward_hooks)


def assert_same(before: dict, after: dict) -> None:
    assert set(before) == set(after)
    for key, array in before.items():
        assert np.array_equal(array, after[key]), f"{key} differs"


def test_switching_off_a_channel_from_the_tile_menu_then_switching_and_removing_it(window: MainWindow, qtbot) -> None:
    original_records, original_shown = records(window), shown(window, qtbot)
    original_scores = window.workspace.last.result.scores.clone()
    before = forward_hooks(window)
    panel = window.panel_area.panels[("forward", PATH)]

    menu = QMenu(window)
    interventions(window).tile_entries(menu, panel.picture, 5)
    assert {"Switch off channel 5", "Keep only channel 5", "Scale channel 5…"} <= {a.text() for a in menu.actions()}
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        action_named(menu, "Switch off channel 5").trigger()
        assert forward_hooks(window) == before + 1  # on the live module at once, before any run
    ((edit_id, edit, info),) = window.workspace.registry.edits()
    assert edit == Intervention("zero", PATH, channels=(5,)) and info.reads_or_edits == "edits"

    # The re-run's capture of the module sees the edited output: channel 5 exactly zero, the others untouched.
    result = window.workspace.last.result
    captured = next(r for r in result.records if (r.kind, r.key) == ("forward", PATH)).tensor[0].numpy()
    assert not captured[5].any()
    np.testing.assert_array_equal(
        np.delete(captured, 5, axis=0), np.delete(original_records[("forward", PATH)][0], 5, 0)
    )
    assert not panel.picture.channels.data[5].any()
    assert not np.array_equal(
        records(window)[("forward", "layer4.1.conv2")], original_records[("forward", "layer4.1.conv2")]
    )  # downstream panels follow

    # The predictions: the run without edits is the original run; each top-5 row shows its change.
    assert torch.equal(result.baseline_scores, original_scores)
    expected = prediction_changes(result)
    assert predictions(window).changes == expected and len(expected) == 5
    for row, change in zip(predictions(window).rows, expected):
        assert row.index == change.index
        assert row.change.isVisibleTo(predictions(window)) and row.change.text() == change_text(change.delta)
    assert interventions(window).rows() == [(edit_id, True, edit.describe(), "zero:layer1.0.conv1:5")]

    # Switching it off removes the handle (not just ignores it); the run gives the original values bit for bit.
    item = interventions(window).item_of(edit_id)
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        item.setCheckState(ON, Qt.CheckState.Unchecked)
        assert forward_hooks(window) == before
    assert not window.workspace.registry.edit(edit_id).enabled
    assert_same(original_records, records(window))
    assert window.workspace.last.result.baseline_scores is None
    assert not any(row.change.isVisibleTo(predictions(window)) for row in predictions(window).rows)

    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        interventions(window).item_of(edit_id).setCheckState(ON, Qt.CheckState.Checked)
    assert forward_hooks(window) == before + 1
    assert not window.workspace.last.result.records[0].tensor[0, 5].any()

    # The remove button: the hook goes, the list empties, the arrays are the original ones again.
    remove = interventions(window).tree.itemWidget(interventions(window).item_of(edit_id), REMOVE)
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(remove, Qt.MouseButton.LeftButton)
    assert forward_hooks(window) == before
    assert window.workspace.registry.edits() == [] and interventions(window).rows() == []
    assert_same(original_records, records(window))
    assert_same(original_shown, shown(window, qtbot))


def test_removing_one_edit_removes_its_hook_and_nothing_else(window: MainWindow, qtbot) -> None:
    module = window.workspace.loaded.module
    counts = {
        path: (len(module.get_submodule(path)._forward_hooks), len(module.get_submodule(path)._backward_hooks))
        for path in (PATH, "layer4.1.conv2")
    }
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        keep_id = interventions(window).add_edit(Intervention("keep", PATH, channels=(0, 1)))
        grad_id = interventions(window).add_edit(Intervention("scale-grad", "layer4.1.conv2", factor=1.6))
    assert len(module.get_submodule("layer4.1.conv2")._forward_hooks) == counts["layer4.1.conv2"][0] + 1
    handles = window.workspace.registry.handle_count()
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        interventions(window).remove_edit(grad_id)
    assert window.workspace.registry.handle_count() == handles - 1
    assert len(module.get_submodule("layer4.1.conv2")._forward_hooks) == counts["layer4.1.conv2"][0]
    assert len(module.get_submodule(PATH)._forward_hooks) == counts[PATH][0] + 1  # the other edit stays
    assert [edit_id for edit_id, _, _ in window.workspace.registry.edits()] == [keep_id]
    assert window.workspace.ticked_pairs() == {
        (PATH, "forward"),
        (PATH, "tensor"),
        ("layer4.1.conv2", "forward"),
        ("layer4.1.conv2", "tensor"),
    }
    kept = window.panel_area.panels[("forward", PATH)].picture.channels.data
    assert kept[:2].any() and not kept[2:].any()


def test_module_menu_scale_input_doubles_a_bias_free_convolution(window: MainWindow, qtbot) -> None:
    path = "layer4.1.conv2"  # a convolution without bias: twice the input gives twice the output
    original = records(window)[("forward", path)]
    menu = QMenu(window)
    interventions(window).module_entries(menu, path)
    assert [a.text() for a in menu.actions() if not a.isSeparator()] == [
        "Switch off channels…",
        "Scale output…",
        "Scale input…",
        "Scale gradient (tensor hook)…",
        "Scale grad_input (full backward hook)…",
        "Mix with another image…",
    ]
    window.features["grad_cam"].module_entries(menu, path)
    assert f"Grad-CAM of {path}" in [a.text() for a in menu.actions()]
    pre_hooks = len(window.workspace.loaded.module.get_submodule(path)._forward_pre_hooks)
    action_named(menu, "Scale input…").trigger()
    dialog = interventions(window).dialog
    assert dialog is not None and dialog.kind == "scale-input" and dialog.path_edit.text() == path
    dialog.factor_box.setValue(2.0)
    assert dialog.value() == Intervention("scale-input", path, factor=2.0)
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        dialog.accept()
    assert len(window.workspace.loaded.module.get_submodule(path)._forward_pre_hooks) == pre_hooks + 1
    np.testing.assert_allclose(records(window)[("forward", path)], 2 * original, rtol=1e-5, atol=1e-6)


def test_the_hooks_menu_opens_the_add_dialog_and_the_dock_sits_in_the_window(window: MainWindow) -> None:
    feature = interventions(window)
    assert feature.dock.parent() is window and feature.dock.objectName() == "interventions"
    window.menus.actions[ADD_ACTION].trigger()
    assert feature.dialog is not None and feature.dialog.isVisible() and feature.dialog.kind == "zero"
    feature.dialog.reject()


def test_edits_the_engine_refuses_are_errors_and_add_nothing(window: MainWindow, qtbot) -> None:
    before = window.workspace.last
    bn1 = window.workspace.loaded.module.get_submodule("layer2.0.bn1")
    handles = window.workspace.registry.handle_count()
    menu = QMenu(window)
    interventions(window).module_entries(menu, "layer2.0.bn1")
    action_named(menu, "Scale grad_input (full backward hook)…").trigger()
    dialog = interventions(window).dialog
    assert dialog.kind == "scale-grad-input"
    with no_run_asked(window.workspace), qtbot.waitSignal(window.workspace.error, timeout=RUN_TIMEOUT_MS) as blocker:
        dialog.accept()
    assert "scale-grad-input cannot work on layer2.0.bn1" in blocker.args[0]
    assert "scale-grad:layer2.0.bn1" in blocker.args[0]  # and what to use instead
    assert not bn1._backward_hooks and window.workspace.registry.handle_count() == handles

    with no_run_asked(window.workspace), qtbot.waitSignal(window.workspace.error, timeout=RUN_TIMEOUT_MS) as blocker:
        assert interventions(window).add_edit(Intervention("zero", PATH, channels=(99,))) is None
    assert blocker.args[0] == "layer1.0.conv1 has 64 channels; channel 99 does not exist."
    assert window.workspace.registry.edits() == [] and window.workspace.registry.handle_count() == handles
    assert window.workspace.last is before  # nothing re-ran, the results on screen stay


def test_an_edit_that_fails_in_the_run_is_switched_off_and_the_run_repeats_without_it(
    window: MainWindow, qtbot, tmp_path: Path
) -> None:
    original = records(window)
    broken = tmp_path / "other.png"
    broken.write_bytes(b"not an image at all")
    with qtbot.waitSignal(window.workspace.error, timeout=RUN_TIMEOUT_MS) as blocker:
        edit_id = interventions(window).add_edit(Intervention("mix", PATH, factor=0.5, other_image=str(broken)))
    assert "other.png" in blocker.args[0]
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        pass  # the run again, without the failed edit
    assert not window.workspace.registry.edit(edit_id).enabled
    assert edit_id in interventions(window).failed
    (row,) = interventions(window).rows()
    assert row[1] is False and row[2].endswith("— failed")
    assert forward_hooks(window) == 2  # only the ticks' capture hooks: Act, and Grad's tensor hook put there
    assert_same(original, records(window))


def test_mix_blends_with_the_same_modules_output_on_the_other_image(window: MainWindow, qtbot, photos) -> None:
    path = "layer4.1.conv2"
    a = records(window)[("forward", path)]
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        interventions(window).add_edit(Intervention("mix", path, factor=0.25, other_image=str(photos[0])))
    loaded = load_model("resnet18", "none", seed=0)  # the same untrained weights as the window's
    with HookRegistry(loaded.module) as registry:
        registry.add(path, "forward")
        other = capture_run(loaded.module, registry, loaded.preprocess.to_tensor(read_image(photos[0])))
    b = next(r for r in other.records if r.key == path and r.kind == "forward").tensor.numpy()
    np.testing.assert_allclose(records(window)[("forward", path)], 0.25 * a + 0.75 * b, rtol=1e-5, atol=1e-5)


def test_edits_move_with_the_ticks_when_the_device_changes(window: MainWindow, qtbot, monkeypatch) -> None:
    from hookscope.ui.state import workspace as workspace_module

    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        interventions(window).add_edit(Intervention("zero", PATH, channels=(2,)))
        off = interventions(window).add_edit(Intervention("scale", "layer3", factor=3.0))
        interventions(window).set_enabled(off, False)
    monkeypatch.setattr(workspace_module, "available_devices", lambda: ["cpu", "cuda:7"])  # offered, not present
    window.workspace.set_device("cuda:7")  # every hook is removed, then registered again: the edits too
    assert [(e.spec, e.enabled) for _, e, _ in window.workspace.registry.edits()] == [
        ("zero:layer1.0.conv1:2", True),
        ("scale:layer3:3", False),
    ]
    assert forward_hooks(window) == 3 and not window.workspace.loaded.module.get_submodule("layer3")._forward_hooks
    assert [row[1:] for row in interventions(window).rows()] == [
        (True, "Switch off channel 2 of layer1.0.conv1's output", "zero:layer1.0.conv1:2"),
        (False, "Scale layer3's output by 3", "scale:layer3:3"),
    ]
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        pass  # the device failed; back on the CPU, with the edits
    assert window.workspace.last.result.device == "cpu"
    assert [e.enabled for _, e, _ in window.workspace.registry.edits()] == [True, False]
    assert not window.panel_area.panels[("forward", PATH)].picture.channels.data[2].any()
