"""The weights download feature built from a workspace and a fake host: the notice above the panels says in one
sentence that random weights are shown, Download fetches the real file from a real HTTP server on 127.0.0.1
(verified, with progress), and the model reloads with its weights; Cancel and an unreachable server leave the
untrained model and no file behind."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import torch
import torchvision
from loopback import files_in
from PySide6.QtCore import Qt
from weights_server import SMALL

from hookscope.core.models.loaded import LoadedModel
from hookscope.core.models.weights import WEIGHTS_URL_ENV
from hookscope.ui.features.weights_download import WeightsDownloadFeature, model_title, transfer_text
from hookscope.ui.state.workspace import Workspace

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def untrained(served, hub, qtbot) -> Iterator[Workspace]:
    """A workspace that asked for SMALL's pretrained weights, which are not in the (empty) cache."""
    space = Workspace(weights="default")
    space.attach_view(lambda: (300, 300))
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        space.start(SMALL, None)
    assert not space.loaded.pretrained
    yield space
    space.shutdown()


@pytest.fixture
def download(untrained, host) -> WeightsDownloadFeature:
    return WeightsDownloadFeature(untrained, host)


def shown(widget) -> bool:
    """Visible once the window is (the fake host's parent is never shown)."""
    return not widget.isHidden()


def test_the_notice_says_in_one_sentence_what_is_shown(download, untrained, host, hub):
    assert host.notice_rows == [download.row] and shown(download.row)
    sentence = download.sentence.text()
    assert sentence == "Showing SqueezeNet 1.1 with random weights: its pretrained weights are not on this computer."
    assert str(hub) not in sentence and WEIGHTS_URL_ENV not in sentence
    assert shown(download.download_button) and download.download_button.text() == "Download (5 MB)"
    assert not shown(download.progress) and not shown(download.cancel_button)
    # the cache folder and the environment variables are behind Details
    assert shown(download.details_button) and not shown(download.details)
    download.details_button.click()
    assert shown(download.details)
    assert str(hub) in download.details.text() and "TORCH_HOME" in download.details.text()
    assert WEIGHTS_URL_ENV in download.details.text()
    # item 6 of the issue: the Weights box says what is in use
    assert untrained.loaded.weights_text == "Random weights (seed 0)"


def test_download_fetches_the_weights_with_progress_then_uses_them(download, untrained, host, qtbot, served, hub):
    name, body = served
    texts, values = [], []
    download.progressed.connect(
        lambda *_: (texts.append(download.transfer.text()), values.append(download.progress.value()))
    )
    with qtbot.waitSignal(untrained.run_applied, timeout=RUN_TIMEOUT_MS):
        with qtbot.waitSignal(download.finished, timeout=RUN_TIMEOUT_MS) as finished:
            qtbot.mouseClick(download.download_button, Qt.MouseButton.LeftButton)
            assert shown(download.progress) and shown(download.cancel_button)
    assert finished.args[0] == "done" and name in finished.args[1]
    assert values and values[-1] == 1000  # 100%
    assert any("MB/s" in text and f"of {len(body) / 1e6:.1f} MB" in text for text in texts)
    assert files_in(hub) == [name]
    loaded = untrained.loaded
    assert loaded.pretrained and loaded.weights == "default" and loaded.name == SMALL
    torch.manual_seed(4)
    expected = torchvision.models.get_model(SMALL, weights=None)
    assert torch.equal(loaded.module.classifier[1].weight, expected.classifier[1].weight)
    assert not shown(download.row)  # nothing missing any more
    assert untrained.last.result.records  # ran again with the weights
    assert loaded.weights_text == "Pretrained (ImageNet, torchvision)"


def test_cancelling_a_download_leaves_no_file_and_keeps_the_untrained_model(
    download, untrained, qtbot, served, hub, server
):
    name, body = served
    server.files[f"/mirror/{name}"] = ("drip", body)
    previous = untrained.loaded

    def cancel_once_started(done, total, speed):
        if done > 0:
            download.cancel_button.click()

    download.progressed.connect(cancel_once_started)
    with qtbot.waitSignal(download.finished, timeout=RUN_TIMEOUT_MS) as finished:
        download.download_button.click()
    assert finished.args[0] == "cancelled" and "nothing was saved" in finished.args[1]
    assert files_in(hub) == []  # neither the weights nor a partial file
    assert untrained.loaded is previous and not untrained.loaded.pretrained
    assert shown(download.download_button) and download.download_button.text() == "Download (5 MB)"
    assert not shown(download.progress) and not shown(download.cancel_button)


def test_an_unreachable_server_is_one_sentence_and_the_untrained_model_stays(
    download, untrained, host, qtbot, hub, monkeypatch
):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(WEIGHTS_URL_ENV, f"http://127.0.0.1:{port}/models")
    previous = untrained.loaded
    with qtbot.waitSignal(download.finished, timeout=RUN_TIMEOUT_MS) as finished:
        download.start()
    assert finished.args[0] == "failed"
    message = finished.args[1]
    assert "you appear to be offline" in message and "\n" not in message
    assert host.errors[-1] == message
    sentence = download.sentence.text()
    assert "failed" in sentence and "random weights" in sentence and str(port) not in sentence
    assert shown(download.details) and "you appear to be offline" in download.details.text()  # why, opened
    assert download.download_button.text().startswith("Try again")
    assert untrained.loaded is previous and files_in(hub) == []


def test_no_notice_when_random_weights_were_asked_for(workspace, host):
    feature = WeightsDownloadFeature(workspace, host)
    assert workspace.weights == "none" and not workspace.loaded.pretrained
    assert not shown(feature.row) and feature.offered_for() is None
    feature.start()  # nothing to download: nothing starts
    assert not feature.running


def test_another_notice_takes_the_row_without_a_button(workspace, host, qtbot):
    feature = WeightsDownloadFeature(workspace, host)

    def noted() -> LoadedModel:
        from hookscope.core.models.catalogue import load_model

        loaded = load_model("resnet18", "none")
        loaded.notice = "Non-strict load: 60 of 62 tensors of resnet18 loaded."
        return loaded

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.load_model_with("resnet18", noted)
    assert shown(feature.row) and feature.sentence.text() == "Non-strict load: 60 of 62 tensors of resnet18 loaded."
    assert not shown(feature.download_button) and not shown(feature.details_button)


def test_model_titles_and_transfer_text():
    assert model_title("resnet18") == "ResNet-18"
    assert model_title("vit_b_16") == "ViT-B/16"
    assert model_title("mobilenet_v3_small") == "MobileNet V3 Small"
    assert model_title("wide_resnet50_2") == "Wide ResNet-50-2"
    assert model_title("shufflenet_v2_x1_0") == "ShuffleNet V2 x1.0"
    assert model_title("my_net") == "my_net"
    assert transfer_text(12_300_000, 44_700_000, 5_100_000) == "12.3 of 44.7 MB · 5.1 MB/s"
    assert transfer_text(1_000_000, None, 0.0) == "1.0 MB · 0.0 MB/s"
