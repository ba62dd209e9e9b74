"""Segmentation, detection and embedding models in the window: a segmentation model's mask and legend, a region
dragged on the input, a detection model's boxes with their threshold, an embedding model's similarity targets; each
sets the gradient target.

The first tests drive the widgets alone on plain arrays (real mouse events through ``QTest``); the window tests
load real torchvision models built by name with untrained weights (nothing downloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from hookscope.core.engine.objectives import embedding_of
from hookscope.core.engine.target_words import Objective, parse_target
from hookscope.ui.state.requests import ImageSource
from hookscope.ui.widgets.detection_overlay import Box
from hookscope.ui.widgets.input_panel import InputPanel, region_of
from hookscope.ui.widgets.predictions import PredictionsPanel
from hookscope.ui.widgets.segmentation_legend import class_colours, class_shares, mask_data, mask_lut, most_common_class

RUN_TIMEOUT_MS = 120_000


def view_point(panel: InputPanel, x: float, y: float) -> QPoint:
    """Where input pixel (x, y) is on the input view's viewport."""
    return panel.view.mapFromScene(panel._box.mapViewToScene(QPointF(x, y)))


def drag(panel: InputPanel, start: tuple[float, float], end: tuple[float, float]) -> None:
    """A real left-button drag on the input view, in steps (pyqtgraph starts a drag after a few pixels)."""
    viewport = panel.view.viewport()
    QTest.mousePress(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, view_point(panel, *start))
    for step in range(1, 7):
        x = start[0] + (end[0] - start[0]) * step / 6
        y = start[1] + (end[1] - start[1]) * step / 6
        QTest.mouseMove(viewport, view_point(panel, x, y))
    QTest.mouseRelease(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, view_point(panel, *end))


def click(panel: InputPanel, x: float, y: float) -> None:
    QTest.mouseClick(
        panel.view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, view_point(panel, x, y)
    )


@pytest.fixture
def input_panel(qtbot) -> InputPanel:
    panel = InputPanel()
    qtbot.addWidget(panel)
    panel.resize(400, 500)
    panel.show()
    panel.show_input(np.full((60, 90, 3), 120, np.uint8), None, "grey")
    qtbot.waitExposed(panel)
    return panel


# ---- the widgets on plain arrays ------------------------------------------------------------------------------


def test_class_colours_are_distinct_and_stable() -> None:
    colours = class_colours(40)
    assert colours.shape == (40, 3) and colours.dtype == np.uint8
    assert len({tuple(c) for c in colours}) == 40
    assert np.array_equal(class_colours(40)[:21], class_colours(21)), "a class keeps its colour"
    assert mask_lut(21).shape == (21, 4) and (mask_lut(21)[:, 3] == 255).all()


def test_class_shares_and_the_most_common_class_of_a_region() -> None:
    classes = np.zeros((10, 10), np.int64)
    classes[:, 6:] = 3
    classes[0, 0] = 7
    shares = class_shares(classes, ["bg", "a", "b", "car"])
    assert [(s.index, s.label) for s in shares] == [(0, "bg"), (3, "car"), (7, "class 7")]
    assert [s.share for s in shares] == [pytest.approx(0.59), pytest.approx(0.4), pytest.approx(0.01)]
    assert most_common_class(classes, (5, 0, 10, 10)) == 3
    assert most_common_class(classes, (0, 0, 1, 1)) == 7
    assert most_common_class(classes, (4, 4, 4, 9)) is None  # no pixel


