"""The Grad-CAM feature built from a workspace and a fake host: menu entries only for modules with spatial output,
the hooks it needs ticked through the workspace, the map recomputed after every run and every target change."""

from __future__ import annotations

import numpy as np
import pytest

from hookscope.core.pictures.cam import run_grad_cam
from hookscope.ui.features.grad_cam import DOCK_ID, GradCamFeature

RUN_TIMEOUT_MS = 120_000
PATH = "layer3.1.conv2"


@pytest.fixture
def grad_cam(workspace, host) -> GradCamFeature:
    return GradCamFeature(workspace, host)


def texts(menu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def test_menu_entries_only_for_modules_with_spatial_output(grad_cam, workspace, host) -> None:
    assert host.docks[DOCK_ID].widget() is grad_cam.widget
    assert texts(host.module_menu(PATH)) == [f"Grad-CAM of {PATH}"]
    assert texts(host.module_menu("fc")) == [] and texts(host.module_menu("avgpool")) == []
    picture = next(p for p in workspace.last.pictures if p.kind == "forward")
    assert texts(host.tile_menu(picture, 3)) == [f"Grad-CAM of {picture.path}"]


def test_it_ticks_what_it_needs_and_follows_every_run_and_the_target(grad_cam, workspace, host, qtbot) -> None:
    module = workspace.registry.module(PATH)
    assert not module._forward_hooks and not workspace.is_ticked(PATH, "forward")
    dock = host.docks[DOCK_ID]
    dock.setVisible(False)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        host.module_menu(PATH).actions()[-1].trigger()
        assert workspace.is_ticked(PATH, "forward") and workspace.is_ticked(PATH, "tensor")  # Act and Grad
        # real hooks, at once: Act's forward hook, and the forward hook that puts Grad's tensor hook on the output
        assert len(module._forward_hooks) == 2 and not module._backward_hooks
        assert "waiting" in grad_cam.title.text()
    assert not dock.isHidden()
    assert "ticked" in grad_cam.note.text() and PATH in grad_cam.note.text()
    assert any(PATH in status for status in host.statuses)
    outcome = workspace.last
    rgb = outcome.input_display
    assert grad_cam.image_item.image.shape == rgb.shape == (224, 224, 3)
    np.testing.assert_array_equal(grad_cam.cam, run_grad_cam(outcome.result, PATH))
    assert f"class {outcome.result.target_index}" in grad_cam.title.text() and PATH in grad_cam.title.text()
    assert PATH in [grad_cam.module_box.itemText(n) for n in range(grad_cam.module_box.count())]
    grad_cam.opacity.setValue(0)
    np.testing.assert_array_equal(grad_cam.image_item.image, rgb)
    grad_cam.opacity.setValue(100)
    assert not np.array_equal(grad_cam.image_item.image, rgb)

    # Another target class: the map follows the run that takes its gradients.
    chosen = outcome.result.top5[2].index
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_target(chosen)
    assert workspace.last.result.target_index == chosen
    np.testing.assert_array_equal(grad_cam.cam, run_grad_cam(workspace.last.result, PATH))
    assert f"class {chosen}" in grad_cam.title.text()
    assert not np.array_equal(grad_cam.cam, run_grad_cam(outcome.result, PATH))

    # Asked again with everything ticked: nothing more is ticked, the map is there at once.
    handles = workspace.registry.handle_count()
    grad_cam.cam = None
    assert grad_cam.show_module(PATH)
    assert workspace.registry.handle_count() == handles and grad_cam.cam is not None


@pytest.mark.parametrize("path", ["fc", "avgpool"])
def test_a_module_without_spatial_output_is_an_error(grad_cam, workspace, host, path: str) -> None:
    handles = workspace.registry.handle_count()
    assert not grad_cam.show_module(path)
    assert len(host.errors) == 1 and "spatial output" in host.errors[0] and path in host.errors[0]
    assert workspace.registry.handle_count() == handles  # nothing ticked
