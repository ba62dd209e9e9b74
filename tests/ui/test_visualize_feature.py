"""The Visualize feature on a real workspace (ResNet-18, random weights) and a fake host: the tile-menu entry, a run
in the background that shows the image as it improves, Cancel, Save, Use as image A, and no overlap with the
workspace's own runs. Images are 64 pixels and a few steps, to stay fast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtWidgets import QFileDialog

from hookscope.core.engine.hooks import FORWARD
from hookscope.ui.features.visualize import DOCK_ID, VisualizeFeature

RUN_TIMEOUT_MS = 120_000
PATH = "layer2.1"


@pytest.fixture
def feature(workspace, host) -> VisualizeFeature:
    made = VisualizeFeature(workspace, host)
    made.size_box.setValue(64)
    made.steps_box.setValue(8)
    yield made
    made.shutdown()


def texts(menu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def test_the_tile_menu_offers_the_channel_and_the_dock_is_there(feature, workspace, host) -> None:
    assert host.docks[DOCK_ID].widget() is feature.widget
    forward = next(p for p in workspace.last.pictures if p.kind == "forward")
    assert "Visualize channel 3" in texts(host.tile_menu(forward, 3))
    gradient = next(p for p in workspace.last.pictures if p.is_gradient)
    assert not any(t.startswith("Visualize") for t in texts(host.tile_menu(gradient, 3)))
    assert f"Visualize a channel of {PATH}…" in texts(host.module_menu(PATH))
    host.docks[DOCK_ID].setVisible(False)
    host.trigger("visualize.show")
    assert not host.docks[DOCK_ID].isHidden()
    assert PATH in [feature.module_box.itemText(n) for n in range(feature.module_box.count())]


def test_the_tile_entry_runs_it_in_the_background_and_the_dock_shows_the_image(feature, workspace, host, qtbot) -> None:
    forward = next(p for p in workspace.last.pictures if p.kind == "forward")
    module = workspace.registry.module(forward.path)
    registry_hooks = len(module._forward_hooks)
    seen: list[tuple[int, int, int]] = []
    feature.progressed.connect(
        lambda step, _v, _i: seen.append((step, len(module._forward_hooks), len(workspace.external_hooks)))
    )
    host.docks[DOCK_ID].setVisible(False)
    entry = next(a for a in host.tile_menu(forward, 5).actions() if a.text() == "Visualize channel 5")
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        entry.trigger()
        assert feature.running and not feature.run_button.isEnabled() and feature.cancel_button.isEnabled()
    assert done.args == ["done"]
    # The image came every 4 steps while the job ran: the GUI thread was free to show it. The optimisation's own
    # forward hook was on the live module then (next to the registry's), and listed as an external hook.
    assert seen == [(4, registry_hooks + 1, 1), (8, registry_hooks + 1, 1)]
    assert len(module._forward_hooks) == registry_hooks and workspace.external_hooks == ()
    assert not host.docks[DOCK_ID].isHidden()
    assert feature.image.dtype == np.uint8 and feature.image.shape == (64, 64, 3)
    assert not feature.view.pixmap().isNull()
    result = feature.result
    assert result is not None and not result.cancelled and result.steps_done == 8
    assert result.objective.layer == forward.path and result.objective.channel == 5
    np.testing.assert_array_equal(feature.image, result.image)
    assert feature.progress.value() == 8 and "ms per step" in feature.note.text()
    assert feature.save_button.isEnabled() and feature.use_button.isEnabled() and feature.run_button.isEnabled()
    assert host.errors == []


def test_the_external_hook_is_announced_while_it_runs(feature, workspace, qtbot) -> None:
    announced: list[list] = []
    workspace.external_hooks_changed.connect(announced.append)
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.visualize(PATH, 7)
    assert len(announced) == 2 and announced[1] == []
    (info,) = announced[0]
    assert info.path == PATH and info.kind == "forward" and info.method == FORWARD and "channel 7" in info.label


def test_cancel_stops_it_and_the_hook_goes(feature, workspace, qtbot) -> None:
    module = workspace.registry.module(PATH)
    before = len(module._forward_hooks)
    feature.steps_box.setValue(5000)
    with qtbot.waitSignal(feature.progressed, timeout=RUN_TIMEOUT_MS):
        assert feature.visualize(PATH, 2)
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        feature.cancel()
    assert done.args == ["cancelled"]
    assert feature.result.cancelled and 4 <= feature.result.steps_done < 5000
    assert "cancelled" in feature.title.text() and feature.run_button.isEnabled()
    assert len(module._forward_hooks) == before and workspace.external_hooks == ()
    assert feature.image is not None  # the image so far stays, and can be saved


def test_it_never_overlaps_a_workspace_run(feature, workspace, qtbot) -> None:
    order: list[str] = []
    workspace.run_applied.connect(lambda *_: order.append("run"))
    feature.progressed.connect(lambda *_: order.append("step"))
    feature.finished.connect(lambda *_: order.append("done"))
    # A visualisation asked for while a run is due waits for it...
    workspace.run_again()
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.visualize(PATH, 1)
        assert "waiting" in feature.title.text()
    assert order == ["run", "step", "step", "done"]
    # ...and a run asked for while it optimises waits for the visualisation.
    order.clear()
    feature.steps_box.setValue(12)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        with qtbot.waitSignal(feature.progressed, timeout=RUN_TIMEOUT_MS):
            feature.visualize(PATH, 1)
        workspace.run_again()
    assert order == ["step", "step", "step", "done", "run"]


def test_use_as_image_a_runs_it_through_the_workspace(feature, workspace, qtbot) -> None:
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.visualize(PATH, 3)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        assert feature.use_as_image_a()
    source = workspace.image
    assert source.name == f"visualization of {PATH} channel 3" and source.path is None
    np.testing.assert_array_equal(np.asarray(source.image), feature.image)
    assert workspace.last.image is source and workspace.last.input_display.shape == (224, 224, 3)


def test_save_writes_the_png(feature, host, qtbot, tmp_path: Path, monkeypatch) -> None:
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.visualize(PATH, 3)
    target = tmp_path / "dream"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), "PNG image (*.png)"))
    feature.save_dialog()
    with Image.open(tmp_path / "dream.png") as saved:
        assert saved.format == "PNG"
        np.testing.assert_array_equal(np.asarray(saved.convert("RGB")), feature.image)
    assert not feature.save_to(str(tmp_path / "no-such-folder" / "x.png"))
    assert len(host.errors) == 1 and "Cannot save" in host.errors[0]


def test_a_bad_module_or_channel_is_one_line(feature, workspace, host, qtbot) -> None:
    handles = workspace.registry.handle_count()
    hooks = len(workspace.registry.module(PATH)._forward_hooks)
    feature.module_box.setCurrentText("layer9")
    assert not feature.start()
    assert host.errors == ["The model has no module named 'layer9'."]
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS) as done:
        feature.visualize(PATH, 500)
    assert done.args == ["failed"]
    assert host.errors[-1] == f"'{PATH}' has 128 channels (0-127); there is no channel 500."
    assert workspace.registry.handle_count() == handles and workspace.external_hooks == ()
    assert len(workspace.registry.module(PATH)._forward_hooks) == hooks


def test_the_channel_view_has_a_button_for_the_channel_it_shows(workspace, host, qtbot) -> None:
    from hookscope.ui.features.visualize import VisualizeFeature

    feature = VisualizeFeature(workspace, host)
    assert feature.channel_button in host.channel_rows and not feature.channel_button.isEnabled()
    pictures = {(p.kind, p.path): p for p in workspace.last.pictures}
    host.open_channel(pictures[("tensor", "layer1.0.conv1")], 2)
    assert not feature.channel_button.isEnabled()  # a gradient's channel: the entry belongs to activations
    host.open_channel(pictures[("forward", "layer1.0.conv1")], 7)
    assert feature.channel_button.isEnabled()
    feature.steps_box.setValue(4)
    assert feature.visualize_shown()
    assert feature.module_box.currentText() == "layer1.0.conv1" and feature.channel_box.value() == 7
    feature.cancel()
    qtbot.waitUntil(lambda: not feature.running, timeout=60_000)
    feature.shutdown()
