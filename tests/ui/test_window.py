"""The window end to end, offscreen: real drops, real ticks on the live model, superseded runs, bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shown_picture
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from hookscope.core.common.resources import sample_image
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import FALLBACK, GRADIENT_KINDS, TENSOR, HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.ui.main_window import MainWindow
from hookscope.ui.state import scheduler
from hookscope.ui.state import workspace as workspace_module
from hookscope.ui.state.rendering import fitted_size
from hookscope.ui.state.requests import execute_run
from hookscope.ui.state.worker import active_threads
from hookscope.ui.widgets.module_tree import ACTIVATIONS, GRAD_INPUTS, GRADIENTS, INPUTS, SHAPE
from hookscope.ui.widgets.panel_area import PANELS_PER_TURN

RUN_TIMEOUT_MS = 120_000

DEFAULT_PAIRS = {
    ("layer1.0.conv1", "forward"),
    ("layer1.0.conv1", "tensor"),
    ("layer4.1.conv2", "forward"),
    ("layer4.1.conv2", "tensor"),
}


def drop_files(window: MainWindow, paths: list[Path]) -> QDropEvent:
    """A real drag-enter and drop of file URLs, as a file manager sends them."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(
        QPoint(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted(), "the window refused a drag of image files"
    drop = QDropEvent(
        QPointF(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window, drop)
    return drop


def direct_records(window: MainWindow, image: Path | str, pairs: set[tuple[str, str]]) -> dict:
    """The same run done directly with the engine on an identical (same seed) model: the reference arrays."""
    loaded = load_model(window.workspace.loaded.name, "none", seed=0)
    with HookRegistry(loaded.module) as registry:
        for path, kind in sorted(pairs):
            registry.add(path, kind)
        result = capture_run(loaded.module, registry, loaded.preprocess.to_tensor(read_image(image)))
    return {(r.kind, r.key): r.tensor[0].numpy() for r in result.records}


def shown_arrays(window: MainWindow) -> dict:
    return {
        ident: panel.picture.channels.data
        for ident, panel in window.panel_area.panels.items()
        if panel.picture is not None
    }


def assert_panels_match(window: MainWindow, reference: dict) -> None:
    shown = shown_arrays(window)
    assert set(shown) == set(reference)
    for (kind, key), expected in reference.items():
        if kind in GRADIENT_KINDS:
            expected = np.abs(expected)
        np.testing.assert_allclose(shown[(kind, key)], expected, rtol=1e-4, atol=1e-6, err_msg=f"{kind} {key}")


def hook_count(window: MainWindow, path: str, attribute: str) -> int:
    return len(getattr(window.workspace.loaded.module.get_submodule(path), attribute))


# ---- first start ----------------------------------------------------------------------------------------------


def test_first_start_shows_the_default_layers_filled(window: MainWindow) -> None:
    assert window.workspace.loaded.name == "resnet18"
    assert window.workspace.ticked_pairs() == DEFAULT_PAIRS
    assert window.workspace.last.image.path == str(sample_image())
    panels = window.panel_area.panels
    assert set(panels) == {(kind, path) for path, kind in DEFAULT_PAIRS}
    assert panels[("forward", "layer1.0.conv1")].picture.channels.data.shape == (64, 56, 56)
    assert panels[("tensor", "layer4.1.conv2")].picture.channels.data.shape == (512, 7, 7)
    for panel in panels.values():
        mosaic = panel.picture.arrangement.image
        assert mosaic.dtype == np.uint8 and mosaic.ndim == 2 and mosaic.any()
    assert len(window.workspace.last.result.top5) == 5
    assert [row.index for row in window.predictions.rows] == [p.index for p in window.workspace.last.result.top5]
    assert window.last_timings["forward_ms"] > 0 and window.last_timings["backward_ms"] > 0
    assert "forward" in window.timing_label.text() and "render" in window.timing_label.text()


# ---- images ---------------------------------------------------------------------------------------------------


def test_dropping_files_loads_the_first_and_fills_the_panels(window: MainWindow, qtbot, photos) -> None:
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        drop = drop_files(window, photos)
    assert drop.isAccepted()
    assert window.workspace.last.image.path == str(photos[0])
    assert list(window.workspace.image_list) == [str(p) for p in photos]
    loaded = window.workspace.loaded
    expected_input = loaded.preprocess.to_display(loaded.preprocess.to_tensor(read_image(photos[0])))
    np.testing.assert_array_equal(window.workspace.last.input_display, expected_input)
    np.testing.assert_array_equal(window.input_panel.image_item.image, expected_input)
    assert_panels_match(window, direct_records(window, photos[0], DEFAULT_PAIRS))
    # the worker coloured each mosaic for the panels' size; the GUI thread painted that, coloured nothing itself
    fit = window.panel_area.view_size()
    assert fit is not None
    for panel in window.panel_area.panels.values():
        rendered = panel.picture.rendered
        assert panel._mosaic.rendered is rendered and rendered.arrangement is panel.picture.arrangement
        height, width = panel.picture.arrangement.size
        shown = fitted_size(width, height, fit)
        assert (rendered.qimage.width(), rendered.qimage.height()) == shown  # the size shown: painted as it is
        assert rendered.is_full == (shown == (width, height))

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.step_image(1)
    assert window.workspace.last.image.path == str(photos[1])
    assert_panels_match(window, direct_records(window, photos[1], DEFAULT_PAIRS))


def test_a_broken_file_leaves_the_previous_results_in_place(window: MainWindow, qtbot, tmp_path: Path) -> None:
    before_outcome = window.workspace.last
    before_pictures = {ident: panel.picture for ident, panel in window.panel_area.panels.items()}
    applied = window.workspace.applied_generations
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)

    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS) as shown:
        drop_files(window, [broken])
    assert "broken.png" in window.last_error
    assert shown.args == [window.last_error]
    assert "broken.png" in window.statusBar().currentMessage()
    assert window.workspace.last is before_outcome
    assert window.workspace.applied_generations == applied
    assert {ident: panel.picture for ident, panel in window.panel_area.panels.items()} == before_pictures

    # The next run (here: a new tick) goes back to the image whose results are on screen.
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tree_view.click_tick("layer2.0.conv1", "forward")
    assert window.workspace.last.image.path == str(sample_image())


