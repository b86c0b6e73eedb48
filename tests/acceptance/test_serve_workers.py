"""`inner-plane serve --workers 2` with real processes: each worker listens on a socket of its
own (inner_plane.http.listeners), so connections opened at once are spread over the workers
instead of all going to the first worker to wake (which took all 16 in 5 of 6 bursts before);
a killed worker is replaced by one listening on a socket of its own; a port another process
listens on fails the start, naming it."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inner_plane.http.listeners import spreads_connections
from tests.support import sockets
from tests.support.http_api import start_api
from tests.support.processes import ChildProcess, children_of
from tests.support.stores import ROOT, Stores
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(not spreads_connections(), reason="SO_REUSEPORT spreads only on Linux"),
]

BURST = 16  # bench.http's connections
BURSTS = 5


@pytest.fixture
def served(clean_stores: Stores, log_dir: Path) -> Iterator[tuple[ChildProcess, int]]:
    child, url = start_api("api-workers", clean_stores.env(), log_dir, workers=2)
    yield child, int(url.rsplit(":", 1)[1])
    child.stop()


def listening_workers(server: ChildProcess, port: int) -> list[int]:
    """The server's worker processes that listen on ``port``."""
    return sorted(sockets.holders(children_of(server.pid), port, sockets.LISTEN))


def two_listening(server: ChildProcess, port: int, gone: int | None = None) -> list[int]:
    """Wait until two workers listen on ``port`` (neither of them ``gone``); their pids."""

    def found() -> list[int] | None:
        workers = listening_workers(server, port)
        return workers if len(workers) == 2 and gone not in workers else None

    return wait_until(found, "two workers listening", 60)


def burst(port: int) -> list[socket.socket]:
    """``BURST`` connections opened at once, each answered once (so its worker accepted it),
    left open."""
    opened = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(BURST)]
    request = f"GET /livez HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    for sock in opened:
        sock.sendall(request)
    for sock in opened:
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, f"closed before an answer: {answer!r}"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    return opened


def spread(server: ChildProcess, port: int) -> list[int]:
    """How a burst's connections fell over the workers (most first)."""
    opened = burst(port)
    try:
        held = sockets.holders(children_of(server.pid), port, sockets.ESTABLISHED)
        return sorted(held.values(), reverse=True)
    finally:
        for sock in opened:
            sock.close()


def test_connections_opened_at_once_are_spread_over_the_workers(
    served: tuple[ChildProcess, int],
) -> None:
    server, port = served
    workers = two_listening(server, port)
    # All 16 on one of two workers by chance: 2 in 65,536 per burst.
    splits = [spread(server, port) for _ in range(BURSTS)]
    assert all(len(split) == 2 and sum(split) == BURST for split in splits), (workers, splits)


def test_a_killed_worker_is_replaced_by_one_listening_on_its_own_socket(
    served: tuple[ChildProcess, int],
) -> None:
    server, port = served
    first = two_listening(server, port)
    subprocess.run(["kill", "-9", str(first[0])], check=True)
    replaced = two_listening(server, port, gone=first[0])
    assert first[1] in replaced
    splits = [spread(server, port) for _ in range(BURSTS)]
    assert all(len(split) == 2 for split in splits), (replaced, splits)


def test_a_port_another_process_listens_on_fails_the_start_naming_it(
    clean_stores: Stores,
) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "inner_plane", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "2"],
            env=clean_stores.env(), cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        taken.close()
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr[-2000:]
