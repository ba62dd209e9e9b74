"""Opening your own model in the window, downloading pretrained weights, and the model's input settings.

Real files (state_dicts, pickles, TorchScript, a model.py), real drops on the window, a real HTTP server on
127.0.0.1 for the download; the questions a file raises (architecture, trust) are answered by replacing the one
method that asks, never by a modal dialog. The features alone, without a window, are tested in
tests/ui/test_model_files_feature.py, test_weights_download_feature.py and test_input_settings_feature.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torchvision
from loopback import files_in
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from torch import nn
from weights_server import SMALL

from hookscope.core.models import catalogue as core_models
from hookscope.core.models.inputs import custom_preprocess
from hookscope.core.models.weights import WEIGHTS_URL_ENV
from hookscope.ui.features.input_settings import InputSettingsFeature
from hookscope.ui.features.open_model import ModelFilesFeature
from hookscope.ui.features.weights_download import WeightsDownloadFeature
from hookscope.ui.main_window import MainWindow

RUN_TIMEOUT_MS = 120_000


def dropfiles_in(window: MainWindow, paths: list[Path]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(
        QPoint(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    drop = QDropEvent(
        QPointF(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(window, drop)


class MarkerNet(nn.Module):
    """A small model whose unpickling leaves a marker file: proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.marker = str(marker)
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv(x)).flatten(1))

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        Path(state["marker"]).write_text("unpickled")


def modelfiles_in(window: MainWindow) -> ModelFilesFeature:
    return window.features["model_files"]


def weights_download(window: MainWindow) -> WeightsDownloadFeature:
    return window.features["weights_download"]


def input_settings(window: MainWindow) -> InputSettingsFeature:
    return window.features["input_settings"]


def recent_models_menu(window: MainWindow) -> list:
    """File > Recent models as the user opens it (the submenu is filled when it is about to show)."""
    menu = window.menus.actions["file.recent_models"].menu()
    menu.aboutToShow.emit()
    return menu.actions()


def never(*args, **kwargs):
    raise AssertionError(f"this question must not be asked here: {args}")


# ---- model files -------------------------------------------------------------------------------------------


def test_dropped_state_dict_asks_for_the_architecture_and_loads_the_file(window, qtbot, tmp_path, monkeypatch):
    torch.manual_seed(7)
    saved = torchvision.models.resnet18().state_dict()
    path = tmp_path / "cats_finetuned.pth"
    torch.save(saved, path)
    before = window.workspace.ticked_pairs()
    asked = []
    monkeypatch.setattr(
        modelfiles_in(window),
        "ask_architecture",
        lambda file, keys, *fits: asked.append((file, keys)) or ("resnet18", False),
    )
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        dropfiles_in(window, [path])
    assert asked == [(str(path), len(saved))]
    loaded = window.workspace.loaded
    assert loaded.source == "state_dict" and loaded.model_file == str(path) and loaded.name == "resnet18"
    state = loaded.module.state_dict()
    assert set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in saved)
    assert window.workspace.ticked_pairs() == before  # the ticks carried over to the new model
    assert window.workspace.last.result.records

    # File > Recent models opens it again without asking
    monkeypatch.setattr(modelfiles_in(window), "ask_architecture", never)
    open_model = window.menus.actions["file.open_model"]
    assert open_model.text() == "Open model…" and open_model.shortcut().toString() == "Ctrl+Shift+O"
    actions = recent_models_menu(window)
    assert actions[0].text() == "cats_finetuned.pth as resnet18" and actions[0].toolTip() == str(path)
    with qtbot.waitSignal(window.workspace.model_changed, timeout=RUN_TIMEOUT_MS):
        actions[0].trigger()
    assert window.workspace.loaded is not loaded and torch.equal(
        window.workspace.loaded.module.fc.weight, saved["fc.weight"]
    )


def test_a_state_dict_that_does_not_fit_stops_unless_non_strict(window, qtbot, tmp_path, monkeypatch):
    torch.manual_seed(3)
    saved = torchvision.models.resnet18(num_classes=10).state_dict()
    path = tmp_path / "ten_classes.pt"
    torch.save({"state_dict": saved}, path)
    previous = window.workspace.loaded
    answers = iter([("resnet18", False), ("resnet18", True)])
    monkeypatch.setattr(modelfiles_in(window), "ask_architecture", lambda file, keys, *fits: next(answers))
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS) as shown:
        modelfiles_in(window).open(path)
    message = shown.args[0]
    assert "does not fit resnet18" in message and "shape mismatch" in message and "fc.weight" in message
    assert "(10, 512)" in message and "non-strict" in message
    assert window.workspace.loaded is previous  # nothing half-loaded: the previous model stays

    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        modelfiles_in(window).open(path)
    loaded = window.workspace.loaded
    notice = weights_download(window)  # the notice row above the panels shows any notice of the loaded model
    assert loaded is not previous and "Non-strict load" in loaded.notice and notice.row.isVisible()
    assert notice.sentence.text() == loaded.notice
    assert torch.equal(loaded.module.layer1[0].conv1.weight, saved["layer1.0.conv1.weight"])
    assert loaded.module.fc.weight.shape == (1000, 512)