def test_a_dropped_folder_says_so(window: MainWindow, qtbot, tmp_path: Path) -> None:
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        drop_files(window, [tmp_path])
    assert "folder" in window.last_error and tmp_path.name in window.last_error


@pytest.mark.parametrize("runs_to_the_end", [False, True], ids=["cancelled-in-flight", "finished-but-stale"])
def test_a_superseded_run_never_reaches_the_panels(
    window: MainWindow, qtbot, photos, monkeypatch, runs_to_the_end: bool
) -> None:
    if runs_to_the_end:  # a run too far along to stop: its outcome does arrive, and must be dropped
        monkeypatch.setattr(scheduler, "execute_run", lambda request, cancelled: execute_run(request, lambda: False))
    returned: list[int] = []
    window.workspace.scheduler.runner.returned.connect(lambda job, outcome: returned.append(outcome.generation))
    finished: list[int] = []
    window.run_finished.connect(lambda: finished.append(window.workspace.applied_generations[-1]))
    window.open_files([str(photos[0])])
    qtbot.waitUntil(
        lambda: (
            window.workspace.scheduler.runner.running_job is not None
            and window.workspace.scheduler.runner.running_job.label == "run"
        ),
        timeout=RUN_TIMEOUT_MS,
    )
    first_generation = window.workspace.scheduler.runner.running_job.generation
    window.open_files([str(photos[1])])  # while the first run is in flight
    assert window.workspace.generation > first_generation
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    # The runner runs one job at a time: whatever the first run delivers came before the second started; and the
    # run on screen is the newest asked for (no other is on its way).
    assert window.workspace.applied_generations[-1] == window.workspace.generation
    assert first_generation not in window.workspace.applied_generations
    assert finished == [window.workspace.generation]
    if runs_to_the_end:
        assert first_generation in returned  # it did come back, and was dropped
    assert window.workspace.last.image.path == str(photos[1])
    assert_panels_match(window, direct_records(window, photos[1], DEFAULT_PAIRS))