def test_the_mask_item_holds_the_classes_and_the_legend_lists_them(input_panel, qtbot) -> None:
    classes = np.zeros((60, 90), np.int64)
    classes[10:30, 20:50] = 5
    classes[40:, :] = 2
    input_panel.show_mask(mask_data(classes), mask_lut(6))
    assert input_panel.mask_item.isVisible()
    assert np.array_equal(input_panel.mask_item.image, classes)
    input_panel.mask_box.setChecked(False)
    assert not input_panel.mask_item.isVisible()
    input_panel.show_mask(None)
    assert not input_panel.mask_box.isVisible() and not input_panel.mask_item.isVisible()

    panel = PredictionsPanel()
    qtbot.addWidget(panel)
    panel.show_task("segmentation")
    panel.legend.show_mask(classes, None, class_colours(6), target_class=2)
    assert panel.legend.texts == ["class 0 55.6%", "class 2 33.3%", "class 5 11.1%"]
    chosen = [row for row in panel.legend.rows if row.property("target")]
    assert [row.index for row in chosen] == [2]
    with qtbot.waitSignal(panel.target_chosen) as signal:
        qtbot.mouseClick(panel.legend.rows[2], Qt.MouseButton.LeftButton)
    assert signal.args == [Objective("class", index=5)]


def test_region_of_a_drag_covers_the_pixels_it_touches() -> None:
    assert region_of((10.4, 5.5), (3.2, 20.0), 90, 60) == (3, 5, 11, 20)
    assert region_of((-5, -5), (200, 200), 90, 60) == (0, 0, 90, 60)
    assert region_of((3, 3), (3, 9), 90, 60) is None  # no width
    assert region_of((100, 3), (120, 9), 90, 60) is None  # outside the image


def test_a_real_drag_on_the_input_gives_the_region(input_panel, qtbot) -> None:
    regions: list = []
    input_panel.region_dragged.connect(regions.append)
    drag(input_panel, (10, 10), (40, 30))
    assert regions == [], "no region unless a segmentation model asks for them"
    input_panel.set_regions_enabled(True)
    # a wait Qt's clicks need: a press sooner than this after the last release is a double click
    qtbot.wait(QApplication.doubleClickInterval() + 100)
    drag(input_panel, (10, 10), (40, 30))
    assert len(regions) == 1
    x0, y0, x1, y1 = regions[0]
    assert abs(x0 - 10) <= 1 and abs(y0 - 10) <= 1 and abs(x1 - 40) <= 1 and abs(y1 - 30) <= 1
    band = input_panel._box.rubber_band
    assert band.isVisible() and band.rect().getCoords() == (x0, y0, x1, y1)


def test_boxes_above_the_threshold_are_drawn_and_a_click_chooses_one(input_panel, qtbot) -> None:
    overlay = input_panel.detections
    boxes = [
        Box(0, 5, 5, 30, 30, 1, "cat", 0.9),
        Box(1, 50, 20, 85, 55, 2, "dog", 0.3),
        Box(2, 10, 35, 40, 58, 1, "cat", 0.6),
    ]
    overlay.show_boxes(boxes, None)
    assert [item.box.number for item in overlay.items] == [0, 2]
    assert [item.text.textItem.toPlainText() for item in overlay.items] == ["cat 0.90", "cat 0.60"]
    overlay.set_threshold(0.2)
    assert len(overlay.items) == 3
    with qtbot.waitSignal(input_panel.box_chosen) as chosen:
        click(input_panel, 70, 40)
    assert chosen.args == [1]
    overlay.show_boxes(boxes, 1)
    overlay.set_threshold(0.95)
    assert [item.box.number for item in overlay.items] == [1], "the target stays drawn whatever its score"
    assert overlay.items[0].pen().widthF() > 2


def test_the_threshold_slider_says_how_many_boxes_pass(qtbot) -> None:
    panel = PredictionsPanel()
    qtbot.addWidget(panel)
    panel.show_task("detection")
    assert panel.detection.threshold == 0.5 and panel.detection.value.text() == "0.50"
    with qtbot.waitSignal(panel.detection.threshold_changed) as changed:
        panel.detection.slider.setValue(20)
    assert changed.args == [pytest.approx(0.2)]
    assert not panel.class_buttons.isVisibleTo(panel) and panel.detection.isVisibleTo(panel)


