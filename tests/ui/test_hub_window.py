"""A model from the Hugging Face Hub typed into the window's model box: a real Hub on 127.0.0.1
(tests/hub_server.py), the real huggingface_hub client, the load on the workspace's worker."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.hub_server import HubServer, make_bert, make_vit
from tests.loopback import serving

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def hub(tmp_path, monkeypatch):
    make_vit(tmp_path / "repos" / "tiny" / "vit")
    make_bert(tmp_path / "repos" / "tiny" / "bert")
    with serving(HubServer(tmp_path / "repos")) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def type_model(window, qtbot, name: str) -> None:
    box = window.chooser.model_box
    box.lineEdit().clear()
    qtbot.keyClicks(box.lineEdit(), name)
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)


def test_a_typed_hub_name_loads_the_model_and_shows_its_tree(make_window, qtbot, hub):
    window = make_window(weights="default")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    with qtbot.waitSignals([window.workspace.model_changed, window.run_finished], timeout=RUN_TIMEOUT_MS):
        type_model(window, qtbot, "hf:tiny/vit")  # loaded, then run on the picture
    loaded = window.workspace.loaded
    assert loaded.name == "hf:tiny/vit" and loaded.source == "hub" and loaded.pretrained
    paths = [node.path for node in window.tree_model.nodes]
    assert "vit.layers.0.attention" in paths and "classifier" in paths  # transformers' own modules
    assert window.tree_model.index_of("classifier").isValid()
    assert window.chooser.model_box.currentText() == "hf:tiny/vit"
    assert window.chooser.model_box.findText("hf:tiny/vit") >= 0  # listed now, to come back to
    assert any(path.endswith("/model.safetensors") for _, path, _ in hub.requests)


def test_a_typed_text_model_is_refused_in_one_sentence_and_the_model_stays(make_window, qtbot, hub):
    window = make_window()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    with qtbot.waitSignal(window.workspace.failed, timeout=RUN_TIMEOUT_MS) as failed:
        type_model(window, qtbot, "hf:tiny/bert")
    assert "hf:tiny/bert is a bert text model, not an image model" in str(failed.args[0].error)
    assert window.workspace.loaded.name == "resnet18"