# ---- ticks on the live model ----------------------------------------------------------------------------------


def test_ticking_and_unticking_adds_and_removes_the_hook_on_the_module(window: MainWindow, qtbot) -> None:
    path = "layer2.0.conv1"
    model = window.tree_model
    forward_before = hook_count(window, path, "_forward_hooks")
    backward_before = hook_count(window, path, "_backward_hooks")
    pre_before = hook_count(window, path, "_forward_pre_hooks")

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        assert model.setData(model.index_of(path, ACTIVATIONS), Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole)
        assert hook_count(window, path, "_forward_hooks") == forward_before + 1  # at once, before any run
        model.setData(model.index_of(path, GRADIENTS), Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole)
        assert hook_count(window, path, "_forward_hooks") == forward_before + 2  # Grad: a tensor hook, put there
        model.setData(model.index_of(path, GRAD_INPUTS), Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole)
        assert hook_count(window, path, "_backward_hooks") == backward_before + 1  # Grad in: a full backward hook
        model.setData(model.index_of(path, INPUTS), Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole)
        assert hook_count(window, path, "_forward_pre_hooks") == pre_before + 1
    panels = window.panel_area.panels
    assert shown_picture(window, panels[("forward", path)], qtbot).shape == (1, 128, 28, 28)
    assert shown_picture(window, panels[("tensor", path)], qtbot).shape == (1, 128, 28, 28)
    assert shown_picture(window, panels[("grad_input", path)], qtbot).shape == (1, 64, 56, 56)
    assert shown_picture(window, panels[("pre", path)], qtbot).shape == (1, 64, 56, 56)
    assert model.data(model.index_of(path, ACTIVATIONS), Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    assert model.data(model.index_of(path, SHAPE)) == "1×128×28×28"

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        for column in (ACTIVATIONS, GRADIENTS, GRAD_INPUTS, INPUTS):
            model.setData(model.index_of(path, column), Qt.CheckState.Unchecked, Qt.ItemDataRole.CheckStateRole)
        assert hook_count(window, path, "_forward_hooks") == forward_before
        assert hook_count(window, path, "_backward_hooks") == backward_before
        assert hook_count(window, path, "_forward_pre_hooks") == pre_before
        assert not window.panel_area.panels_of(path, "forward")  # the panel goes with the tick
    assert not any(panel.path == path for panel in window.panel_area.panels.values())
    assert window.workspace.ticked_pairs() == DEFAULT_PAIRS


def test_gradients_of_a_module_before_an_inplace_relu(window: MainWindow, qtbot) -> None:
    """Grad is a tensor hook on the output, which an in-place op after the module cannot break; Grad in falls back to
    a tensor hook on the input (a full backward hook would raise), and the tree's tooltip says so."""
    path = "layer2.0.bn1"  # followed by ReLU(inplace=True): a full backward hook would raise
    forward_before = hook_count(window, path, "_forward_hooks")
    pre_before = hook_count(window, path, "_forward_pre_hooks")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tree_view.click_tick(path, "tensor")
        window.tree_view.click_tick(path, "grad_input")
    assert hook_count(window, path, "_backward_hooks") == 0
    assert hook_count(window, path, "_forward_hooks") == forward_before + 1
    assert hook_count(window, path, "_forward_pre_hooks") == pre_before + 1
    model = window.tree_model
    tip = model.data(model.index_of(path, GRADIENTS), Qt.ItemDataRole.ToolTipRole)
    assert f"hook: {TENSOR}" in tip and FALLBACK not in tip
    tip = model.data(model.index_of(path, GRAD_INPUTS), Qt.ItemDataRole.ToolTipRole)
    assert FALLBACK in tip and "in-place" in tip
    assert window.panel_area.panels[("tensor", path)].picture.shape == (1, 128, 28, 28)
    assert window.panel_area.panels[("grad_input", path)].picture.shape == (1, 128, 28, 28)


def test_closing_a_panel_unticks_its_hook(window: MainWindow, qtbot) -> None:
    panel = window.panel_area.panels[("forward", "layer4.1.conv2")]
    before = hook_count(window, "layer4.1.conv2", "_forward_hooks")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        panel.close_requested.emit("layer4.1.conv2", "forward")
    assert hook_count(window, "layer4.1.conv2", "_forward_hooks") == before - 1
    assert ("forward", "layer4.1.conv2") not in window.panel_area.panels


def test_ticking_many_modules_builds_their_panels_a_few_per_turn(window: MainWindow, qtbot) -> None:
    convs = [p for p in window.tree_model.paths_of_type("Conv2d") if ("forward", p) not in window.panel_area.panels]
    assert len(convs) > 2 * PANELS_PER_TURN
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tree_model.set_ticked([(p, "forward") for p in convs], True)
        # the hooks are on at once; the panels come a few per turn of the event loop, so the window answers
        assert all(window.workspace.registry.has(p, "forward") for p in convs)
        built = [p for p in convs if ("forward", p) in window.panel_area.panels]
        assert built == convs[:PANELS_PER_TURN]
        qtbot.waitUntil(lambda: all(("forward", p) in window.panel_area.panels for p in convs), timeout=5_000)
    for path in convs:
        assert shown_picture(window, window.panel_area.panels[("forward", path)], qtbot) is not None
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):  # unticked before being built: no panel
        window.tree_model.set_ticked([(p, "tensor") for p in convs], True)
        window.tree_model.set_ticked([(p, "tensor") for p in convs[-3:]], False)
    assert all(("tensor", p) not in window.panel_area.panels for p in convs[-3:])
    assert all(shown_picture(window, window.panel_area.panels[("tensor", p)], qtbot) is not None for p in convs[:-3])


