"""Image B and Grad-CAM in the window, offscreen: B runs with every run through the same hooks, every panel can
show A, B or A − B (the difference of the records), channels rank by it, the predictions of both sit side by side;
Grad-CAM lays one module's map over the input image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.core.cam import run_grad_cam
from app.core.capture import capture_run
from app.core.compare import rank_channels_by_difference
from app.core.hooks import HookRegistry
from app.core.images import read_image
from app.core.models import load_model
from app.ui.main_window import MainWindow
from app.ui.widgets.mosaic_item import DIFF_LUT

RUN_TIMEOUT_MS = 120_000


def record(result, kind: str, key: str):
    return next(r for r in result.records if (r.kind, r.key) == (kind, key))


def test_image_b_gives_every_panel_a_b_and_the_difference(window: MainWindow, qtbot, photos) -> None:
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.set_image_b(str(photos[1]))
    outcome = window.last_outcome
    assert outcome.comparison is not None and outcome.image_b.path == str(photos[1])
    assert window.image_b.path == str(photos[1])
    result_a, result_b = outcome.result, outcome.comparison.result
    assert result_b.target_index == result_a.target_index  # B's gradients are of A's class, so they compare

    # B went through the same hooks: its activations are those of a direct engine run on B.
    loaded = load_model("resnet18", "none", seed=0)
    with HookRegistry(loaded.module) as registry:
        registry.add("layer4.1.conv2", "forward")
        direct = capture_run(loaded.module, registry, loaded.preprocess.to_tensor(read_image(photos[1])))
    np.testing.assert_allclose(
        record(result_b, "forward", "layer4.1.conv2").tensor.numpy(),
        record(direct, "forward", "layer4.1.conv2").tensor.numpy(),
        rtol=1e-5,
        atol=1e-6,
    )

    for kind, key in (("forward", "layer4.1.conv2"), ("backward", "layer1.0.conv1")):
        panel = window.panel_area.panels[(kind, key)]
        a, b = record(result_a, kind, key), record(result_b, kind, key)
        assert panel.view_box.isVisibleTo(panel) and set(panel.views) == {"A", "B", "diff"}
        shown_a = panel.picture.channels.data
        panel.choose_view("B")
        b_values = np.abs(b.tensor[0].numpy()) if kind == "backward" else b.tensor[0].numpy()
        np.testing.assert_array_equal(panel.picture.channels.data, b_values)
        panel.choose_view("diff")
        # the difference of the records as captured: signed, for gradients too
        np.testing.assert_array_equal(panel.picture.channels.data, a.tensor[0].numpy() - b.tensor[0].numpy())
        assert panel._mosaic.rendered.lut == DIFF_LUT  # drawn through the diverging table
        mosaic = panel.picture.arrangement.image
        assert mosaic.dtype == np.uint8 and mosaic.any()
        panel.choose(sort="diff")  # channels ranked by how much A and B differ
        ranked = rank_channels_by_difference(a, b)
        np.testing.assert_array_equal(panel.picture.arrangement.order, ranked)
        assert panel.picture.arrangement.layout.order == tuple(int(c) for c in ranked)
        panel.choose_view("A")
        np.testing.assert_array_equal(panel.picture.channels.data, shown_a)
        np.testing.assert_array_equal(panel.picture.arrangement.order, ranked)

    side = window.predictions.side_by_side
    assert side.isVisibleTo(window.predictions)
    texts = side.texts
    for n, (prediction_a, prediction_b) in enumerate(zip(result_a.top5, result_b.top5)):
        assert prediction_a.label in texts[n][0] and f"{prediction_a.probability:.1%}" in texts[n][0]
        assert prediction_b.label in texts[n][1] and f"{prediction_b.probability:.1%}" in texts[n][1]
    slot = window.compare.slot
    assert slot.thumbnail.pixmap() is not None and not slot.thumbnail.pixmap().isNull()
    assert slot.name.text() == photos[1].name

    # Every panel at once, from the View menu's choice; then B cleared: back to A alone.
    window.compare.show_view_everywhere("B")
    assert all(p.view_box.value == "B" for p in window.panel_area.panels.values())
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.compare.clear()
    assert window.last_outcome.comparison is None and window.image_b is None
    panel = window.panel_area.panels[("forward", "layer4.1.conv2")]
    assert not panel.views and not panel.view_box.isVisibleTo(panel)
    np.testing.assert_array_equal(
        panel.picture.channels.data, record(window.last_outcome.result, "forward", "layer4.1.conv2").tensor[0].numpy()
    )
    assert not side.isVisibleTo(window.predictions)


def test_an_unreadable_image_b_is_dropped_and_the_results_stay(window: MainWindow, qtbot, tmp_path: Path) -> None:
    before = window.last_outcome
    broken = tmp_path / "second.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        window.set_image_b(str(broken))
    assert "second.png" in window.last_error
    assert window.last_outcome is before
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass  # B was dropped, and the next run works again
    assert window.image_b is None and window.last_outcome.comparison is None


def test_grad_cam_ticks_what_it_needs_and_overlays_the_input(window: MainWindow, qtbot) -> None:
    path = "layer3.1.conv2"
    assert not window.registry.has(path, "forward")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        assert window.grad_cam.show_module(path)
        assert window.registry.has(path, "forward") and window.registry.has(path, "backward")  # ticked for it
    view = window.grad_cam
    assert "ticked" in view.note.text() and path in view.note.text()
    assert window.grad_cam_dock.isVisible()
    outcome = window.last_outcome
    rgb = outcome.input_display
    assert view.image_item.image.shape == rgb.shape == (224, 224, 3)
    np.testing.assert_array_equal(view.cam, run_grad_cam(outcome.result, path))
    assert f"class {outcome.result.target_index}" in view.title.text() and path in view.title.text()
    view.opacity.setValue(0)
    np.testing.assert_array_equal(view.image_item.image, rgb)
    view.opacity.setValue(100)
    assert not np.array_equal(view.image_item.image, rgb)

    # It follows the target class chosen in the predictions.
    chosen = window.predictions.rows[2].index
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.set_target(chosen)
    np.testing.assert_array_equal(view.cam, run_grad_cam(window.last_outcome.result, path))
    assert f"class {chosen}" in view.title.text()


@pytest.mark.parametrize("path", ["fc", "avgpool"])
def test_grad_cam_of_a_module_without_spatial_output_is_an_error(window: MainWindow, qtbot, path: str) -> None:
    handles = window.registry.handle_count()
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        assert not window.grad_cam.show_module(path)
    assert "spatial output" in window.last_error and path in window.last_error
    assert window.registry.handle_count() == handles  # nothing ticked
