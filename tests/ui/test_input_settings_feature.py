"""The input settings feature built from a workspace and a fake host: the line under the input image says what
the model is fed, and Input… changes it through ``Workspace.set_preprocess`` (the image runs again)."""

from __future__ import annotations

import pytest
import torch
from conftest import no_run_asked
from PySide6.QtCore import Qt

from hookscope.core.models.inputs import custom_preprocess
from hookscope.core.models.source import ModelSource, open_model
from hookscope.ui.dialogs.input_dialog import InputDialog
from hookscope.ui.features.input_settings import InputSettingsFeature

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def inputs(workspace, host) -> InputSettingsFeature:
    return InputSettingsFeature(workspace, host)


def test_the_row_says_what_the_model_is_fed(inputs, host):
    assert host.input_rows == [inputs.row]
    assert inputs.button.isEnabled() and inputs.button.text() == "Input…"
    text = inputs.requirements.text()
    assert "3 x 224 x 224" in text and "the weights' own transforms" in text


def test_input_settings_change_what_the_model_is_fed(inputs, workspace, host, qtbot, monkeypatch):
    assert workspace.last.result.input.shape == (1, 3, 224, 224)
    before = workspace.last.result.records
    asked = []
    monkeypatch.setattr(
        inputs, "ask_input", lambda loaded: asked.append(loaded) or custom_preprocess(size=160, mean=[0.5], std=[0.25])
    )
    with (
        qtbot.waitSignal(workspace.preprocess_changed),
        qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS),
    ):
        qtbot.mouseClick(inputs.button, Qt.MouseButton.LeftButton)
    assert len(asked) == 1
    result = workspace.last.result
    assert result.input.shape == (1, 3, 160, 160)  # what the model really got
    assert workspace.loaded.preprocess.mean == (0.5, 0.5, 0.5)
    expected = custom_preprocess(size=160, mean=[0.5], std=[0.25]).to_tensor(workspace.image.load())
    assert torch.allclose(result.input.cpu(), expected)  # the new size and normalisation, pixel for pixel
    assert result.records is not before
    text = inputs.requirements.text()
    assert "3 x 160 x 160" in text and "set with Input…" in text
    assert any("Model input" in status for status in host.statuses)

    # Cancel changes nothing and runs nothing
    monkeypatch.setattr(inputs, "ask_input", lambda loaded: None)
    previous = workspace.last
    with no_run_asked(workspace):
        inputs.button.click()
    assert workspace.last is previous and workspace.loaded.preprocess.crop == 160


def test_a_model_file_starts_from_a_guess(inputs, workspace, qtbot, tmp_path):
    code = tmp_path / "model.py"
    code.write_text(
        "from torch import nn\n"
        "def build():\n    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3))\n"
    )
    source = ModelSource(file=f"{code}:build", trust=True)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.load_model_with("model.py:build", lambda: open_model(source))
    assert workspace.last.result.input.shape == (1, 1, 224, 224)
    text = inputs.requirements.text()
    assert "1 x 224 x 224, grayscale" in text and "guess" in text
    assert inputs.button.text() == "Input… (guessed)"


def test_the_input_dialog_reads_and_checks_its_values(qtbot):
    own = custom_preprocess()
    dialog = InputDialog(own, own, model_channels=3)
    qtbot.addWidget(dialog)
    assert dialog.size_box.value() == 224 and dialog.mean.text() == "0.485, 0.456, 0.406"
    dialog.size_box.setValue(96)
    dialog.channels.setCurrentIndex(dialog.channels.findData(1))
    assert "3 channel(s)" in dialog.message.text()  # the model's first convolution wants RGB
    dialog.mean.setText("0.5")
    dialog.std.setText("0.2")
    assert dialog.preprocess() == custom_preprocess(size=96, mean=[0.5], std=[0.2], channels=1)
    dialog.std.setText("0.2, x")
    dialog.accept()
    assert dialog.result_preprocess is None and "not a list of numbers" in dialog.message.text()
    dialog.std.setText("0")
    dialog.accept()
    assert dialog.result_preprocess is None and "above 0" in dialog.message.text()
