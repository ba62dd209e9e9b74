"""A download server that answers strangely is described for what it did, in one line.

Against real servers on 127.0.0.1: an HTTP server whose address redirects to itself forever, and a TCP server that
answers with bytes that are not HTTP. Neither is "offline"; each is one line on stderr, and the cache stays empty.
"""

from __future__ import annotations

import http.server
import socket
import socketserver
from collections.abc import Iterator

import pytest
from loopback import files_in, serving

from hookscope.cli import main
from hookscope.core.common.errors import WeightsDownloadError
from hookscope.core.models.weights import WEIGHTS_URL_ENV, download_to_cache

MODEL = "squeezenet1_1"


class _Redirects(http.server.BaseHTTPRequestHandler):
    """Every address answers 302 to itself (``/loop/...``), or to the next of an endless chain (``/chain/N``)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests += 1
        if self.path.startswith("/chain/"):
            head, _, name = self.path.rpartition("/")
            target = f"{head}/{int(name.split('-')[0]) + 1}-x.pth" if name[:1].isdigit() else f"{head}/0-x.pth"
        else:
            target = self.path
        self.send_response(302)
        self.send_header("Location", target)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Garbage(socketserver.BaseRequestHandler):
    """Reads the request, answers with bytes that are not HTTP, and closes."""

    def handle(self):
        self.request.recv(65536)
        self.request.sendall(self.server.answer)


@pytest.fixture
def redirects() -> Iterator[http.server.ThreadingHTTPServer]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirects)
    httpd.requests = 0
    with serving(httpd):
        yield httpd


@pytest.fixture
def garbage() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Garbage)
    server.answer = b"\x00\x17 SSH-2.0-OpenSSH_9.6 this is not HTTP at all\r\n\r\n"
    with serving(server):
        yield server


def test_a_redirect_loop_is_one_sentence(redirects, hub) -> None:
    with pytest.raises(WeightsDownloadError) as raised:
        download_to_cache(f"{redirects.base}/loop/tiny-00000000.pth")
    message = str(raised.value)
    assert "\n" not in message
    assert message == (f"The server 127.0.0.1:{redirects.server_address[1]} sends the address of tiny-00000000.pth "
                       "round in a redirect loop, so nothing was downloaded; try again later or use another mirror "
                       f"(${WEIGHTS_URL_ENV}).")  # fmt: skip
    assert "offline" not in message and files_in(hub) == []


def test_an_endless_chain_of_redirects_is_one_sentence_too(redirects, hub) -> None:
    with pytest.raises(WeightsDownloadError, match=r"redirect loop") as raised:
        download_to_cache(f"{redirects.base}/chain/start-00000000.pth", filename="start-00000000.pth")
    assert "\n" not in str(raised.value) and files_in(hub) == []


def test_cli_redirect_loop_prints_one_error_line(redirects, hub, monkeypatch, capsys) -> None:
    monkeypatch.setenv(WEIGHTS_URL_ENV, redirects.base + "/loop")
    assert main(["download", "--model", MODEL]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("hookscope: downloading ") and len(err) == 2, err
    assert err[1].startswith("hookscope: error: The server 127.0.0.1:") and "redirect loop" in err[1]
    assert files_in(hub) == []


def test_a_server_that_answers_garbage_is_not_called_offline(garbage, hub) -> None:
    with pytest.raises(WeightsDownloadError) as raised:
        download_to_cache(f"{garbage.base}/tiny-00000000.pth")
    message = str(raised.value)
    assert "offline" not in message and "\n" not in message
    assert message.startswith(f"The server 127.0.0.1:{garbage.server_address[1]} answered with something that is not "
                              "HTTP (")  # fmt: skip
    assert message.endswith(f"so nothing was downloaded: is the address (or ${WEIGHTS_URL_ENV}) right?")
    assert files_in(hub) == []


def test_a_server_that_closes_without_a_word_is_not_called_offline(garbage, hub) -> None:
    garbage.answer = b""
    with pytest.raises(WeightsDownloadError) as raised:
        download_to_cache(f"{garbage.base}/tiny-00000000.pth")
    message = str(raised.value)
    assert "offline" not in message
    assert message.startswith(f"The server 127.0.0.1:{garbage.server_address[1]} closed the connection without an "
                              "answer")  # fmt: skip


def test_cli_garbage_prints_one_error_line(garbage, hub, monkeypatch, capsys) -> None:
    monkeypatch.setenv(WEIGHTS_URL_ENV, garbage.base)
    assert main(["download", "--model", MODEL]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "not HTTP" in err[1] and "offline" not in err[1]


def test_nothing_listening_is_still_offline(hub) -> None:
    """A port where nothing listens on this machine is what 'unreachable' looks like: that sentence stays."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(WeightsDownloadError, match="you appear to be offline"):
        download_to_cache(f"http://127.0.0.1:{port}/tiny-00000000.pth")
