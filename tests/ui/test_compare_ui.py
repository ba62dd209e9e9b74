"""Image B in the window, offscreen: B runs with every run through the same hooks, every panel can show A, B or
A − B (the difference of the records), channels rank by it, the predictions of both sit side by side. (Grad-CAM's
window tests are in test_grad_cam_ui.py; tests/ui/test_image_b_feature.py tests the feature without a window.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.pictures.compare import rank_channels_by_difference
from hookscope.ui.main_window import MainWindow
from hookscope.ui.state.rendering import DIFF_LUT

RUN_TIMEOUT_MS = 120_000


def record(result, kind: str, key: str):
    return next(r for r in result.records if (r.kind, r.key) == (kind, key))


def test_image_b_gives_every_panel_a_b_and_the_difference(window: MainWindow, qtbot, photos) -> None:
    image_b = window.features["image_b"]
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        image_b.set_image_b(str(photos[1]))
    space = window.workspace
    outcome = space.last
    assert outcome.comparison is not None and outcome.image_b.path == str(photos[1])
    assert space.image_b.path == str(photos[1])
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

    for kind, key in (("forward", "layer4.1.conv2"), ("tensor", "layer1.0.conv1")):
        panel = window.panel_area.panels[(kind, key)]
        a, b = record(result_a, kind, key), record(result_b, kind, key)
        assert panel.view_box.isVisibleTo(panel) and set(panel.views) == {"A", "B", "diff"}
        shown_a = panel.picture.channels.data
        panel.choose_view("B")
        b_values = np.abs(b.tensor[0].numpy()) if kind == "tensor" else b.tensor[0].numpy()
        np.testing.assert_array_equal(panel.picture.channels.data, b_values)
        panel.choose_view("diff")
        assert space.settings_for(key, kind).view == "diff"  # the workspace holds it (sessions save it)
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

    side = window.predictions.side_by_side  # the shell's predictions show A's and B's side by side
    assert side.isVisibleTo(window.predictions)
    texts = side.texts  # names elided to the column's width, whole in the tooltips
    for n, (prediction_a, prediction_b) in enumerate(zip(result_a.top5, result_b.top5)):
        cell_a, cell_b = side.cells[n]
        assert prediction_a.label in cell_a.toolTip() and f"{prediction_a.probability:.1%}" in texts[n][0]
        assert prediction_b.label in cell_b.toolTip() and f"{prediction_b.probability:.1%}" in texts[n][1]
    slot = image_b.slot
    assert slot.thumbnail.pixmap() is not None and not slot.thumbnail.pixmap().isNull()
    assert slot.name.text() == photos[1].name

    # Every panel at once, from the View menu's choice; then B cleared: back to A alone.
    window.menus.actions["view.image_b.B"].trigger()
    assert all(p.view_box.value == "B" for p in window.panel_area.panels.values())
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.menus.actions["file.clear_image_b"].trigger()
    assert space.last.comparison is None and space.image_b is None
    panel = window.panel_area.panels[("forward", "layer4.1.conv2")]
    assert not panel.views and not panel.view_box.isVisibleTo(panel)
    np.testing.assert_array_equal(
        panel.picture.channels.data, record(space.last.result, "forward", "layer4.1.conv2").tensor[0].numpy()
    )
    assert not side.isVisibleTo(window.predictions)


def test_an_unreadable_image_b_is_dropped_and_the_results_stay(window: MainWindow, qtbot, tmp_path: Path) -> None:
    space = window.workspace
    before = space.last
    broken = tmp_path / "second.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS):
        window.features["image_b"].set_image_b(str(broken))
    assert "second.png" in window.last_error
    assert space.last is before
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass  # B was dropped, and the next run works again
    assert space.image_b is None and space.last.comparison is None
