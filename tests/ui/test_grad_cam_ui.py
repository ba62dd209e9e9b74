"""Grad-CAM in the window, offscreen: it ticks what it needs, overlays the input, follows the target class, and
refuses a module without spatial output. (tests/ui/test_grad_cam_feature.py tests the feature without a window.)"""

from __future__ import annotations

import numpy as np
import pytest

from hookscope.core.pictures.cam import run_grad_cam
from hookscope.ui.features.grad_cam import GradCamFeature
from hookscope.ui.main_window import MainWindow

RUN_TIMEOUT_MS = 120_000


def grad_cam(window: MainWindow) -> GradCamFeature:
    return window.features["grad_cam"]


def test_grad_cam_ticks_what_it_needs_and_overlays_the_input(window: MainWindow, qtbot) -> None:
    path = "layer3.1.conv2"
    workspace, view = window.workspace, grad_cam(window)
    assert not view.dock.isVisible()  # hidden until asked for
    assert not workspace.registry.has(path, "forward")
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        assert view.show_module(path)
        assert workspace.registry.has(path, "forward") and workspace.registry.has(path, "tensor")  # ticked for it
    assert "ticked" in view.note.text() and path in view.note.text()
    assert view.dock.isVisible()
    assert ("forward", path) in window.panel_area.panels  # the panels follow the ticks
    outcome = workspace.last
    rgb = outcome.input_display
    assert view.image_item.image.shape == rgb.shape == (224, 224, 3)
    np.testing.assert_array_equal(view.cam, run_grad_cam(outcome.result, path))
    assert f"class {outcome.result.target_index}" in view.title.text() and path in view.title.text()
    view.opacity.setValue(0)
    np.testing.assert_array_equal(view.image_item.image, rgb)
    view.opacity.setValue(100)
    assert not np.array_equal(view.image_item.image, rgb)

    # It follows the target class chosen in the predictions.
    chosen = outcome.result.top5[2].index
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_target(chosen)
    np.testing.assert_array_equal(view.cam, run_grad_cam(workspace.last.result, path))
    assert f"class {chosen}" in view.title.text()


@pytest.mark.parametrize("path", ["fc", "avgpool"])
def test_grad_cam_of_a_module_without_spatial_output_is_an_error(window: MainWindow, qtbot, path: str) -> None:
    handles = window.workspace.registry.handle_count()
    with qtbot.waitSignal(window.error_shown, timeout=5000) as blocker:
        assert not grad_cam(window).show_module(path)
    assert "spatial output" in blocker.args[0] and path in blocker.args[0]
    assert window.workspace.registry.handle_count() == handles  # nothing ticked