def test_tick_every_module_of_a_type_in_one_run(window: MainWindow, qtbot) -> None:
    convs = window.tree_model.paths_of_type("Conv2d")
    finished: list[int] = []
    window.run_finished.connect(lambda: finished.append(1))
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tree_model.set_ticked([(p, "forward") for p in convs], True)
        asked = window.workspace.generation
    # one run asked for, and it is the one on screen: no other is on its way
    assert window.workspace.applied_generations[-1] == asked == window.workspace.generation
    assert len(finished) == 1
    for path in convs:
        assert window.workspace.registry.has(path, "forward")
        assert shown_picture(window, window.panel_area.panels[("forward", path)], qtbot) is not None


def test_filter_keeps_matches_and_their_ancestors(window: MainWindow) -> None:
    window.tree_view.filter_box.setText("downsample")
    proxy = window.tree_view.proxy
    visible: list[str] = []

    def walk(parent) -> None:
        for row in range(proxy.rowCount(parent)):
            index = proxy.index(row, 0, parent)
            visible.append(window.tree_model.node(proxy.mapToSource(index)).path)
            walk(index)

    walk(proxy.index(-1, -1))
    assert "layer2.0.downsample" in visible and "layer2.0.downsample.0" in visible
    assert "layer2" in visible and "layer1.0.conv1" not in visible


# ---- predictions, channel view, models ------------------------------------------------------------------------


def test_clicking_a_class_makes_it_the_gradient_target(window: MainWindow, qtbot) -> None:
    row = window.predictions.rows[3]
    chosen = row.index
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(row, Qt.MouseButton.LeftButton)
    assert window.workspace.last.result.target_index == chosen
    assert f"class {chosen}" in window.predictions.target_label.text()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(window.predictions.top1_button, Qt.MouseButton.LeftButton)
    assert window.workspace.last.result.target_index == window.workspace.last.result.top5[0].index


