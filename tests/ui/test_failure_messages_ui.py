"""Failures in the window: a model file that exits, a model that raises, NaN weights and a damaged session are each
said for what they are, and the window goes on.

Real workspaces over real models (torchvision ResNet-18 with random weights, small model files written here), the
real features with a fake host; the last test builds the real window.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from fakes import FakeHost
from model_files import MODELS

from hookscope.core.common.resources import sample_image
from hookscope.core.engine.blame import ModelRaised
from hookscope.core.models.source import ModelSource, open_model
from hookscope.ui.features.numeric_health import NumericHealthFeature
from hookscope.ui.features.session_files import SessionFilesFeature
from hookscope.ui.state.workspace import Workspace

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def model_py(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODELS)
    return path


def load(workspace: Workspace, model_py: Path, factory: str) -> None:
    source = ModelSource(file=f"{model_py}:{factory}", trust=True)
    workspace.load_model_with(f"model.py:{factory}", lambda: open_model(source))


# ---- (a) SystemExit in build() -----------------------------------------------------------------------------
def test_a_build_that_exits_is_an_error_message_and_the_model_on_screen_stays(workspace, model_py, qtbot) -> None:
    previous = workspace.loaded
    errors: list[tuple[str, bool]] = []
    workspace.error.connect(lambda message, dialog: errors.append((message, dialog)))
    with qtbot.waitSignal(workspace.failed, timeout=RUN_TIMEOUT_MS) as failed:
        load(workspace, model_py, "exits")
    message = failed.args[0].message
    assert message.startswith(f"The model file '{model_py}' raised SystemExit(3) while building the model in exits()")
    assert errors == [(message, True)]  # a dialog in the window
    assert workspace.loaded is previous and not workspace.loading


# ---- (b) the model raised ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("factory", "said"), [
    ("raises", "The model raised during its forward pass: ValueError: shapes do not match in my model"),
    ("inplace", "The model raised during its backward pass: RuntimeError: one of the variables needed for gradient "
                "computation has been modified by an inplace operation"),
])  # fmt: skip
def test_a_model_that_raises_is_reported_as_the_models_failure(workspace, model_py, qtbot, factory, said) -> None:
    with qtbot.waitSignal(workspace.failed, timeout=RUN_TIMEOUT_MS, check_params_cb=lambda f: not f.load) as failed:
        load(workspace, model_py, factory)
    failure = failed.args[0]
    assert isinstance(failure.error, ModelRaised)
    assert failure.message.startswith(said) and "Unexpected error" not in failure.message
    # the window goes on: another model runs
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        load(workspace, model_py, "fine")


# ---- (f) NaN and inf ---------------------------------------------------------------------------------------
def test_nan_weights_put_up_a_banner_and_the_panels_do_not_blame_an_untrained_head(
    workspace, host, model_py, qtbot
) -> None:
    banner = NumericHealthFeature(workspace, host)
    assert host.notice_rows == [banner.banner] and banner.text == ""
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        load(workspace, model_py, "nan_everywhere")
        workspace.set_ticked([("conv", "tensor")], True)  # the Grad column
    text = banner.text
    assert text.startswith("NaN or inf: the model's output holds NaN in all of 10 values")
    assert "its weights hold NaN or inf (fc.weight: NaN in all of 40 values)" in text
    assert "zero-initialised" not in text and host.statuses[-1] == text

    from hookscope.ui.widgets.feature_map_panel import FeatureMapPanel

    gradient = next(p for p in workspace.last.pictures if (p.path, p.kind) == ("conv", "tensor"))
    assert gradient.flat  # NaN drawn as 0 everywhere: the case that used to read "an untrained model"
    said = FeatureMapPanel._flat_text(gradient)
    assert said.startswith("NaN in all of") and "zero-initialised" not in said

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        load(workspace, model_py, "fine")
    assert banner.text == ""  # a finite run takes it down


def test_an_all_zero_gradient_still_reads_as_before() -> None:
    """Finite zeros are not NaN: the old explanation stays for them."""
    from hookscope.core.engine.hooks import Record
    from hookscope.core.pictures.panels import PanelSettings, picture_of
    from hookscope.ui.widgets.feature_map_panel import FeatureMapPanel

    record = Record("fc", "tensor", 0, "", "Tensor.register_hook", torch.zeros(1, 4, 3, 3))
    picture = picture_of(record, PanelSettings())
    assert picture.flat and FeatureMapPanel._flat_text(picture).startswith("Every gradient here is 0")


# ---- (c) sessions --------------------------------------------------------------------------------------------
def test_a_session_with_an_unreadable_image_a_bad_edit_and_a_bad_hook_restores_the_rest(
    workspace, qtbot, tmp_path
) -> None:
    host = FakeHost()
    qtbot.addWidget(host.parent)
    feature = SessionFilesFeature(workspace, host)
    image_b = tmp_path / "b.png"
    shutil.copy(sample_image(), image_b)
    path = tmp_path / "s.hookscope.json"
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.tick("layer2.0.conv1", "forward")
    assert feature.save(path)
    document = json.loads(path.read_text())
    relative = os.path.relpath("/etc/passwd", tmp_path)
    document["images"] = [{"path": "/nowhere/a.png", "relative": relative}, {"path": str(image_b)}]
    document["hooks"] = [["layer1.0.conv1", "forward"], 7, ["layer2.0.conv1", "forward"]]
    document["edits"] = ["zero:layer1.0.conv1:999", "zero:layer1.0.conv1:3"]
    path.write_text(json.dumps(document))

    failures = []
    workspace.failed.connect(failures.append)
    with qtbot.waitSignals([feature.restored, workspace.run_applied], timeout=RUN_TIMEOUT_MS):
        feature.open(path)
    problems = feature.last_problems
    assert "Hooks entry 7 is not [module, kind]; it was not restored." in problems
    assert ("Cannot read '/etc/passwd': it is not an image file (or its format is not supported). The rest of the "
            "session was restored.") in problems  # fmt: skip
    assert ("Edit 'zero:layer1.0.conv1:999' was not restored: layer1.0.conv1 has 64 channels; channel 999 does not "
            "exist.") in problems  # fmt: skip
    assert len(problems) == 3, problems
    assert {("layer1.0.conv1", "forward"), ("layer2.0.conv1", "forward")} <= workspace.ticked_pairs()
    assert [edit.spec for edit in workspace.registry.enabled_edits()] == ["zero:layer1.0.conv1:3"]
    assert failures == []  # the first run after the restore went through
    assert workspace.image_b is not None and workspace.image_b.path == str(image_b)


def test_a_damaged_session_is_one_line_and_changes_nothing(workspace, qtbot, tmp_path) -> None:
    host = FakeHost()
    qtbot.addWidget(host.parent)
    feature = SessionFilesFeature(workspace, host)
    path = tmp_path / "s.hookscope.json"
    assert feature.save(path)
    path.write_text(path.read_text().replace('"seed": 0', '"seed": 1e999'))
    previous = workspace.loaded
    feature.open(path)
    assert host.errors == [f"'{path}' is a damaged Hookscope session (the number 1e999 is out of range)."]
    assert workspace.loaded is previous and not workspace.loading


# ---- the real window ---------------------------------------------------------------------------------------
def test_the_window_has_the_banner_above_its_panels(make_window, qtbot) -> None:
    window = make_window()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    feature = window.features["numeric_health"]
    assert isinstance(feature, NumericHealthFeature) and feature.text == ""
    with torch.no_grad():
        window.workspace.loaded.module.fc.weight[0, 0] = float("inf")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.run_again()
    assert feature.banner.isVisible()
    assert "its weights hold NaN or inf (fc.weight: inf in 1 of 512000 values)" in feature.text
