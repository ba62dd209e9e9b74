"""The hook inspector's "Copy whole script" gives a script that really runs (issue 13, item 7): copied from a
workspace over ResNet-18 (random weights) with hooks of every kind and an edit, run in a fresh Python process, it
saves what the window's last run recorded, within 1e-6."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from conftest import RUN_TIMEOUT_MS
from PySide6.QtWidgets import QApplication

from hookscope.core.engine.interventions import Intervention
from hookscope.core.outputs.export import ARCHIVES
from hookscope.ui.features.inspector import InspectorFeature
from hookscope.ui.state.requests import ImageSource


def test_copy_whole_script_redoes_the_run_on_screen(workspace, host, qtbot, tmp_path):
    inspector = InspectorFeature(workspace, host)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        # the window's columns: Grad (tensor hooks) and Grad in (grad_input: a full backward hook on layer2.0.conv1,
        # tensor hooks on the input of bn1, which an in-place ReLU follows)
        workspace.set_ticked(
            [
                ("bn1", "tensor"),
                ("bn1", "grad_input"),
                ("layer2.0.conv1", "grad_input"),
                ("fc", "pre"),
                ("layer4.1.conv2", "tensor"),
                ("layer1.0.relu", "forward"),
            ],
            True,
        )
        workspace.add_edit(Intervention("zero", "layer1.0.conv1", channels=(3,)))
        workspace.set_target(7)
    result = workspace.last.result
    assert result.target_index == 7 and len(result.records) >= 7

    QApplication.clipboard().clear()
    inspector.copy_all_button.click()
    script = QApplication.clipboard().text()
    assert script.startswith('"""What Hookscope ran') and "TARGET = 7" in script
    assert "from the hook inspector" in script and repr(workspace.image.path) in script
    (tmp_path / "redo.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "redo.py", "--save", "captures.npz"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0].startswith("logit of class 7")

    with np.load(tmp_path / "captures.npz") as archive:
        saved = {key: archive[key] for key in archive.files}
    expected = {f"{ARCHIVES[r.kind].removesuffix('.npz')}/{r.key}": r.tensor.numpy() for r in result.records}
    expected["input"] = result.input.numpy()
    expected["input_grad"] = result.input_grad.numpy()
    assert sorted(saved) == sorted(expected)
    for key, value in expected.items():
        assert np.abs(saved[key].astype(np.float64) - value.astype(np.float64)).max() <= 1e-6, key


def test_pasted_pixels_give_a_script_that_asks_for_an_image(workspace, host, qtbot, tmp_path):
    inspector = InspectorFeature(workspace, host)
    pixels = ImageSource.from_path(workspace.image.path).load()
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.request_image(ImageSource("clipboard image 1", None, pixels))
    script = inspector.copy_script()
    assert "IMAGE = None" in script and "pass --image PATH" in script
    (tmp_path / "redo.py").write_text(script)
    done = subprocess.run([sys.executable, "redo.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "this script has no image of its own: pass --image PATH" in done.stderr