def test_clicking_a_tile_opens_the_channel_view(window: MainWindow, qtbot) -> None:
    panel = window.panel_area.panels[("forward", "layer1.0.conv1")]
    layout = panel.picture.arrangement.layout
    x, y = layout.tile_origin(5)
    row, col = 10, 20  # a pixel of channel 5, hit in its middle
    scene = panel._viewbox.mapViewToScene(QPointF(x + col + 0.5, y + row + 0.5))
    channel, value = panel.channel_at(scene)
    assert channel == 5
    assert value == pytest.approx(float(panel.picture.channels.data[5, row, col]))
    viewport_pos = panel._view.mapFromScene(scene)
    qtbot.mouseClick(panel._view.viewport(), Qt.MouseButton.LeftButton, pos=viewport_pos)
    assert window.dock("channel").isVisible()
    view = window.channel_view
    assert view.channel == 5
    np.testing.assert_array_equal(view.map_item.image, panel.picture.channels.data[5])
    assert view.input_item.image.shape == (224, 224, 3)
    view.opacity.setValue(20)
    assert view.overlay_item.opacity() == pytest.approx(0.2)


def test_switching_model_moves_the_ticks_and_leaves_no_hook_on_the_old_model(window: MainWindow, qtbot) -> None:
    old = window.workspace.loaded.module
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_model("resnet34")
    assert window.workspace.loaded.name == "resnet34"
    for module in old.modules():
        assert not module._forward_hooks and not module._backward_hooks and not module._forward_pre_hooks
    assert window.workspace.ticked_pairs() == DEFAULT_PAIRS  # both paths exist in resnet34
    assert hook_count(window, "layer1.0.conv1", "_forward_hooks") == 2  # Act, and Grad's tensor hook put there
    assert window.panel_area.panels[("forward", "layer4.1.conv2")].picture.shape == (1, 512, 7, 7)


def test_switching_model_carries_the_interventions_where_their_module_exists(window: MainWindow, qtbot) -> None:
    from hookscope.core.engine.interventions import Intervention

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.add_edit(Intervention("zero", "layer1.0.conv1", channels=(3,)))
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        off = window.workspace.add_edit(Intervention("scale", "layer4", factor=0.5))
        window.workspace.set_edit_enabled(off, False)
    old = window.workspace.loaded.module
    messages: list[str] = []
    window.statusBar().messageChanged.connect(messages.append)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_model("resnet34")
    assert all(not m._forward_hooks for m in old.modules())  # nothing left on the old model
    edits = [(edit.spec, edit.enabled) for _, edit, _ in window.workspace.registry.edits()]
    assert edits == [("zero:layer1.0.conv1:3", True), ("scale:layer4:0.5", False)]  # on or off as they were
    # Act, Grad (a tensor hook, put there by a forward hook) and the edit
    assert len(window.workspace.loaded.module.get_submodule("layer1.0.conv1")._forward_hooks) == 3
    shown = window.panel_area.panels[("forward", "layer1.0.conv1")].picture.channels.data
    assert not shown[3].any() and shown[2].any()  # the carried edit acts on the new model's run
    assert any("resnet34 loaded" in m and "2 interventions carried over" in m for m in messages)
    current = window.statusBar().currentMessage()  # still there after the run: in front of the run's line
    assert "2 interventions carried over" in current and "records" in current
    messages.clear()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_model("alexnet")  # no layer1, no layer4
    assert list(window.workspace.registry.edits()) == []
    message = next(m for m in messages if "alexnet loaded" in m)
    assert "0 interventions carried over, dropped: zero:layer1.0.conv1:3" in message and "scale:layer4:0.5" in message


def test_closing_during_a_run_leaves_no_worker_and_no_hook(make_window, qtbot) -> None:
    window = make_window()
    qtbot.waitUntil(
        lambda: (
            window.workspace.scheduler.runner.running_job is not None
            and window.workspace.scheduler.runner.running_job.label == "run"
        ),
        timeout=RUN_TIMEOUT_MS,
    )
    window.close()
    assert active_threads() == 0
    assert window.workspace.registry is None or not window.workspace.registry.handles()
    # the wait is what is tested: late signals from the finished worker must not touch the closed window
    qtbot.wait(100)


