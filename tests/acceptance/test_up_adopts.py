"""`inner-plane up` adopts the embedded stores already running on its data dir, with real
processes: it neither starts a second server on the socket nor restarts or wipes the one there.

Redis and PostgreSQL are started outside any `up` (as servers an `up` killed with -9 had adopted
are left running: not its children, they outlive it), Redis with data of its own. `up` adopts each
in one `!!` line and the plane runs on them; `up` is then killed with -9, the servers live on,
with a wake queued while no plane ran, and a second `up` adopts the same servers again and
delivers that wake. Ctrl-C stops the adopted servers with the plane, like its own.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from inner_plane.services.embedded_postgres import EmbeddedPostgres
from inner_plane.services.embedded_redis import EmbeddedRedis
from inner_plane.services.plane import pid_alive
from tests.acceptance.test_up import data_dir, wait_gone
from tests.support.chaos import Plane, send_wake, signal_state, wait_delivered

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.chaos,
    pytest.mark.slow(reason="two planes started one after the other: over 60 s under load"),
    pytest.mark.timeout(900),
]
__all__ = ["data_dir"]  # the fixture: nothing started for the data dir outlives the test

DELEGATE = "adopted"


def adoption_lines(plane: Plane, store: str) -> list[str]:
    return [
        line
        for line in plane.alarms()
        if f"!! embedded {store} (pid" in line and "was already running on this data dir" in line
    ]


def test_up_adopts_running_stores_twice_and_keeps_their_data(
    tmp_path: Path, data_dir: Path
) -> None:
    outside = EmbeddedRedis(data_dir, persistent=True)
    outside.start()
    pid = outside.pid
    assert pid is not None
    client = redis.Redis(unix_socket_path=str(outside.socket), socket_timeout=5)
    client.set("left-by-an-earlier-owner", "kept")
    postgres = EmbeddedPostgres(data_dir, persistent=True)
    postgres.start()
    postmaster = postgres.pid
    assert postmaster is not None

    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Plane.start(data_dir, tmp_path / "first", ready_s=300)
    try:
        [line] = adoption_lines(first, "Redis")
        assert f"!! embedded Redis (pid {pid}) was already running" in line, line
        assert "adopting it" in line and str(outside.socket) in line, line
        [line] = adoption_lines(first, "PostgreSQL")
        assert f"(pid {postmaster}) was already running" in line, line
        assert EmbeddedRedis(data_dir).servers_on_socket() == [pid]  # no second server
        assert first.postmaster() == postmaster
        assert client.get("left-by-an-earlier-owner") == b"kept"  # not wiped
        delivered = send_wake(first, DELEGATE)
        wait_delivered(first, delivered, timeout=120)

        # kill -9 of `up`: its own children go with it; the adopted Redis is not one of them.
        process = first.up.process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        assert pid_alive(pid) and pid_alive(postmaster)
        queued = send_wake(first, DELEGATE)  # the broker (this Redis) holds it; no plane runs
    finally:
        first.close()

    second = Plane.start(data_dir, tmp_path / "second", ready_s=300)
    try:
        [line] = adoption_lines(second, "Redis")
        assert f"!! embedded Redis (pid {pid}) was already running" in line, line
        assert len(adoption_lines(second, "PostgreSQL")) == 1
        assert EmbeddedRedis(data_dir).servers_on_socket() == [pid]
        assert second.postmaster() == postmaster
        assert client.get("left-by-an-earlier-owner") == b"kept"
        assert signal_state(second.engine, delivered) == "delivered"  # the journal as it was
        wait_delivered(second, queued, timeout=120)  # queued while no plane ran: still there
        # Ctrl-C: the adopted servers are stopped with the plane, named like its own.
        assert second.stop() == 0
        stopped = second.supervisor_lines()[-1]
        assert f"embedded Redis (pid {pid})" in stopped, stopped
        assert f"embedded PostgreSQL (pid {postmaster})" in stopped, stopped
        assert wait_gone({pid, postmaster}) == set()
    finally:
        second.close()
