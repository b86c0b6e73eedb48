"""A local webhook receiver (standard library HTTP server in a thread) that keeps each POST's
JSON body, for the tests of messages sent to a person's webhook."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.url = ""

    def all(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.bodies)


@contextmanager
def webhook_receiver() -> Iterator[Received]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with received.lock:
                received.bodies.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