def test_a_panel_pops_out_into_a_dock_keeps_updating_and_goes_back(window: MainWindow, qtbot, photos) -> None:
    panel = window.panel_area.panels[("forward", "layer4.1.conv2")]
    dock = window.panel_area.pop_out(panel)
    assert dock is not None and dock.isFloating() and dock.widget() is panel
    assert not window.panel_area.holds(panel)
    before = panel.picture
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.open_files([str(photos[2])])
    assert panel.picture is not before and window.panel_area.panels[("forward", "layer4.1.conv2")] is panel
    dock.close()
    assert panel.ident not in window.panel_area.docks
    assert window.panel_area.holds(panel)


def test_pooled_and_class_outputs_show_as_bar_plots(window: MainWindow, qtbot) -> None:
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.tree_view.click_tick("avgpool", "forward")
        window.tree_view.click_tick("fc", "forward")
    pooled = window.panel_area.panels[("forward", "avgpool")]
    logits = window.panel_area.panels[("forward", "fc")]
    shown_picture(window, pooled, qtbot)
    shown_picture(window, logits, qtbot)
    assert pooled.picture.channels.kind == "vector" and pooled.picture.channels.data.shape == (512,)
    assert logits.picture.channels.kind == "vector" and logits.picture.channels.data.shape == (1000,)
    np.testing.assert_allclose(logits._bars.opts["height"], window.workspace.last.result.scores[0].numpy(), rtol=1e-5)
    assert logits._stack.currentWidget() is logits._plot


def test_pasting_an_image_from_the_clipboard_runs_it(window: MainWindow, qtbot, photos) -> None:
    from PySide6.QtGui import QImage

    QApplication.clipboard().setImage(QImage(str(photos[1])))
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.paste_image()
    assert window.workspace.last.image.name.startswith("clipboard image")
    assert window.workspace.last.image.path is None
    expected = window.workspace.loaded.preprocess.to_display(
        window.workspace.loaded.preprocess.to_tensor(read_image(photos[1]))
    )
    np.testing.assert_array_equal(window.workspace.last.input_display, expected)


def test_recent_files_remember_opened_images(window: MainWindow, qtbot, photos) -> None:
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.open_files([str(photos[0])])
    menu = window.menus.actions["file.recent_images"].menu()
    menu.aboutToShow.emit()
    texts = [action.text() for action in menu.actions()]
    assert texts[0] == str(photos[0].resolve())
    assert str(sample_image()) not in texts  # the bundled sample is never a recent file


def test_switching_device_reregisters_the_hooks_and_a_failing_device_keeps_the_results(
    window: MainWindow, qtbot, monkeypatch
) -> None:
    monkeypatch.setattr(workspace_module, "available_devices", lambda: ["cpu", "cuda:7"])  # offered, not present
    cleared: list[int] = []
    registry = window.workspace.registry
    original_clear = registry.clear
    monkeypatch.setattr(registry, "clear", lambda: (cleared.append(len(registry.handles())), original_clear()))
    before = window.workspace.last
    window.workspace.set_device("cuda:7")
    assert cleared == [len(DEFAULT_PAIRS)]  # every hook removed first...
    assert window.workspace.ticked_pairs() == DEFAULT_PAIRS  # ...then registered again, on the same live modules
    assert hook_count(window, "layer1.0.conv1", "_forward_hooks") == 2  # Act and Grad
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        pass
    assert "cuda:7" in window.last_error
    assert window.workspace.last is before  # the results on screen stay
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass  # the window went back to the CPU (hooks re-registered again) and ran
    assert window.chooser.device_box.currentText() == "cpu" and window.workspace.last.result.device == "cpu"
    assert cleared == [len(DEFAULT_PAIRS)] * 2 and window.workspace.ticked_pairs() == DEFAULT_PAIRS
    assert hook_count(window, "layer1.0.conv1", "_forward_hooks") == 2


def test_a_broken_first_image_falls_back_to_the_sample(make_window, qtbot, tmp_path: Path) -> None:
    broken = tmp_path / "first.jpg"
    broken.write_bytes(b"\xff\xd8\xff" + b"garbage" * 50)
    window = make_window(image=str(broken))
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        pass
    assert "first.jpg" in window.last_error
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    assert window.workspace.last.image.path == str(sample_image())
