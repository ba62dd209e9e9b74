"""File > Export run with an edit on: the window's manifest.json records the edit and the change it made to each
top-5 prediction, as ``hookscope export --edit`` does (one manifest writer, ``hookscope.core.outputs.export``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hookscope.core.engine.interventions import Intervention
from hookscope.core.pictures.compare import prediction_changes

RUN_TIMEOUT_MS = 120_000


def test_export_run_records_the_edits_and_the_prediction_changes(window, qtbot, tmp_path):
    space = window.workspace
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        assert space.add_edit(Intervention("zero", "layer1.0.conv1", channels=(5,))) is not None
    result = space.last.result
    assert result.baseline_scores is not None  # the run with the edit on was compared with one without it
    out = tmp_path / "run"
    sessions = window.features["sessions"]
    with qtbot.waitSignal(sessions.exported, timeout=RUN_TIMEOUT_MS):
        assert sessions.export_run(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["edits"] == ["zero:layer1.0.conv1:5"]
    expected = prediction_changes(result)
    assert len(expected) == 5
    assert [c["index"] for c in manifest["prediction_changes"]] == [c.index for c in expected]
    for written, change in zip(manifest["prediction_changes"], expected):
        assert written["label"] == change.label
        assert written["probability"] == pytest.approx(change.probability)
        assert written["without_edits"] == pytest.approx(change.before)
        assert written["change"] == pytest.approx(change.delta)
    with np.load(out / "activations.npz") as archive:  # the edited run is what was written
        edited = archive["layer1.0.conv1"][0]
    assert not edited[5].any() and edited.any()