@pytest.mark.parametrize("target", ["top1", 7, "class:3", "class:3@0,4,20,30", "box:2", "text:a photo of a cat"])
def test_a_session_keeps_the_target_as_it_was_set(tmp_path, target) -> None:
    from hookscope.core.common.resources import sample_image
    from hookscope.core.models.catalogue import load_model
    from hookscope.core.outputs.session import load_session, save_session, session_from

    path = tmp_path / "s.json"
    save_session(session_from(load_model("resnet18"), [], [str(sample_image())], target=target), path)
    reopened, problems = load_session(path)
    assert problems == [] and reopened.target == parse_target(target)


# ---- the window with real models --------------------------------------------------------------------------------


def lraspp_at(side: int):
    """LR-ASPP (MobileNet v3), untrained, fed a ``side`` x ``side`` input (its 520 px preset runs seconds here)."""
    from dataclasses import replace

    from hookscope.core.models.catalogue import load_model

    loaded = load_model("lraspp_mobilenet_v3_large")
    return replace(loaded, preprocess=replace(loaded.preprocess, resize=side, crop=side))


@pytest.fixture
def seg_window(make_window, qtbot):
    window = make_window(ticks=["layer1.0.conv1"])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    with qtbot.waitSignals([window.workspace.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        window.workspace.load_model_with("lraspp_mobilenet_v3_large at 128 px", lambda: lraspp_at(128))
    return window


def test_the_mask_on_the_input_is_the_runs_predicted_classes(seg_window) -> None:
    window = seg_window
    result = window.workspace.last.result
    assert result.task == "segmentation"
    classes = result.segmentation.numpy()
    assert classes.shape == window.workspace.last.input_display.shape[:2] == (128, 128)
    mask = window.input_panel.mask_item
    assert mask.isVisible() and np.array_equal(mask.image, classes)
    assert np.array_equal(mask.lut, mask_lut(21)), "VOC's 21 classes, a colour each"
    shown = [(row.index, row.share.text()) for row in window.predictions.legend.rows if not row.isHidden()]
    expected = class_shares(classes)[: len(window.predictions.legend.rows)]
    assert shown == [(s.index, f"{s.share:.1%}") for s in expected]
    assert window.predictions.legend.isVisibleTo(window.predictions)
    assert not window.predictions.detection.isVisibleTo(window.predictions)
    framed = [r.index for r in window.predictions.legend.rows if r.property("target") and not r.isHidden()]
    assert window.workspace.target.kind == "top1" and framed == [result.target_index], "top1's class is framed"
    assert window.predictions.class_box.maximum() == 20


def test_clicking_a_legend_class_makes_it_the_target(seg_window, qtbot) -> None:
    window = seg_window
    row = [r for r in window.predictions.legend.rows if not r.isHidden()][-1]
    chosen = row.index
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(row, Qt.MouseButton.LeftButton)
    result = window.workspace.last.result
    assert window.workspace.target.spec == f"class:{chosen}"
    assert result.target_index == chosen and result.target.startswith(f"logits of class {chosen} (")
    assert "predicted pixels" in result.target
    framed = [r.index for r in window.predictions.legend.rows if r.property("target") and not r.isHidden()]
    assert framed == [chosen]
    assert f"class {chosen}" in window.predictions.target_label.text()


def test_a_rectangle_dragged_on_the_input_sets_the_region_target(seg_window, qtbot) -> None:
    window = seg_window
    panel = window.input_panel
    classes = window.workspace.last.result.segmentation.numpy()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        drag(panel, (20, 30), (70, 90))
    target = window.workspace.target
    assert target.kind == "region" and target.region is not None
    x0, y0, x1, y1 = target.region
    assert abs(x0 - 20) <= 1 and abs(y0 - 30) <= 1 and abs(x1 - 70) <= 1 and abs(y1 - 90) <= 1
    expected = most_common_class(classes, (x0, y0, x1, y1))
    assert target.index == expected, "no class was targeted: the rectangle's most common one"
    result = window.workspace.last.result
    assert result.target.endswith(f"over x {x0}-{x1}, y {y0}-{y1}") and result.target_index == expected
    # the target line reads the rectangle as two ranges (issue 44), not "over 20,30,70,90" (one long number)
    assert window.predictions.target_label.text().endswith(f"over x {x0}-{x1}, y {y0}-{y1}")
    assert panel._box.rubber_band.isVisible() and panel._box.rubber_band.rect().getCoords() == (x0, y0, x1, y1)
    # the input gradient is now confined to what reaches the region: the saliency exists and is not all zero
    assert window.workspace.last.saliency is not None and window.workspace.last.saliency.max() > 0

    # a class targeted first keeps its class over the next rectangle
    other = (expected + 1) % 21  # untrained, the model may predict one class everywhere: any other class
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_target(parse_target(f"class:{other}"))
    qtbot.wait(QApplication.doubleClickInterval() + 100)  # a wait Qt's clicks need: not a double click
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        drag(panel, (5, 5), (40, 40))
    assert window.workspace.target.spec.startswith(f"class:{other}@")


def test_a_target_that_does_not_fit_is_one_error_and_the_results_stay(seg_window, qtbot) -> None:
    window = seg_window
    space = window.workspace
    before, target = space.last, space.target
    space.set_target(parse_target("class:40"))  # VOC has 21 classes: refused by the run, which fails
    qtbot.waitUntil(lambda: "Class 40 does not exist" in window.last_error, timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not space.scheduler.busy, timeout=RUN_TIMEOUT_MS)
    assert space.last is before and space.target == target, "the results and their target stay"
    with pytest.raises(TypeError):  # text is parsed where it comes in (the command line, a session), never here
        space.set_target("box:2")
    assert space.target == target


def biased_detector():
    """Faster R-CNN (MobileNet 320), untrained, with its box classifier's bias set so that boxes pass the model's
    own 0.05 score floor: untrained, every proposal scores about 1/91 and the model returns no box. With the bias
    of class 17 (cat) at 3 and of class 18 (dog) at 2.5 (the other logits near 0), each kept proposal comes out
    as a cat at about 0.17 and a dog at about 0.10: two score levels, so a threshold between them changes the
    count. A 160 px internal size keeps the runs short."""
    from hookscope.core.models.catalogue import load_model

    loaded = load_model("fasterrcnn_mobilenet_v3_large_320_fpn")
    model = loaded.module
    model.transform.min_size, model.transform.max_size = (160,), 160
    with torch.no_grad():
        bias = model.roi_heads.box_predictor.cls_score.bias
        bias.zero_()
        bias[17], bias[18] = 3.0, 2.5
    return loaded


@pytest.fixture
def det_window(make_window, qtbot):
    window = make_window(ticks=["layer1.0.conv1"])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    with qtbot.waitSignals([window.workspace.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        window.workspace.load_model_with("Faster R-CNN with a bias", biased_detector)
    return window


def test_detection_boxes_follow_the_threshold_and_a_click_sets_box_n(det_window, qtbot) -> None:
    window = det_window
    result = window.workspace.last.result
    overlay = window.input_panel.detections
    assert result.task == "detection" and result.detections, "the bias makes boxes"
    scores = [d.score for d in result.detections]
    assert overlay.threshold == 0.5 and overlay.items == [], "untrained scores stay under the default 0.5"
    assert window.predictions.detection.count.text() == f"0 of {len(scores)} detections drawn"
    window.predictions.detection.slider.setValue(5)
    assert [item.box.number for item in overlay.items] == [d.index for d in result.detections if d.score >= 0.05]
    assert len(overlay.items) == len(scores)
    window.predictions.detection.slider.setValue(15)
    high = [d.index for d in result.detections if d.score >= 0.15]
    assert [item.box.number for item in overlay.items] == high and 0 < len(high) < len(scores)
    assert window.predictions.detection.count.text() == f"{len(high)} of {len(scores)} detections drawn"
    first = overlay.items[0]
    assert first.text.textItem.toPlainText() == f"{result.detections[high[0]].label_text} {scores[high[0]]:.2f}"

    # a click at a box's centre: the topmost box there (the smallest: drawn above the larger ones) is chosen
    box = min((item.box for item in overlay.items), key=lambda b: (b.x1 - b.x0) * (b.y1 - b.y0))
    x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    under = [item for item in overlay.items if item.box.x0 <= x <= item.box.x1 and item.box.y0 <= y <= item.box.y1]
    expected = max(under, key=lambda item: item.zValue()).box.number
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        click(window.input_panel, x, y)
    assert window.workspace.target.spec == f"box:{expected}"
    result = window.workspace.last.result
    assert result.target.startswith(f"score of box {expected} ")
    assert result.objective_value == pytest.approx(result.detections[expected].score, abs=1e-5)
    chosen = [item for item in overlay.items if item.box.number == expected]
    assert len(chosen) == 1 and chosen[0].pen().widthF() == 3.0 and chosen[0].pen().color().name() == "#ffffff"

    # with an image B, B runs with the same box:N objective (not a class N, which a detector refuses)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_image_b(ImageSource.from_path(Path(window.workspace.image.path).with_name("coffee.png")))
    assert window.workspace.last.comparison.result.target.startswith(f"score of box {expected} ")

    # a box this image's run did not find (a video's next frame may find fewer): the forward pass is shown, no
    # gradient is taken, the target line and the gradient panels say why, the box target stays for the next image
    missing = len(scores) + 5
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_target(parse_target(f"box:{missing}"))
    result = window.workspace.last.result
    why = f"Box {missing} does not exist: the model found {len(scores)} (box:0-box:{len(scores) - 1})."
    assert result.no_target == why and window.workspace.target.spec == f"box:{missing}"
    assert window.predictions.target_label.text() == f"Gradient target: none: {why}"
    assert result.records and {r.kind for r in result.records} == {"forward"} and result.input_grad is None
    assert window.last_error == ""


@pytest.fixture
def clip_hub(tmp_path, monkeypatch):
    """A tiny CLIP (image and text towers) on a Hub served from 127.0.0.1 (tests/hub_server.py)."""
    import huggingface_hub

    from tests.hub_server import HubServer, make_clip, use_hub
    from tests.loopback import serving

    make_clip(tmp_path / "repos" / "tiny" / "clip")
    with serving(HubServer(tmp_path / "repos")) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        try:
            yield server
        finally:
            # The client keeps its connections alive: closed, the server's threads that wait on them end.
            huggingface_hub.close_session()


def test_an_embedding_model_takes_the_similarity_to_image_b_and_to_a_text(make_window, qtbot, clip_hub) -> None:
    import torch.nn.functional as F

    from hookscope.core.common.resources import sample_image
    from hookscope.core.models.catalogue import load_model

    window = make_window(ticks=["layer1.0.conv1"])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    space = window.workspace
    with qtbot.waitSignals([space.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        space.load_model_with("hf:tiny/clip", lambda: load_model("hf:tiny/clip", "default"))
    loaded = space.loaded
    assert loaded.task == "embedding" and loaded.text_embedder is not None
    similarity = window.predictions.similarity
    assert similarity.isVisibleTo(window.predictions) and not window.predictions.legend.isVisibleTo(window.predictions)
    assert not similarity.image_b_button.isEnabled(), "no image B yet"
    assert not any(row.isVisibleTo(window.predictions) for row in window.predictions.rows), "no class rows"
    other = Path(sample_image()).with_name("coffee.png")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.set_image_b(ImageSource.from_path(other))
    assert similarity.image_b_button.isEnabled() and similarity.text_field.isVisibleTo(window.predictions)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(similarity.image_b_button, Qt.MouseButton.LeftButton)
    assert space.target.spec == f"similar:{other}"
    result = space.last.result
    assert result.target == f"cosine similarity to {other}"
    # the score shown is the cosine similarity of A's and B's embeddings by the same model
    with torch.no_grad():
        a = loaded.module(loaded.preprocess.to_tensor(Image.open(sample_image())))
        b = loaded.module(loaded.preprocess.to_tensor(Image.open(other)))
    expected = float(F.cosine_similarity(embedding_of(a), embedding_of(b))[0])
    assert result.objective_value == pytest.approx(expected, abs=1e-5)
    assert similarity.score.text() == f"Cosine similarity: {expected:.3f}"

    similarity.text_field.setText("a photo of a cat")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.keyClick(similarity.text_field, Qt.Key.Key_Return)
    assert space.target.spec == "text:a photo of a cat"
    result = space.last.result
    text = loaded.text_embedder("a photo of a cat")
    assert result.objective_value == pytest.approx(float(F.cosine_similarity(embedding_of(a), text)[0]), abs=1e-5)
    assert similarity.score.text() == f"Cosine similarity: {result.objective_value:.3f}"


def test_a_region_target_is_saved_in_the_session_and_in_the_export(seg_window, qtbot, tmp_path) -> None:
    import json

    window = seg_window
    space = window.workspace
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.set_target(parse_target("class:3@8,16,72,96"))
    words = space.last.result.target
    assert words.startswith("logits of class 3 (") and words.endswith("over x 8-72, y 16-96")
    sessions = window.features["sessions"]
    path = tmp_path / "region.hookscope.json"
    assert sessions.save(path)
    assert json.loads(path.read_text())["target"] == "class:3@8,16,72,96"
    out = tmp_path / "export"
    with qtbot.waitSignal(sessions.exported, timeout=RUN_TIMEOUT_MS):
        assert sessions.export_run(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["description"] == words and manifest["target"]["index"] == 3
    assert manifest["target"]["objective"]["task"] == "segmentation"

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.set_target(parse_target("top1"))
    with qtbot.waitSignals([sessions.restored, window.run_finished], timeout=RUN_TIMEOUT_MS):
        sessions.open(path)  # the model again (by name, with its 128 px input), then the target and one run
    assert sessions.last_problems == [] and space.target.spec == "class:3@8,16,72,96"
    assert space.last.result.target == words
    assert window.input_panel._box.rubber_band.rect().getCoords() == (8, 16, 72, 96)


def test_a_detector_that_finds_no_box_shows_its_forward_pass_and_says_why_there_is_no_gradient(make_window, qtbot):
    """Untrained, Faster R-CNN finds no object in the sample photograph: the run is shown all the same (the input,
    the activations, no detection, the score slider); the gradient panels and the target line say in one line why
    they are empty; no error box."""
    from hookscope.core.models.catalogue import load_model

    def plain_detector():
        loaded = load_model("fasterrcnn_mobilenet_v3_large_320_fpn")
        loaded.module.transform.min_size, loaded.module.transform.max_size = (160,), 160
        return loaded

    window = make_window(ticks=["layer1.0.conv1"])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    space = window.workspace
    with qtbot.waitSignals([space.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        space.load_model_with("Faster R-CNN, untrained", plain_detector)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.set_ticked([("backbone.body", "forward"), ("backbone.body", "tensor")], True)
    result = space.last.result
    why = "The model found no object in this image: there is no box to take the gradient of."
    assert result.task == "detection" and result.detections == [] and result.no_target == why
    assert window.last_error == ""
    assert {r.kind for r in result.records} == {"forward"} and result.records[0].tensor.abs().sum() > 0
    assert window.predictions.target_label.text() == f"Gradient target: none: {why}"
    assert window.predictions.detection.isVisible() and window.predictions.detection.slider.isEnabled()
    assert space.missing_reason("backbone.body", "tensor") == f"No gradient taken in this run: {why}"
    assert window.input_panel.image_item.image is not None
