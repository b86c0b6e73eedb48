"""`inner-plane up` tells the truth, under faults, with real processes:

- a port taken: it exits non-zero naming the port and its variable, and starts nothing;
- `ready` means a wake published right then is delivered;
- an idle plane is quiet on the console;
- kill -9 of the embedded Redis, then of the embedded PostgreSQL: each comes back on the same
  socket, and signals published before and after are delivered;
- while the plane's Redis does not answer, CLI commands start no server of their own and each
  says so in one line;
- the workers, beat and Flower killed three times each, and PostgreSQL restarted, then Ctrl-C:
  nothing is left running, PostgreSQL included.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from inner_plane.journal.plain import sqlalchemy_url
from inner_plane.services.embedded import free_port
from inner_plane.services.plane import read_state
from tests.acceptance.test_up import alive, data_dir, plane_processes, processes_mentioning
from tests.acceptance.test_up import wait_gone as wait_gone_pids
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT

pytestmark = pytest.mark.acceptance
__all__ = ["data_dir"]  # the fixture: nothing started for the data dir outlives the test

CLI = [sys.executable, "-m", "inner_plane"]
SETTLED = {"delivered", "dismissed"}


def plane_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    env.update(
        INNER_PLANE_DATA_DIR=str(data_dir),
        INNER_PLANE_API_PORT=str(free_port()),
        INNER_PLANE_FLOWER_PORT=str(free_port()),
        INNER_PLANE_SWEEP_INTERVAL_S="2",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def publish_wake(env: dict[str, str], tag: str) -> str:
    done = cli(
        env, "publish", "--kind", "task.completed", "--source", "faults", "--mode", "wake",
        "--delegate", f"d-{tag}", "--data", json.dumps({"tag": tag}), "--wait", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def journaled_state(env: dict[str, str], signal_id: str) -> str | None:
    """The signal's state in the plane's journal (None while it is not there, or the database
    does not answer): one query on a connection of its own, not a CLI process per look."""
    state = read_state(Path(env["INNER_PLANE_DATA_DIR"]))
    if state is None:
        return None
    engine = create_engine(
        sqlalchemy_url(state.database_url), poolclass=NullPool, connect_args={"connect_timeout": 5}
    )
    try:
        with engine.connect() as connection:
            found = connection.execute(
                text("SELECT state FROM signals WHERE id = :id"), {"id": signal_id}
            ).scalar()
            return None if found is None else str(found)
    except Exception:
        return None
    finally:
        engine.dispose()


def wait_settled(env: dict[str, str], signal_id: str, timeout: float = 90) -> dict[str, object]:
    """Until `signals show` says the signal is delivered or dismissed. The journal is watched
    until then (each CLI process costs about a second of CPU), and the CLI has the last word."""
    deadline = time.monotonic() + timeout
    while journaled_state(env, signal_id) not in SETTLED and time.monotonic() < deadline:
        time.sleep(0.1)
    record: dict[str, object] = {}
    while time.monotonic() < deadline:
        shown = cli(env, "signals", "show", signal_id, "--json")
        if shown.returncode == 0:
            record = json.loads(shown.stdout)
            if record["state"] in SETTLED:
                return record
        time.sleep(0.5)
    raise AssertionError(f"signal {signal_id} not delivered within {timeout} s: {record}")


def started_pid(output: str, name: str) -> int:
    return int(re.findall(rf"inner-plane: started {name} \(pid (\d+)\)", output)[-1])


def test_a_taken_port_fails_naming_it_and_starts_nothing(data_dir: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = plane_env(data_dir, INNER_PLANE_FLOWER_PORT=str(port))
        done = cli(env, "up", timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"inner-plane: error: port {port} (INNER_PLANE_FLOWER_PORT) is in use: stop what holds "
        "it, set INNER_PLANE_FLOWER_PORT, or run `inner-plane up --auto-ports`"
    ]
    assert "started" not in done.stdout
    assert plane_processes(data_dir) == [] and processes_mentioning(str(data_dir)) == []
    assert not (data_dir / "pg").exists()


# A long scenario (start, 30 s of idle, two store faults with their recoveries, nine restarts
# with backoff): on two shared cores under load it outgrows the suite's 300 s per test.
@pytest.mark.slow(reason="one plane through 30 s of idle, two store faults and nine restarts")
@pytest.mark.timeout(900)
def test_up_under_faults(tmp_path: Path, data_dir: Path, children: list[ChildProcess]) -> None:
    env = plane_env(data_dir)
    up = ChildProcess("up", [*CLI, "up"], env, tmp_path)
    children.append(up.start())
    up.wait_for("; press Ctrl-C to stop", timeout=240)
    assert re.search(r"inner-plane: ready in [\d.]+ s", up.output())

    # Ready means ready: a wake published right now is delivered.
    first = publish_wake(env, "ready")
    wait_settled(env, first)

    # Idle: at most 10 console lines a minute (measured over 30 s: at most 5).
    mark = len(up.output().splitlines())
    time.sleep(30)
    idle_lines = up.output().splitlines()[mark:]
    assert len(idle_lines) <= 5, idle_lines

    # kill -9 of the embedded Redis: it comes back on the same socket, loudly.
    redis_line = re.search(r"embedded Redis: (\S+) \(pid (\d+)\)", up.output())
    assert redis_line is not None
    redis_socket, redis_pid = redis_line.group(1), int(redis_line.group(2))
    before = publish_wake(env, "before-redis")
    offset = len(up.output())
    os.kill(redis_pid, signal.SIGKILL)
    up.wait_for("!! embedded Redis is back", timeout=60, after=offset)
    assert f"restarting it on {redis_socket}" in up.output()[offset:]
    after = publish_wake(env, "after-redis")
    for signal_id in (before, after):
        wait_settled(env, signal_id)

    # The plane's Redis not answering (stopped, so `up` does not replace it): four concurrent
    # CLI commands each say so in one line and start no server of their own.
    servers_before = set(processes_mentioning(str(data_dir)))
    new_redis = int(re.findall(r"embedded Redis is back \(pid (\d+)\)", up.output())[-1])
    os.kill(new_redis, signal.SIGSTOP)
    try:
        commands = [
            ("publish", "--kind", "task.completed", "--source", "faults"),
            ("publish", "--kind", "task.completed", "--source", "faults", "--direct"),
            ("signals", "list"),
            ("timers", "list"),
        ]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda args: cli(env, *args), commands))
        servers_during = set(processes_mentioning(str(data_dir)))
    finally:
        os.kill(new_redis, signal.SIGCONT)
    for args, done in zip(commands, results, strict=True):
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.splitlines() == [
            "inner-plane: error: the plane's Redis is down (`inner-plane up` restarts it; "
            "retry in a moment)"
        ], (args, done.stderr)
    started_meanwhile = {
        pid for pid in servers_during - servers_before if "redis-server" in _cmd(pid)
    } | {pid for pid in servers_during - servers_before if "postgres -D" in _cmd(pid)}
    assert started_meanwhile == set()

    # kill -9 of the embedded PostgreSQL (the postmaster): it comes back on the same socket.
    postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
    before = publish_wake(env, "before-pg")
    offset = len(up.output())
    os.kill(postmaster, signal.SIGKILL)
    up.wait_for("!! embedded PostgreSQL is back", timeout=90, after=offset)
    after = publish_wake(env, "after-pg")
    for signal_id in (before, after):
        wait_settled(env, signal_id)

    # The workers, beat and Flower killed three times each: restarted each time.
    for _ in range(3):
        for name in ("signals-worker", "beat", "flower"):
            pid = started_pid(up.output(), name)
            count = up.output().count(f"started {name} (pid")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while up.output().count(f"started {name} (pid") == count:
                assert time.monotonic() < deadline, up.output()[-3000:]
                time.sleep(0.2)

    # Ctrl-C: everything stops, PostgreSQL included, and the last line lists what stopped.
    postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
    everything = set(plane_processes(data_dir)) | set(processes_mentioning(str(data_dir)))
    assert alive(postmaster)
    assert up.process is not None
    os.kill(up.pid, signal.SIGINT)
    assert up.process.wait(90) == 0
    last = up.output().rstrip().splitlines()[-1]
    assert last.startswith("inner-plane: stopped: ") and "embedded PostgreSQL" in last, last
    assert wait_gone_pids(everything | {postmaster}) == set()
    assert processes_mentioning(str(data_dir)) == [] and plane_processes(data_dir) == []
    assert not (data_dir / "plane.json").exists()


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
