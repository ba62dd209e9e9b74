"""A real HTTP server on 127.0.0.1 serving a weights file under the name torchvision expects, for download tests."""

from __future__ import annotations

import http.server
import time

SMALL = "squeezenet1_1"  # a catalogue model with small (5 MB) weights


class WeightsHandler(http.server.BaseHTTPRequestHandler):
    """``server.files[path] = (behaviour, body)``: "good" sends it at once, "drip" in 16 kB pieces until the
    client goes away."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        entry = self.server.files.get(self.path)
        if entry is None:
            self.send_error(404, "Not Found")
            return
        behaviour, body = entry
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if behaviour == "good":
                self.wfile.write(body)
            else:
                for start in range(0, len(body), 16_384):
                    self.wfile.write(body[start : start + 16_384])
                    self.wfile.flush()
                    time.sleep(0.01)
        except OSError:  # the client cancelled
            pass
        self.close_connection = True
