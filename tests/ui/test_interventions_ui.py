"""Interventions in the window, offscreen: edits from the tile and module menus are real hooks on the live model,
the run follows at once, the predictions show the change, and a switch or a removal restores the values exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu

from app.core.capture import capture_run
from app.core.compare import prediction_changes
from app.core.hooks import HookRegistry
from app.core.images import read_image
from app.core.interventions import Intervention
from app.core.models import load_model
from app.ui.features.interventions import ON, REMOVE
from app.ui.main_window import MainWindow
from app.ui.widgets.predictions import change_text

RUN_TIMEOUT_MS = 120_000
PATH = "layer1.0.conv1"


def action_named(menu: QMenu, text: str):
    actions = {action.text(): action for action in menu.actions()}
    assert text in actions, f"no '{text}' in {list(actions)}"
    return actions[text]


def records(window: MainWindow) -> dict[tuple[str, str], np.ndarray]:
    return {(r.kind, r.key): r.tensor.numpy().copy() for r in window.last_outcome.result.records}


def shown(window: MainWindow) -> dict[tuple[str, str], np.ndarray]:
    return {ident: panel.picture.channels.data.copy() for ident, panel in window.panel_area.panels.items()}


def forward_hooks(window: MainWindow, path: str = PATH) -> int:
    return len(window.loaded.module.get_submodule(path)._forward_hooks)


def assert_same(before: dict, after: dict) -> None:
    assert set(before) == set(after)
    for key, array in before.items():
        assert np.array_equal(array, after[key]), f"{key} differs"


def test_switching_off_a_channel_from_the_tile_menu_then_switching_and_removing_it(window: MainWindow, qtbot) -> None:
    original_records, original_shown = records(window), shown(window)
    original_scores = window.last_outcome.result.scores.clone()
    before = forward_hooks(window)
    panel = window.panel_area.panels[("forward", PATH)]

    menu = window.interventions.tile_menu(panel.picture, 5)
    assert {"Switch off channel 5", "Keep only channel 5", "Scale channel 5…"} <= {a.text() for a in menu.actions()}
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        action_named(menu, "Switch off channel 5").trigger()
        assert forward_hooks(window) == before + 1  # on the live module at once, before any run
    ((edit_id, edit, info),) = window.registry.edits()
    assert edit == Intervention("zero", PATH, channels=(5,)) and info.reads_or_edits == "edits"

    # The re-run's capture of the module sees the edited output: channel 5 exactly zero, the others untouched.
    result = window.last_outcome.result
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
    assert window.predictions.changes == expected and len(expected) == 5
    for row, change in zip(window.predictions.rows, expected):
        assert row.index == change.index
        assert row.change.isVisibleTo(window.predictions) and row.change.text() == change_text(change.delta)
    assert window.interventions.rows() == [(edit_id, True, edit.describe(), "zero:layer1.0.conv1:5")]

    # Switching it off removes the handle (not just ignores it); the run gives the original values bit for bit.
    item = window.interventions.item_of(edit_id)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        item.setCheckState(ON, Qt.CheckState.Unchecked)
        assert forward_hooks(window) == before
    assert not window.registry.edit(edit_id).enabled
    assert_same(original_records, records(window))
    assert window.last_outcome.result.baseline_scores is None
    assert not any(row.change.isVisibleTo(window.predictions) for row in window.predictions.rows)

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.interventions.item_of(edit_id).setCheckState(ON, Qt.CheckState.Checked)
    assert forward_hooks(window) == before + 1
    assert not window.last_outcome.result.records[0].tensor[0, 5].any()

    # The remove button: the hook goes, the list empties, the arrays are the original ones again.
    remove = window.interventions.tree.itemWidget(window.interventions.item_of(edit_id), REMOVE)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(remove, Qt.MouseButton.LeftButton)
    assert forward_hooks(window) == before
    assert window.registry.edits() == [] and window.interventions.rows() == []
    assert_same(original_records, records(window))
    assert_same(original_shown, shown(window))


def test_removing_one_edit_removes_its_hook_and_nothing_else(window: MainWindow, qtbot) -> None:
    module = window.loaded.module
    counts = {
        path: (len(module.get_submodule(path)._forward_hooks), len(module.get_submodule(path)._backward_hooks))
        for path in (PATH, "layer4.1.conv2")
    }
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        keep_id = window.interventions.add_edit(Intervention("keep", PATH, channels=(0, 1)))
        grad_id = window.interventions.add_edit(Intervention("scale-grad", "layer4.1.conv2", factor=1.6))
    assert len(module.get_submodule("layer4.1.conv2")._forward_hooks) == counts["layer4.1.conv2"][0] + 1
    handles = window.registry.handle_count()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.interventions.remove_edit(grad_id)
    assert window.registry.handle_count() == handles - 1
    assert len(module.get_submodule("layer4.1.conv2")._forward_hooks) == counts["layer4.1.conv2"][0]
    assert len(module.get_submodule(PATH)._forward_hooks) == counts[PATH][0] + 1  # the other edit stays
    assert [edit_id for edit_id, _, _ in window.registry.edits()] == [keep_id]
    assert window.ticked_pairs() == {
        (PATH, "forward"),
        (PATH, "backward"),
        ("layer4.1.conv2", "forward"),
        ("layer4.1.conv2", "backward"),
    }
    kept = window.panel_area.panels[("forward", PATH)].picture.channels.data
    assert kept[:2].any() and not kept[2:].any()


def test_module_menu_scale_input_doubles_a_bias_free_convolution(window: MainWindow, qtbot) -> None:
    path = "layer4.1.conv2"  # a convolution without bias: twice the input gives twice the output
    original = records(window)[("forward", path)]
    menu = QMenu()
    actions = window.interventions.add_module_actions(menu, path)
    assert [a.text() for a in actions] == [
        "Switch off channels…",
        "Scale output…",
        "Scale input…",
        "Scale gradient (tensor hook)…",
        "Scale grad_input (full backward hook)…",
        "Mix with another image…",
    ]
    assert f"Grad-CAM of {path}" in [a.text() for a in menu.actions()]
    pre_hooks = len(window.loaded.module.get_submodule(path)._forward_pre_hooks)
    action_named(menu, "Scale input…").trigger()
    dialog = window.interventions.dialog
    assert dialog is not None and dialog.kind == "scale-input" and dialog.path_edit.text() == path
    dialog.factor_box.setValue(2.0)
    assert dialog.value() == Intervention("scale-input", path, factor=2.0)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        dialog.accept()
    assert len(window.loaded.module.get_submodule(path)._forward_pre_hooks) == pre_hooks + 1
    np.testing.assert_allclose(records(window)[("forward", path)], 2 * original, rtol=1e-5, atol=1e-6)


def test_edits_the_engine_refuses_are_errors_and_add_nothing(window: MainWindow, qtbot) -> None:
    before = window.last_outcome
    bn1 = window.loaded.module.get_submodule("layer2.0.bn1")
    handles = window.registry.handle_count()
    menu = QMenu()
    window.interventions.add_module_actions(menu, "layer2.0.bn1")
    action_named(menu, "Scale grad_input (full backward hook)…").trigger()
    dialog = window.interventions.dialog
    assert dialog.kind == "scale-grad-input"
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        dialog.accept()
    assert "scale-grad-input cannot work on layer2.0.bn1" in window.last_error
    assert "scale-grad:layer2.0.bn1" in window.last_error  # and what to use instead
    assert not bn1._backward_hooks and window.registry.handle_count() == handles

    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        assert window.interventions.add_edit(Intervention("zero", PATH, channels=(99,))) is None
    assert window.last_error == "layer1.0.conv1 has 64 channels; channel 99 does not exist."
    assert window.registry.edits() == [] and window.registry.handle_count() == handles
    qtbot.wait(200)
    assert window.last_outcome is before  # nothing re-ran, the results on screen stay


def test_an_edit_that_fails_in_the_run_is_switched_off_and_the_run_repeats_without_it(
    window: MainWindow, qtbot, tmp_path: Path
) -> None:
    original = records(window)
    broken = tmp_path / "other.png"
    broken.write_bytes(b"not an image at all")
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        edit_id = window.interventions.add_edit(Intervention("mix", PATH, factor=0.5, other_image=str(broken)))
    assert "other.png" in window.last_error
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass  # the run again, without the failed edit
    assert not window.registry.edit(edit_id).enabled
    assert edit_id in window.interventions.failed
    (row,) = window.interventions.rows()
    assert row[1] is False and row[2].endswith("— failed")
    assert forward_hooks(window) == 1  # only the tick's capture hook
    assert_same(original, records(window))


def test_mix_blends_with_the_same_modules_output_on_the_other_image(window: MainWindow, qtbot, photos) -> None:
    path = "layer4.1.conv2"
    a = records(window)[("forward", path)]
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.interventions.add_edit(Intervention("mix", path, factor=0.25, other_image=str(photos[0])))
    loaded = load_model("resnet18", "none", seed=0)  # the same untrained weights as the window's
    with HookRegistry(loaded.module) as registry:
        registry.add(path, "forward")
        other = capture_run(loaded.module, registry, loaded.preprocess.to_tensor(read_image(photos[0])))
    b = next(r for r in other.records if r.key == path and r.kind == "forward").tensor.numpy()
    np.testing.assert_allclose(records(window)[("forward", path)], 0.25 * a + 0.75 * b, rtol=1e-5, atol=1e-5)


def test_edits_move_with_the_ticks_when_the_device_changes(window: MainWindow, qtbot, monkeypatch) -> None:
    from app.ui import main_window

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.interventions.add_edit(Intervention("zero", PATH, channels=(2,)))
        off = window.interventions.add_edit(Intervention("scale", "layer3", factor=3.0))
        window.interventions.set_enabled(off, False)
    monkeypatch.setattr(main_window, "available_devices", lambda: ["cpu", "cuda:7"])  # offered, not present
    window.set_device("cuda:7")  # every hook is removed, then registered again: the edits too
    assert [(e.spec, e.enabled) for _, e, _ in window.registry.edits()] == [
        ("zero:layer1.0.conv1:2", True),
        ("scale:layer3:3", False),
    ]
    assert forward_hooks(window) == 2 and not window.loaded.module.get_submodule("layer3")._forward_hooks
    assert [row[1:] for row in window.interventions.rows()] == [
        (True, "Switch off channel 2 of layer1.0.conv1's output", "zero:layer1.0.conv1:2"),
        (False, "Scale layer3's output by 3", "scale:layer3:3"),
    ]
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass  # the device failed; back on the CPU, with the edits
    assert window.last_outcome.result.device == "cpu"
    assert [e.enabled for _, e, _ in window.registry.edits()] == [True, False]
    assert not window.panel_area.panels[("forward", PATH)].picture.channels.data[2].any()
