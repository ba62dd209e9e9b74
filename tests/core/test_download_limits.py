"""Downloads that would never finish give up, and ``kill`` cleans up (issue 13, item 4b).

A real HTTP server on 127.0.0.1 that trickles its bytes (a mirror sending one byte now and then never trips the
"no data for N s" timeout); the floor under the average speed is set short for the test. And a real
``hookscope download`` process, sent SIGTERM mid-way: its ``.part`` file must go, as on Ctrl-C.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torchvision
from loopback import files_in, serving

from hookscope.cli import main
from hookscope.core.common.errors import WeightsDownloadError
from hookscope.core.models import weights as core_weights
from hookscope.core.models.weights import WEIGHTS_URL_ENV, download_to_cache
from hookscope.system.termination import SIGTERM_EXIT

MODEL = "squeezenet1_1"
ROOT = Path(__file__).resolve().parents[2]


class _Trickle(http.server.BaseHTTPRequestHandler):
    """``server.files[path] = (body, piece, pause)``: ``piece`` bytes every ``pause`` seconds, with the full
    Content-Length announced, until the body is sent or the test ends."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        entry = self.server.files.get(self.path)
        if entry is None:
            self.send_error(404, "Not Found")
            return
        body, piece, pause = entry
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for start in range(0, len(body), piece):
                if self.server.stop.is_set():
                    break
                self.wfile.write(body[start : start + piece])
                self.wfile.flush()
                time.sleep(pause)
        except OSError:  # the client gave up
            pass
        self.close_connection = True


@pytest.fixture
def trickle():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    httpd.files, httpd.stop = {}, threading.Event()
    with serving(httpd):
        yield httpd
        httpd.stop.set()


def test_a_trickle_gives_up_with_a_clear_sentence_and_leaves_nothing(trickle, hub):
    body = b"w" * 5000
    name = f"tiny-{hashlib.sha256(body).hexdigest()[:8]}.pth"
    trickle.files[f"/{name}"] = (body, 1, 0.05)  # one byte every 50 ms: 20 B/s, and never 5 s without data
    progress = []
    start = time.monotonic()
    with pytest.raises(WeightsDownloadError) as error:
        download_to_cache(
            f"{trickle.base}/{name}", progress=lambda *a: progress.append(a), timeout=5, min_rate=1000, rate_window=1.0
        )
    elapsed = time.monotonic() - start
    message = str(error.value)
    assert message.startswith(
        f"The download of {name} from 127.0.0.1:{trickle.server_address[1]} is too slow to finish ("
    )
    assert "bytes in the last 1 s, under the 1 kB/s minimum; the remaining" in message
    assert "would take" in message and "nothing was saved to the cache" in message and "\n" not in message
    assert 1.0 <= elapsed < 4.0  # after one window, not after the body or a timeout
    assert any(done > 0 for done, _, _ in progress)  # the bar moved: bytes are read as they come, not 64 kB at once
    assert files_in(hub) == []


def test_a_slow_but_steady_download_is_not_cut(trickle, hub):
    body = b"s" * 6000
    name = f"tiny-{hashlib.sha256(body).hexdigest()[:8]}.pth"
    trickle.files[f"/{name}"] = (body, 500, 0.05)  # about 10 kB/s, for 0.6 s
    path = download_to_cache(f"{trickle.base}/{name}", timeout=5, min_rate=1000, rate_window=0.2)
    assert path.read_bytes() == body and files_in(hub) == [name]


def test_the_command_line_gives_up_in_one_line(trickle, hub, monkeypatch, capsys):
    monkeypatch.setattr(core_weights, "RATE_WINDOW_S", 1.0)
    monkeypatch.setenv(WEIGHTS_URL_ENV, trickle.base + "/m")
    name = os.path.basename(torchvision.models.get_model_weights(MODEL).DEFAULT.url)
    trickle.files[f"/m/{name}"] = (b"q" * 100_000, 2, 0.05)
    assert main(["download", "--model", MODEL, "--timeout", "5", "--min-rate", "1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"hookscope: error: The download of {MODEL}'s weights from 127.0.0.1:")
    assert "under the 1 kB/s minimum" in lines[-1]
    assert files_in(hub) == []
    assert main(["download", "--model", MODEL, "--min-rate", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "hookscope: error: --min-rate is a speed in kB/s (0: no minimum), not -1."


def test_sigterm_removes_the_partial_file(trickle, tmp_path):
    """A real ``hookscope download`` process, killed mid-way with SIGTERM."""
    name = os.path.basename(torchvision.models.get_model_weights(MODEL).DEFAULT.url)
    trickle.files[f"/m/{name}"] = (b"p" * 5_000_000, 4096, 0.02)  # ~200 kB/s: minutes for 5 MB
    checkpoints = tmp_path / "torch" / "hub" / "checkpoints"
    env = {
        **os.environ,
        "TORCH_HOME": str(tmp_path / "torch"),
        WEIGHTS_URL_ENV: trickle.base + "/m",
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "hookscope", "download", "--model", MODEL],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        partial: list[Path] = []
        while time.monotonic() < deadline and process.poll() is None:
            partial = [p for p in checkpoints.glob(f".{name}.*.part") if p.stat().st_size > 0]
            if partial:
                break
            time.sleep(0.05)
        assert partial, "the download never started writing its partial file"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == SIGTERM_EXIT, err
    assert files_in(checkpoints) == []  # the .part file went, as on Ctrl-C
    assert out == ""
    assert err.strip().splitlines()[-1] == "hookscope: download stopped (SIGTERM); nothing was saved to the cache"
