"""Downloading pretrained weights, against a real HTTP server on 127.0.0.1: the cache only ever holds whole,
verified files (never a partial or temporary one), whatever the server does."""

import hashlib
import http.server
import io
import os
import socket
import struct
import threading
from pathlib import Path

import pytest
import torch
import torchvision
from loopback import files_in, serving

from hookscope.cli import main
from hookscope.cli.common import load_for_cli
from hookscope.cli.export import build_export_parser
from hookscope.core.common.errors import DownloadCancelled, ModelError, WeightsDownloadError
from hookscope.core.models.catalogue import default_weights_file, load_model
from hookscope.core.models.weights import (
    WEIGHTS_URL_ENV,
    download_to_cache,
    download_weights,
    expected_hash_prefix,
    is_cached,
    weights_url,
)

MODEL = "squeezenet1_1"  # a real catalogue model with small (5 MB) weights


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files[path] = (behaviour, body)``: good, cut (Content-Length larger than what is sent),
    reset (half, then a TCP reset), stall (half, then silence), or a 404 for anything else."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep the test output clean
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        entry = self.server.files.get(self.path)
        if entry is None:
            self.send_error(404, "Not Found")
            return
        behaviour, body = entry
        half = body[: len(body) // 2]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if behaviour != "reset":
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if behaviour == "good":
            self.wfile.write(body)
        elif behaviour == "cut":
            self.wfile.write(half)
            self.wfile.flush()
        elif behaviour == "reset":
            self.wfile.write(half)
            self.wfile.flush()
            # SO_LINGER 0: closing sends a TCP reset, as when a server process dies mid-way.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        elif behaviour == "stall":
            self.wfile.write(half)
            self.wfile.flush()
            self.server.release.wait(10)
        self.close_connection = True


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.files, httpd.requests, httpd.release = {}, [], threading.Event()
    with serving(httpd):
        yield httpd
        httpd.release.set()


def _named(prefix: str, body: bytes) -> str:
    return f"{prefix}-{hashlib.sha256(body).hexdigest()[:8]}.pth"


def _state_bytes(seed: int = 0) -> bytes:
    torch.manual_seed(seed)
    buffer = io.BytesIO()
    torch.save(torchvision.models.get_model(MODEL, weights=None).state_dict(), buffer)
    return buffer.getvalue()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_expected_hash_prefix_follows_the_torch_hub_convention():
    assert expected_hash_prefix("resnet18-f37072fd.pth") == "f37072fd"
    assert expected_hash_prefix("efficientnet_b0_rwightman-7f5810bc.pth") == "7f5810bc"
    assert expected_hash_prefix("model_v1.0-ABCDEF12.pth") == "abcdef12"
    assert expected_hash_prefix("weights.pth") is None
    assert expected_hash_prefix("my-model.pth") is None  # "model" is not a hex hash


def test_weights_url_and_the_mirror_variable(monkeypatch):
    monkeypatch.delenv(WEIGHTS_URL_ENV, raising=False)
    assert weights_url("resnet18") == "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    monkeypatch.setenv(WEIGHTS_URL_ENV, "http://mirror.example/torch/")
    assert weights_url("resnet18") == "http://mirror.example/torch/resnet18-f37072fd.pth"
    monkeypatch.setenv(WEIGHTS_URL_ENV, "http://mirror.example/torch")
    assert weights_url("resnet18") == "http://mirror.example/torch/resnet18-f37072fd.pth"
    with pytest.raises(ModelError, match="Unknown model"):
        weights_url("resnet1800")


def test_good_file_is_verified_and_moved_into_the_cache(server, hub):
    body = b"weights " * 50_000  # 400 kB: several chunks
    name = _named("tiny", body)
    server.files[f"/models/{name}"] = ("good", body)
    calls = []
    path = download_to_cache(f"{server.base}/models/{name}", progress=lambda *a: calls.append(a))
    assert path == hub / name and path.read_bytes() == body
    assert files_in(hub) == [name]
    assert calls[0] == (0, len(body), 0.0)
    assert calls[-1][:2] == (len(body), len(body)) and calls[-1][2] > 0
    assert all(done <= total for done, total, _ in calls)


def test_wrong_file_is_discarded(server, hub):
    body = b"the right bytes" * 1000
    name = _named("tiny", body)
    server.files[f"/{name}"] = ("good", b"the wrong bytes" * 1000)
    with pytest.raises(WeightsDownloadError) as error:
        download_to_cache(f"{server.base}/{name}")
    message = str(error.value)
    assert "not the one its name promises" in message and name in message and "\n" not in message
    assert files_in(hub) == []


def test_file_cut_short_is_discarded(server, hub):
    body = b"x" * 300_000
    name = _named("tiny", body)
    server.files[f"/{name}"] = ("cut", body)
    with pytest.raises(WeightsDownloadError, match=r"cut short after 0\.1 MB of 0\.3 MB"):
        download_to_cache(f"{server.base}/{name}")
    assert files_in(hub) == []


def test_server_that_stops_mid_way_leaves_nothing(server, hub):
    body = b"y" * 600_000
    name = _named("tiny", body)
    server.files[f"/{name}"] = ("reset", body)  # no Content-Length: only the hash can tell
    with pytest.raises(WeightsDownloadError) as error:
        download_to_cache(f"{server.base}/{name}")
    assert "connection" in str(error.value).lower() or "not the one its name promises" in str(error.value)
    assert files_in(hub) == []


def test_server_that_stalls_times_out_and_leaves_nothing(server, hub):
    body = b"z" * 200_000
    name = _named("tiny", body)
    server.files[f"/{name}"] = ("stall", body)
    with pytest.raises(WeightsDownloadError, match=r"stalled \(no data for 0\.5 s\)"):
        download_to_cache(f"{server.base}/{name}", timeout=0.5)
    assert files_in(hub) == []


def test_cancel_after_the_first_chunk(server, hub):
    body = b"c" * 1_000_000
    name = _named("tiny", body)
    server.files[f"/{name}"] = ("good", body)
    polls = []

    def cancelled():
        polls.append(1)
        return len(polls) > 2  # before connecting, before the first chunk, then cancel

    with pytest.raises(DownloadCancelled, match="cancelled; nothing was saved"):
        download_to_cache(f"{server.base}/{name}", cancelled=cancelled)
    assert len(polls) == 3
    assert files_in(hub) == []


def test_missing_file_on_the_server(server, hub, monkeypatch):
    monkeypatch.setenv(WEIGHTS_URL_ENV, server.base + "/mirror")
    with pytest.raises(WeightsDownloadError, match=f"answered '404 Not Found' for {MODEL}-.*HOOKSCOPE_WEIGHTS_URL"):
        download_weights(MODEL)
    assert files_in(hub) == []


def test_offline_is_one_clear_sentence(hub, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv(WEIGHTS_URL_ENV, f"http://127.0.0.1:{port}/models")
    with pytest.raises(WeightsDownloadError) as error:
        download_weights("resnet18")
    message = str(error.value)
    assert message.startswith(f"Could not reach 127.0.0.1:{port} to download resnet18's weights (")
    assert "you appear to be offline" in message and "resnet18-f37072fd.pth" in message and "\n" not in message
    assert files_in(hub) == []


@pytest.fixture
def served_model_weights(server, hub, monkeypatch):
    """MODEL's real weights address, renamed to the hash of a state_dict made here, served by the test server."""
    body = _state_bytes(seed=4)
    name = _named(MODEL, body)
    weights = torchvision.models.get_model_weights(MODEL).DEFAULT
    monkeypatch.setattr(weights.value, "url", f"https://download.pytorch.org/models/{name}")
    monkeypatch.setenv(WEIGHTS_URL_ENV, server.base + "/mirror/")
    server.files[f"/mirror/{name}"] = ("good", body)
    return name


def test_download_by_name_then_load_uses_the_cache(served_model_weights, hub, server):
    assert not is_cached(MODEL)
    assert not load_model(MODEL, "default").pretrained
    path = download_weights(MODEL)
    assert path == default_weights_file(MODEL) == hub / served_model_weights
    assert files_in(hub) == [served_model_weights] and is_cached(MODEL)
    loaded = load_model(MODEL, "default")
    assert loaded.pretrained and loaded.notice == "" and loaded.categories[281] == "tabby"
    torch.manual_seed(4)
    expected = torchvision.models.get_model(MODEL, weights=None)
    assert torch.equal(loaded.module.classifier[1].weight, expected.classifier[1].weight)
    # cached now: no second request
    assert download_weights(MODEL) == path and len(server.requests) == 1


def test_forced_download_replaces_only_when_verified(served_model_weights, hub, server):
    path = download_weights(MODEL)
    good = path.read_bytes()
    server.files[f"/mirror/{served_model_weights}"] = ("cut", good)
    with pytest.raises(WeightsDownloadError, match="cut short"):
        download_weights(MODEL, force=True)
    assert files_in(hub) == [served_model_weights] and path.read_bytes() == good


def test_stale_partial_files_are_cleaned_up(server, hub):
    body = b"s" * 1000
    name = _named("tiny", body)
    hub.mkdir(parents=True)
    stale = hub / f".{name}.abc123.part"
    stale.write_bytes(b"half")
    os.utime(stale, (1, 1))  # untouched for decades: a killed download's leftover
    server.files[f"/{name}"] = ("good", body)
    download_to_cache(f"{server.base}/{name}")
    assert files_in(hub) == [name]


def test_cli_download_failures_are_one_line_and_leave_the_cache_clean(server, hub, monkeypatch, capsys):
    name = Path(torchvision.models.get_model_weights(MODEL).DEFAULT.url).name
    server.files[f"/m/{name}"] = ("good", b"not the real weights" * 20_000)
    monkeypatch.setenv(WEIGHTS_URL_ENV, server.base + "/m")
    assert main(["download", "--model", MODEL]) == 2
    err = capsys.readouterr().err
    assert "MB/s" in err and "[" in err  # the progress bar ran
    errors = [line for line in err.splitlines() if "error" in line]
    assert (
        len(errors) == 1 and errors[0].startswith("hookscope: error: ") and "not the one its name promises" in errors[0]
    )
    assert files_in(hub) == []

    monkeypatch.setenv(WEIGHTS_URL_ENV, f"http://127.0.0.1:{_closed_port()}/")
    assert main(["download", "--model", MODEL]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hookscope: downloading http://127.0.0.1:") and err.count("\n") == 2
    assert err.splitlines()[1].startswith("hookscope: error: Could not reach") and "you appear to be offline" in err
    assert files_in(hub) == []


def test_cli_download_when_cached_prints_the_path(hub, capsys):
    cached = default_weights_file(MODEL)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"already here")
    assert main(["download", "--model", MODEL]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(cached) and "already in the cache" in err


def test_cli_download_succeeds_and_prints_the_path(served_model_weights, hub, capsys):
    assert main(["download", "--model", MODEL]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(hub / served_model_weights) and "100%" in err


def test_the_command_line_says_an_untrained_model_runs_where_the_window_says_it_shows(hub, capsys, tmp_path):
    """Issue 44: a command shows nothing, so its notice says what runs; the window's words stay "showing"."""
    from hookscope.core.common.resources import sample_image

    command = ["export", "--model", MODEL, "--weights", "default", "--image", str(sample_image())]
    assert main([*command, "--layers", "features.0", "--no-png", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"running an untrained {MODEL} with random weights (seed 0)" in err
    assert "showing" not in err
    assert f"showing an untrained {MODEL} with random weights (seed 0)" in load_model(MODEL, "default").notice


def test_export_default_weights_notice_points_to_download(hub, capsys):
    args = build_export_parser().parse_args(["--model", MODEL, "--weights", "default", "--image", "x.png"])
    loaded = load_for_cli(args)
    assert not loaded.pretrained
    assert f"download them with 'hookscope download --model {MODEL}'" in capsys.readouterr().err
