"""The runtime's Redis client is made on first use, once per process, whatever the threads.

A server's threadpool touches it from many threads at its first requests. Made twice, one
client was dropped while a thread still used its connection, and the dropped client's close()
disconnected that connection mid-command (``'NoneType' object has no attribute 'readline'``)."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Iterator

import pytest
import redis

from inner_plane.runtime import Runtime

pytestmark = pytest.mark.integration

THREADS = 32


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Switch threads every microsecond, so a check-then-set without a lock is interleaved."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def first_requests(fresh: Runtime, tag: str) -> tuple[list[redis.Redis], list[BaseException]]:
    """THREADS threads released at once, each taking the client and sending a pipeline."""
    start = threading.Barrier(THREADS)
    clients: list[redis.Redis] = []
    failures: list[BaseException] = []

    def first_request(n: int) -> None:
        start.wait()
        try:
            client = fresh.redis
            clients.append(client)
            # The auth throttle's shape: a pipeline on the pool, not holding the client.
            with client.pipeline(transaction=False) as pipe:
                pipe.set(f"runtime-test:{tag}:{n}", n)
                pipe.get(f"runtime-test:{tag}:{n}")
                assert pipe.execute() == [True, str(n)]
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=first_request, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return clients, failures


def test_threads_at_first_use_share_one_client_and_every_command_answers(
    runtime: Runtime, frequent_switches: None
) -> None:
    for attempt in range(5):
        fresh = dataclasses.replace(runtime, _redis=None)
        clients, failures = first_requests(fresh, str(attempt))
        assert failures == [], f"attempt {attempt}: {failures[:3]}"
        assert len(clients) == THREADS
        assert len({id(client) for client in clients}) == 1, f"attempt {attempt}: several clients"
        assert fresh.redis is clients[0]
