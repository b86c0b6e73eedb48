"""The API served by a real uvicorn server in a thread of the test process (for streams a
test client cannot hold open), on a free port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from fastapi import FastAPI

from inner_plane.services.embedded import free_port


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.02)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


class SseReader:
    """Reads server-sent events from an open httpx stream: (id, event, data) tuples."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()

    def __iter__(self) -> Iterator[tuple[str | None, str, str]]:
        ident: str | None = None
        name = "message"
        data: list[str] = []
        for line in self.lines:
            if line == "":
                if data:
                    yield ident, name, "\n".join(data)
                ident, name, data = None, "message", []
            elif line.startswith(":"):
                continue
            else:
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "id":
                    ident = value
                elif key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
