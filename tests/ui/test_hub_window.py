"""A model from the Hugging Face Hub typed into the window's model box: a real Hub on 127.0.0.1
(tests/hub_server.py), the real huggingface_hub client, the load on the workspace's worker."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import huggingface_hub
import pytest
from PySide6.QtCore import Qt

from hookscope.ui.state.worker import active_threads
from tests.hub_server import HubServer, make_bert, make_timm, make_vit, use_hub
from tests.loopback import serving

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def hub(tmp_path, monkeypatch):
    make_vit(tmp_path / "repos" / "tiny" / "vit")
    make_bert(tmp_path / "repos" / "tiny" / "bert")
    make_timm(tmp_path / "repos" / "timm" / "test_resnet.r160_in1k")
    with serving(HubServer(tmp_path / "repos")) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        try:
            yield server
        finally:
            # The client keeps its connections alive: closed, the server's threads that wait on them end.
            huggingface_hub.close_session()


def type_model(window, qtbot, name: str) -> None:
    box = window.chooser.model_box
    box.lineEdit().clear()
    qtbot.keyClicks(box.lineEdit(), name)
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)


def test_a_typed_hub_name_loads_the_model_and_shows_its_tree(make_window, qtbot, hub):
    window = make_window(weights="default")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    feature = window.features["weights_download"]
    shown = []
    feature.progressed.connect(lambda done, total, speed: shown.append((done, total, feature.transfer.text())))
    with qtbot.waitSignals([window.workspace.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        type_model(window, qtbot, "hf:tiny/vit")  # fetched, loaded, then run on the picture
    # config.json comes first, alone (a text model is refused before its weights come); then the rest, shown
    served = sum(p.stat().st_size for p in (hub.folder / "tiny" / "vit").iterdir() if p.name != "config.json")
    assert shown and shown[-1][:2] == (served, served)  # the download's progress, in the notice row
    assert not feature.row.isVisible()  # done: the row goes
    loaded = window.workspace.loaded
    assert loaded.name == "hf:tiny/vit" and loaded.source == "hub" and loaded.pretrained
    paths = [node.path for node in window.tree_model.nodes]
    assert "vit.layers.0.attention" in paths and "classifier" in paths  # transformers' own modules
    assert window.tree_model.index_of("classifier").isValid()
    assert window.chooser.model_box.currentText() == "hf:tiny/vit"
    assert window.chooser.model_box.findText("hf:tiny/vit") >= 0  # listed now, to come back to
    assert any(path.endswith("/model.safetensors") for _, path, _ in hub.requests)
    inputs = window.features["input_settings"]
    assert "(the repo's image processor)" in inputs.requirements.text() and inputs.button.text() == "Input…"


def test_cancel_stops_the_download_keeps_its_part_and_the_model_stays(make_window, qtbot, hub):
    hub.slow.add("tiny/vit/model.safetensors")
    window = make_window(weights="default")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    feature = window.features["weights_download"]
    with qtbot.waitSignal(feature.progressed, timeout=RUN_TIMEOUT_MS, check_params_cb=lambda d, t, s: d > 10_000):
        type_model(window, qtbot, "hf:tiny/vit")
    assert feature.row.isVisible() and feature.cancel_button.isVisible()
    with qtbot.waitSignal(window.workspace.load_cancelled, timeout=5000):
        qtbot.mouseClick(feature.cancel_button, Qt.MouseButton.LeftButton)
    assert window.workspace.loaded.name == "resnet18"
    blobs = Path(os.environ["HF_HOME"]) / "hub" / "models--tiny--vit" / "blobs"
    qtbot.waitUntil(lambda: active_threads() == 0, timeout=20_000)
    partial = [p for p in blobs.iterdir() if p.name.endswith(".incomplete")]
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < 87_000  # kept, for the next try to resume
    assert not any(p.name == hashlib.sha256((hub.folder / "tiny/vit/model.safetensors").read_bytes()).hexdigest()
                   for p in blobs.iterdir())  # fmt: skip


def test_a_typed_text_model_is_refused_in_one_sentence_and_the_model_stays(make_window, qtbot, hub):
    window = make_window()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    with qtbot.waitSignal(window.workspace.failed, timeout=RUN_TIMEOUT_MS) as failed:
        type_model(window, qtbot, "hf:tiny/bert")
    assert "hf:tiny/bert is a bert text model, not an image model" in str(failed.args[0].error)
    assert window.workspace.loaded.name == "resnet18"


def test_the_download_button_fetches_timms_weights_from_the_hub(make_window, qtbot, hub):
    window = make_window(model="timm/test_resnet", weights="default")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    feature = window.features["weights_download"]
    assert not window.workspace.loaded.pretrained  # not cached yet: random weights, and the button offers them
    assert feature.offered_for() == "timm/test_resnet" and feature.download_button.isVisible()
    with qtbot.waitSignals([feature.finished, window.workspace.model_changed], timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(feature.download_button, Qt.MouseButton.LeftButton)
    loaded = window.workspace.loaded
    assert loaded.name == "timm/test_resnet" and loaded.pretrained and loaded.weights == "default"
    assert any(method == "GET" and path.startswith("/timm/test_resnet.r160_in1k/resolve/")
               and path.endswith("/model.safetensors") for method, path, _ in hub.requests)  # fmt: skip


def test_the_window_starts_on_a_hub_model_and_switches_its_weights(make_window, qtbot, hub):
    window = make_window(model="hf:tiny/vit", weights="default")  # hookscope --model hf:tiny/vit
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    assert window.workspace.loaded.name == "hf:tiny/vit" and window.workspace.loaded.pretrained
    assert window.chooser.weights_box.currentText() == "Pretrained (Hugging Face Hub)"
    with qtbot.waitSignals([window.workspace.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        window.workspace.set_weights("none")
    loaded = window.workspace.loaded
    assert loaded.name == "hf:tiny/vit" and not loaded.pretrained and loaded.weights_text == "Random weights (seed 0)"
