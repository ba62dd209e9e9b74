"""Targets and gradients in the window: a class that does not exist is an error message with the results kept; the
Grad-CAM panel says its scale; a ticked gradient with no record says why."""

from __future__ import annotations

import textwrap

import pytest
from conftest import no_run_asked

from hookscope.core.engine.target_words import Objective
from hookscope.core.models.files import open_model_file
from hookscope.core.pictures.cam import run_grad_cam
from hookscope.ui.features.grad_cam import SCALE_TEXT, GradCamFeature

RUN_TIMEOUT_MS = 120_000
MISSING = "Class 5000 does not exist: the model has 1000 classes (0-999)."


def test_a_class_the_model_lacks_is_refused_and_the_results_stay(workspace, qtbot) -> None:
    before = workspace.last
    with no_run_asked(workspace), qtbot.waitSignal(workspace.error, timeout=5000) as error:
        workspace.set_target(5000)
    assert error.args == [MISSING, True]
    assert workspace.target.kind == "top1" and workspace.last is before
    assert workspace.last is before, "nothing ran"


def test_a_bad_target_that_reaches_a_run_fails_it_and_keeps_the_results(workspace, qtbot) -> None:
    """A target set without the check (a session's, say) is stopped by the run itself, with the same words."""
    before = workspace.last
    workspace._target = Objective("class", index=5000)  # past set_target's check, as no window can set it
    with qtbot.waitSignal(workspace.failed, timeout=RUN_TIMEOUT_MS) as failed:
        workspace.run_again()
    assert failed.args[0].message.endswith(MISSING)
    assert workspace.last is before


def test_the_window_shows_the_error_and_keeps_its_predictions(window, qtbot) -> None:
    rows = [row.index for row in window.predictions.rows]
    target = window.predictions.target_label.text()
    window.predictions.target_chosen.emit(5000)
    qtbot.waitUntil(lambda: MISSING in window.last_error, timeout=5000)
    assert [row.index for row in window.predictions.rows] == rows
    assert window.predictions.target_label.text() == target and window.workspace.target.kind == "top1"


def test_grad_cam_panel_says_its_scale(workspace, host, qtbot) -> None:
    feature = GradCamFeature(workspace, host)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        feature.show_module("layer2")
    assert feature.scale_note.text() == SCALE_TEXT and "minimum (0)" in SCALE_TEXT and "maximum (1)" in SCALE_TEXT
    assert not feature.scale_note.isHidden() and feature.view.toolTip() == SCALE_TEXT
    cam = run_grad_cam(workspace.last.result, "layer2")
    assert cam.min() == 0.0 and cam.max() == pytest.approx(1.0, abs=1e-6)


SIDE_PY = textwrap.dedent(
    """
    from torch import nn


    class Side(nn.Module):
        image_size = 32

        def __init__(self):
            super().__init__()
            self.body = nn.Conv2d(3, 4, 3)
            self.side = nn.Conv2d(4, 2, 1)
            self.head = nn.Linear(4, 10)

        def forward(self, x):
            features = self.body(x)
            self.side(features)  # computed, then dropped
            return self.head(features.mean((2, 3)))


    def build():
        return Side()
    """
)


def test_a_gradient_with_no_record_says_why(workspace, qtbot, tmp_path) -> None:
    path = tmp_path / "side.py"
    path.write_text(SIDE_PY)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.load_model_with("side.py", lambda: open_model_file(f"{path}:build", trust=True))
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_ticked([("side", "forward"), ("side", "tensor"), ("body", "tensor")], True)
    result = workspace.last.result
    assert {r.key for r in result.records if r.kind == "tensor" and r.path in ("side", "body")} == {"body"}
    reason = workspace.missing_reason("side", "tensor")
    assert reason.startswith("No record: no gradient reached this module's output: the target (")
    assert "does not depend on it" in reason and result.target in reason
