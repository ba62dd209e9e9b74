"""After the Model box switches model, nothing of the old model's run stays on screen (the mask,
boxes, region and saliency on the input, the classes in Predictions, the target line, the panels) until the new
model's run comes; when that run fails, the views say why and still show nothing of the old model.

Real windows, real torchvision models built by name with random weights (nothing downloads)."""

from __future__ import annotations

import pytest

from hookscope.core.engine.target_words import parse_target

RUN_TIMEOUT_MS = 120_000


def choose_model(window, name: str) -> None:
    """Pick ``name`` in the Model box, as a person's click on its entry does (the box's ``textActivated``)."""
    box = window.chooser.model_box
    box.setCurrentIndex(box.findText(name))
    box.textActivated.emit(name)


def old_results_gone(window, old_words: list[str]) -> None:
    """What a person would see of the old model's run: none of it."""
    panel = window.input_panel
    assert not panel.mask_item.isVisible() and panel.mask_item.image is None, "the old mask is gone"
    assert not panel.mask_box.isVisible()
    assert panel.detections.items == [] and panel.detections.boxes == []
    assert not panel._box.rubber_band.isVisible(), "the old region is gone"
    assert not panel.saliency_item.isVisible() and panel.saliency_item.image is None
    predictions = window.predictions
    assert all(row.isHidden() for row in predictions.rows), "no class of the old model"
    assert predictions.legend.texts == []
    line = predictions.target_label.text()
    assert not any(word in line for word in old_words), line
    assert all(p.picture is None for p in window.panel_area.panels.values()), "no panel of the old run"
    assert window.timing_label.text() == ""


@pytest.fixture
def seg_window(make_window, qtbot):
    """ResNet-18's run on screen, then LR-ASPP chosen in the Model box: at the switch, ResNet-18's classes go."""
    window = make_window(ticks=["layer1.0.conv1"])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    space = window.workspace
    old_classes = [p.label for p in space.last.result.top5]
    assert window.predictions.rows[0].label.text() == old_classes[0]
    with qtbot.waitSignal(space.model_changed, timeout=RUN_TIMEOUT_MS):
        choose_model(window, "lraspp_mobilenet_v3_large")
    old_results_gone(window, old_classes)
    assert "waiting for lraspp_mobilenet_v3_large's first run" in window.predictions.target_label.text()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    assert window.input_panel.mask_item.isVisible(), "the new model's run draws its mask"
    return window


def test_switching_from_a_segmenter_to_a_classifier_leaves_nothing_of_the_segmenter(seg_window, qtbot) -> None:
    window = seg_window
    space = window.workspace
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.set_target(parse_target("class:0@20,30,200,240"))  # a region, as a drag sets it: framed on the input
    assert window.input_panel._box.rubber_band.isVisible()
    result = space.last.result
    name = result.target.split("(")[1].split(")")[0]  # the class the target line names, "background"
    assert name in window.predictions.target_label.text()
    legend = window.predictions.legend.texts
    assert legend
    with qtbot.waitSignal(space.model_changed, timeout=RUN_TIMEOUT_MS):
        choose_model(window, "resnet18")
    old_results_gone(window, [name, *(text.rsplit(" ", 1)[0] for text in legend)])
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    top5 = space.last.result.top5
    assert [row.label.text() for row in window.predictions.rows if not row.isHidden()] == [p.label for p in top5]
    assert not window.input_panel.mask_item.isVisible() and window.predictions.legend.texts == []
    assert not window.input_panel._box.rubber_band.isVisible()


def test_a_detector_whose_run_fails_shows_why_and_nothing_of_the_segmenter(seg_window, qtbot) -> None:
    """A detector with random weights may find no box on the sample (its run then fails with a sentence): the
    views say so, and show nothing of LR-ASPP meanwhile or after."""
    window = seg_window
    space = window.workspace
    legend = window.predictions.legend.texts
    old_line = window.predictions.target_label.text()
    with qtbot.waitSignal(space.model_changed, timeout=RUN_TIMEOUT_MS):
        choose_model(window, "fasterrcnn_mobilenet_v3_large_320_fpn")
    old_words = [old_line.removeprefix("Gradient target: "), *(text.rsplit(" ", 1)[0] for text in legend)]
    old_results_gone(window, old_words)
    outcome: list[str] = []
    window.run_finished.connect(lambda: outcome.append("ran"))
    space.failed.connect(lambda failure: outcome.append(failure.message))
    qtbot.waitUntil(lambda: bool(outcome), timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not space.scheduler.busy, timeout=RUN_TIMEOUT_MS)
    panel = window.input_panel
    assert not panel.mask_item.isVisible() and not panel._box.rubber_band.isVisible()
    assert window.predictions.legend.texts == [] and all(row.isHidden() for row in window.predictions.rows)
    line = window.predictions.target_label.text()
    assert not any(word in line for word in old_words), line
    if outcome[0] != "ran":  # the run failed: the target line says why, naming the new model
        assert line == f"No results of fasterrcnn_mobilenet_v3_large_320_fpn: {outcome[0]}"
        assert space.last is None
