"""`inner-plane up` adopts an embedded store already running on its data dir, with real
processes: it neither starts a second server on the socket nor restarts or wipes the one there.

The Redis is started outside any `up` (as one an `up` killed with -9 had adopted is left
running: not its child, it outlives it), with data of its own. `up` adopts it in one `!!` line
and the plane runs on it; `up` is then killed with -9, the Redis lives on with a wake queued while
no plane ran, and a second `up` adopts the same server again and delivers that wake. Ctrl-C stops
the adopted server with the plane, like its own.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from inner_plane.services.embedded_redis import EmbeddedRedis
from inner_plane.services.plane import pid_alive
from tests.acceptance.test_up import data_dir, wait_gone
from tests.support.chaos import Plane, send_wake, wait_delivered

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.chaos,
    pytest.mark.slow,  # two planes started one after the other: over 60 s on a loaded machine
    pytest.mark.timeout(900),
]
__all__ = ["data_dir"]  # the fixture: nothing started for the data dir outlives the test

DELEGATE = "adopted"


def adoption_lines(plane: Plane) -> list[str]:
    return [line for line in plane.alarms() if "was already running on this data dir" in line]


def test_up_adopts_a_running_redis_twice_and_keeps_its_data(tmp_path: Path, data_dir: Path) -> None:
    outside = EmbeddedRedis(data_dir, persistent=True)
    outside.start()
    pid = outside.pid
    assert pid is not None
    client = redis.Redis(unix_socket_path=str(outside.socket), socket_timeout=5)
    client.set("left-by-an-earlier-owner", "kept")

    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Plane.start(data_dir, tmp_path / "first", ready_s=300)
    try:
        [line] = adoption_lines(first)
        assert f"!! embedded Redis (pid {pid}) was already running" in line, line
        assert "adopting it" in line and str(outside.socket) in line, line
        assert EmbeddedRedis(data_dir).servers_on_socket() == [pid]  # no second server
        assert client.get("left-by-an-earlier-owner") == b"kept"  # not wiped
        wait_delivered(first, send_wake(first, DELEGATE), timeout=120)

        # kill -9 of `up`: its own children go with it; the adopted Redis is not one of them.
        process = first.up.process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        assert pid_alive(pid)
        queued = send_wake(first, DELEGATE)  # the broker (this Redis) holds it; no plane runs
    finally:
        first.close()

    second = Plane.start(data_dir, tmp_path / "second", ready_s=300)
    try:
        [line] = adoption_lines(second)
        assert f"!! embedded Redis (pid {pid}) was already running" in line, line
        assert EmbeddedRedis(data_dir).servers_on_socket() == [pid]
        assert client.get("left-by-an-earlier-owner") == b"kept"
        wait_delivered(second, queued, timeout=120)  # queued while no plane ran: still there
        # Ctrl-C: the adopted server is stopped with the plane, named like its own.
        assert second.stop() == 0
        assert f"embedded Redis (pid {pid})" in second.supervisor_lines()[-1]
        assert wait_gone({pid}) == set()
    finally:
        second.close()
