"""The doors of a real `inner-plane serve` (issue 29): what only a real server and real sockets
show. uvicorn does not take the client from X-Forwarded-For; a slow body is refused after its
deadline and a body sent without credentials is never waited for, a slow request head is cut
off, malformed requests do not write a line each; a client leaving mid-body is at most a log
line; past the stream cap the 151st stream is refused while /healthz and an
operator read keep answering.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inner_plane import operators
from inner_plane.runtime import Runtime
from inner_plane.sources import processors
from tests.support.http_api import start_api
from tests.support.processes import ChildProcess
from tests.support.stores import Stores

HEAD_TIMEOUT_S = 2


@pytest.fixture
def served(
    runtime: Runtime, clean_stores: Stores, log_dir: Path
) -> Iterator[tuple[ChildProcess, str]]:
    env = clean_stores.env(
        INNER_PLANE_API_BODY_TIMEOUT_S="2",
        INNER_PLANE_API_HEAD_TIMEOUT_S=str(HEAD_TIMEOUT_S),
        INNER_PLANE_API_STREAMS="150",
        INNER_PLANE_API_STREAMS_PER_CREDENTIAL="200",
    )
    child, url = start_api("api-doors", env, log_dir)
    yield child, url
    child.stop()


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def read_status(sock: socket.socket, timeout: float = 30.0) -> int:
    sock.settimeout(timeout)
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError(f"connection closed before a status line: {head!r}")
        head += chunk
    return int(head.split(b" ", 2)[1])


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_uvicorn_does_not_take_the_client_from_x_forwarded_for(
    runtime: Runtime, served: tuple[ChildProcess, str]
) -> None:
    child, url = served
    processors.add(runtime, "ci")
    limit = runtime.settings.auth_failures_per_minute
    answers = []
    # The throttle counts per fixed minute, and these requests may straddle one boundary: so
    # 2 * limit + 10 requests, of which at most 2 * limit can fail authentication. Were the
    # forged header taken as the client, each request would come from another address and
    # none would ever be throttled.
    with httpx.Client(base_url=url, timeout=30) as client:
        for n in range(2 * limit + 10):
            answers.append(
                client.get(
                    f"/v1/signals/{uuid.uuid4()}",
                    headers={
                        "Authorization": f"Bearer ipt.ci.wrong-{n}",
                        "X-Forwarded-For": f"10.7.0.{n % 250}",
                    },
                ).status_code
            )
    assert set(answers) == {401, 429}
    assert answers.count(401) <= 2 * limit and answers[-1] == 429
    assert answers[answers.index(429) :].count(401) <= limit  # a new window at most once
    assert "10.7.0." not in child.output()  # the forged value is never the logged client


def test_slow_and_abandoned_bodies(runtime: Runtime, served: tuple[ChildProcess, str]) -> None:
    child, url = served
    _, token = processors.add(runtime, "ci")
    processors.add(runtime, "hooks", credential="hmac")
    # Without valid credentials a bearer request is refused before its body is read.
    sock = connect(url)
    sock.sendall(request_head("POST", "/v1/signals", {
        "Authorization": "Bearer ipt.ci.wrong", "Content-Length": "100",
        "Content-Type": "application/json",
    }))  # fmt: skip
    assert read_status(sock) == 401
    sock.close()
    # With valid ones, or a signature (which covers the body), the body has a deadline.
    for headers in (
        {"Authorization": f"Bearer {token}"},
        {"X-Inner-Plane-Processor": "hooks", "X-Inner-Plane-Timestamp": str(int(time.time())),
         "X-Inner-Plane-Signature": "v1=00"},
    ):  # fmt: skip
        sock = connect(url)
        sock.sendall(
            request_head("POST", "/v1/signals", {**headers, "Content-Length": "100"}) + b'{"k'
        )
        assert read_status(sock) == 408
        sock.close()
    # A client that leaves mid-body: no traceback.
    for _ in range(5):
        sock = connect(url)
        sock.sendall(
            request_head("POST", "/v1/signals", {"Authorization": f"Bearer {token}",
                                                 "Content-Length": "1000"}) + b'{"kind": '
        )  # fmt: skip
        sock.close()
    # A head that never ends is cut off after INNER_PLANE_API_HEAD_TIMEOUT_S (2 s here, not the
    # default 10): the connection is closed.
    slow = connect(url)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    slow.settimeout(HEAD_TIMEOUT_S + 30)
    started = time.monotonic()
    assert slow.recv(4096) == b""
    # Closed by the setting's deadline, not the default's (a bound, not a timing: 2 s vs 10 s).
    assert time.monotonic() - started < 10
    slow.close()
    # Malformed requests: a 400 each, and uvicorn's warning once, not once per request.
    for _ in range(50):
        sock = connect(url)
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert read_status(sock) == 400
        sock.close()
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
    output = child.output()
    assert "Traceback" not in output
    assert output.count("Invalid HTTP request received.") == 1


def test_the_151st_stream_is_refused_and_the_api_keeps_answering(
    runtime: Runtime, served: tuple[ChildProcess, str]
) -> None:
    _, url = served
    _, token = operators.add(runtime, "dana")
    head = request_head("GET", "/v1/events", {"Authorization": f"Bearer {token}"})
    streams = []
    try:
        for _ in range(150):
            sock = connect(url)
            sock.sendall(head)
            assert read_status(sock) == 200
            streams.append(sock)
        refused = connect(url)
        refused.sendall(head)
        assert read_status(refused) == 503
        refused.close()
        with httpx.Client(base_url=url, timeout=30) as client:
            for _ in range(20):
                assert client.get("/healthz").status_code == 200
                read = client.get("/v1/delegates", headers={"Authorization": f"Bearer {token}"})
                assert read.status_code == 200
        # A stream that ends gives its slot back.
        streams.pop().close()
        deadline = time.monotonic() + 30
        while True:
            again = connect(url)
            again.sendall(head)
            status = read_status(again)
            streams.append(again)
            if status == 200 or time.monotonic() > deadline:
                break
        assert status == 200
    finally:
        for sock in streams:
            sock.close()