def test_a_pickled_model_opens_only_when_trusted(window, qtbot, tmp_path, monkeypatch):
    marker = tmp_path / "unpickled.marker"
    path = tmp_path / "whole_model.pt"
    torch.save(MarkerNet(marker), path)
    previous, results = window.workspace.loaded, window.workspace.last
    asked = []
    monkeypatch.setattr(
        modelfiles_in(window), "ask_trust", lambda file, objects: asked.append((file, objects)) or False
    )
    with qtbot.waitSignal(modelfiles_in(window).refused, timeout=RUN_TIMEOUT_MS) as refused:
        dropfiles_in(window, [path])
    assert asked and asked[0][0] == str(path)
    assert any(name.endswith("MarkerNet") for name in asked[0][1])  # the dialog names what the file imports
    assert "not trusted" in refused.args[0] and "whole_model.pt" in window.last_error
    assert not marker.exists()  # nothing from the file ran
    assert window.workspace.loaded is previous and window.workspace.last is results

    monkeypatch.setattr(modelfiles_in(window), "ask_trust", lambda file, objects: True)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        dropfiles_in(window, [path])
    assert marker.exists()
    assert window.workspace.loaded.source == "pickle" and isinstance(window.workspace.loaded.module, MarkerNet)
    assert window.workspace.last.result.records  # its default layers were ticked and ran


def test_a_python_factory_runs_only_when_trusted(window, qtbot, tmp_path, monkeypatch):
    marker = tmp_path / "imported.marker"
    code = tmp_path / "model.py"
    code.write_text(
        "import pathlib\nfrom torch import nn\n"
        f"pathlib.Path({str(marker)!r}).touch()\n"
        "def build():\n    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3))\n"
    )
    previous = window.workspace.loaded
    trust = []
    monkeypatch.setattr(modelfiles_in(window), "ask_trust", lambda file, objects: trust.append(file) or False)
    with qtbot.waitSignal(modelfiles_in(window).refused, timeout=RUN_TIMEOUT_MS):
        dropfiles_in(window, [code])
    assert trust == [f"{code}:build"] and not marker.exists() and window.workspace.loaded is previous

    monkeypatch.setattr(modelfiles_in(window), "ask_trust", lambda file, objects: True)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        modelfiles_in(window).open(code)
    assert marker.exists() and window.workspace.loaded.source == "python"
    # a one-channel first convolution: a grayscale input was guessed, and the window says it is a guess
    assert window.workspace.loaded.preprocess.channels == 1
    assert window.workspace.last.result.input.shape == (1, 1, 224, 224)
    assert "1 x 224 x 224, grayscale" in input_settings(window).requirements.text()
    assert "guess" in input_settings(window).requirements.text()


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_and_other_files_are_refused_and_the_results_stay(window, qtbot, tmp_path):
    scripted = tmp_path / "scripted.pt"
    torch.jit.script(nn.Sequential(nn.Conv2d(3, 4, 3))).save(str(scripted))
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"these are not weights" * 100)
    previous, results = window.workspace.loaded, window.workspace.last
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS) as shown:
        dropfiles_in(window, [scripted])
    assert "TorchScript" in shown.args[0] and "hooks" in shown.args[0] and "--" not in shown.args[0]
    with qtbot.waitSignal(window.error_shown, timeout=RUN_TIMEOUT_MS) as shown:
        dropfiles_in(window, [junk])
    assert "not a PyTorch model or weights file" in shown.args[0]
    assert window.workspace.loaded is previous and window.workspace.last is results
    assert window.workspace.registry.handles()  # the previous hooks are still on the previous model


def test_timm_models_join_the_model_list_when_timm_is_installed(make_window, qtbot, monkeypatch):
    monkeypatch.setattr(core_models, "timm_catalogue", lambda: ["timm/tiny_fake_net"])
    window = make_window()
    names = [window.chooser.model_box.itemText(n) for n in range(window.chooser.model_box.count())]
    assert "timm/tiny_fake_net" in names and "resnet18" in names
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass


# ---- input settings ------------------------------------------------------------------------------------------


def test_input_settings_change_what_the_model_is_fed(window, qtbot, monkeypatch):
    assert window.workspace.last.result.input.shape == (1, 3, 224, 224)
    assert "the weights' own transforms" in input_settings(window).requirements.text()
    monkeypatch.setattr(
        input_settings(window), "ask_input", lambda loaded: custom_preprocess(size=160, mean=[0.5], std=[0.25])
    )
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        input_settings(window).button.click()
    result = window.workspace.last.result
    assert result.input.shape == (1, 3, 160, 160)
    assert window.workspace.loaded.preprocess.mean == (0.5, 0.5, 0.5)
    text = input_settings(window).requirements.text()
    assert "3 x 160 x 160" in text and "set with Input…" in text


# ---- downloading pretrained weights -------------------------------------------------------------------------


def _untrained_window(make_window, qtbot) -> MainWindow:
    window = make_window(model=SMALL, weights="default")
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    notice = weights_download(window)
    assert not window.workspace.loaded.pretrained and notice.row.isVisible()
    assert notice.sentence.text() == (
        "Showing SqueezeNet 1.1 with random weights: its pretrained weights are not on this computer."
    )
    assert window.chooser.weights_box.currentText() == "Random weights (seed 0)"  # what is in use, in the toolbar
    return window


def test_download_button_fetches_the_weights_with_progress_then_uses_them(make_window, qtbot, served, hub):
    name, body = served
    window = _untrained_window(make_window, qtbot)
    download = weights_download(window)
    assert download.download_button.isVisible() and download.download_button.text() == "Download (5 MB)"
    texts, values = [], []
    download.progressed.connect(
        lambda *_: (texts.append(download.transfer.text()), values.append(download.progress.value()))
    )
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(download.download_button, Qt.MouseButton.LeftButton)
        qtbot.waitSignal(download.finished, timeout=RUN_TIMEOUT_MS).wait()
    assert download.progress.value() == download.progress.maximum() == 1000  # 100%
    assert values and values[-1] == 1000
    assert any("MB/s" in text and f"of {len(body) / 1e6:.1f} MB" in text for text in texts)
    assert files_in(hub) == [name]
    loaded = window.workspace.loaded
    assert loaded.pretrained and loaded.weights == "default" and loaded.name == SMALL
    torch.manual_seed(4)
    expected = torchvision.models.get_model(SMALL, weights=None)
    assert torch.equal(loaded.module.classifier[1].weight, expected.classifier[1].weight)
    assert not download.row.isVisible()
    assert window.workspace.last.result.records  # ran again with the weights
    assert window.chooser.weights_box.currentText() == "Pretrained (ImageNet, torchvision)"


def test_cancelling_a_download_leaves_no_file_and_keeps_the_untrained_model(make_window, qtbot, served, hub, server):
    name, body = served
    server.files[f"/mirror/{name}"] = ("drip", body)
    window = _untrained_window(make_window, qtbot)
    download = weights_download(window)
    previous = window.workspace.loaded

    def cancel_once_started(done, total, speed):
        if done > 0:
            download.cancel_button.click()

    download.progressed.connect(cancel_once_started)
    with qtbot.waitSignal(download.finished, timeout=RUN_TIMEOUT_MS) as finished:
        download.download_button.click()
    assert finished.args[0] == "cancelled" and "nothing was saved" in finished.args[1]
    assert files_in(hub) == []  # neither the weights nor a partial file
    assert window.workspace.loaded is previous and not window.workspace.loaded.pretrained
    assert download.download_button.isVisible() and not download.progress.isVisible()


def test_offline_download_is_one_sentence_and_the_untrained_model_stays(make_window, qtbot, served, hub, monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(WEIGHTS_URL_ENV, f"http://127.0.0.1:{port}/models")
    window = _untrained_window(make_window, qtbot)
    previous = window.workspace.loaded
    with qtbot.waitSignal(weights_download(window).finished, timeout=RUN_TIMEOUT_MS) as finished:
        weights_download(window).start()
    assert finished.args[0] == "failed"
    message = finished.args[1]
    assert "you appear to be offline" in message and "\n" not in message
    notice = weights_download(window)
    assert "failed" in notice.sentence.text() and "random weights" in notice.sentence.text()
    assert notice.details.isVisible() and "you appear to be offline" in notice.details.text()
    assert window.last_error == message
    assert window.workspace.loaded is previous and files_in(hub) == []
    assert weights_download(window).download_button.text().startswith("Try again")
