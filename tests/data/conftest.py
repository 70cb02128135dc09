"""A bounded local HTTP server for the download tests (no test touches the internet)."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest


class _Handler(http.server.SimpleHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server API
        type(self).hits.append(self.path)
        super().do_GET()

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def http_root():
    """``serve(root) -> (base_url, hits)``: serve the folder ``root`` on 127.0.0.1 (an
    ephemeral port) until the test ends; ``hits`` lists the requested paths."""
    servers = []

    def serve(root: Path) -> tuple[str, list[str]]:
        handler = type("Handler", (_Handler,), {"hits": []})
        httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(root))
        )
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        servers.append((httpd, thread))
        return f"http://127.0.0.1:{httpd.server_address[1]}", handler.hits

    yield serve
    for httpd, thread in servers:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive()
