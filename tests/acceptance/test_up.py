"""`inner-plane up` on a fresh data dir: it starts embedded PostgreSQL and Redis itself, migrates,
supervises a signals worker and Flower, accepts signals through Celery, and on Ctrl-C stops every
process it started."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from inner_plane.services.embedded import free_port
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT

pytestmark = pytest.mark.acceptance


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if text in (entry / "cmdline").read_bytes().decode(errors="replace") and alive(
                int(entry.name)
            ):
                found.append(int(entry.name))
    return found


def wait_gone(pids: set[int], timeout: float = 30.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in pids if alive(pid)}
        if not left:
            return left
        time.sleep(0.1)
    return {pid for pid in pids if alive(pid)}


def plane_processes(data_dir: Path) -> list[int]:
    """Every process started for this data dir (they all inherit INNER_PLANE_DATA_DIR)."""
    marker = f"INNER_PLANE_DATA_DIR={data_dir}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The plane's data dir. Whatever happens in the test, nothing started for it outlives it:
    a failed test must not leave orphaned workers, Redis or PostgreSQL on a shared machine."""
    path = tmp_path / "plane"
    yield path
    leftovers = set(plane_processes(path)) | set(processes_mentioning(str(path)))
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_up_runs_the_plane_and_stops_everything_on_ctrl_c(
    tmp_path: Path, data_dir: Path, children: list[ChildProcess]
) -> None:
    flower_port, api_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    env.update(
        INNER_PLANE_DATA_DIR=str(data_dir),
        INNER_PLANE_FLOWER_PORT=str(flower_port),
        INNER_PLANE_API_PORT=str(api_port),
        # What docker-compose.yml and deploy/ set: Flower reads its options from FLOWER_*.
        FLOWER_BASIC_AUTH="ops:s3cret",
        PYTHONUNBUFFERED="1",
    )
    env.pop("FLOWER_UNAUTHENTICATED_API", None)
    up = ChildProcess("up", [sys.executable, "-m", "inner_plane", "up"], env, tmp_path)
    children.append(up.start())

    up.wait_for("; press Ctrl-C to stop", timeout=150)  # every child answered its probe
    output = up.output()
    assert re.search(r"inner-plane: ready in [\d.]+ s", output)
    assert f"inner-plane: embedded PostgreSQL: {data_dir / 'pg'}" in output
    # Redis listens on a unix socket only (issue 10): nothing on TCP.
    redis_line = re.search(r"inner-plane: embedded Redis: (\S+redis\.sock) \(pid (\d+)\)", output)
    assert redis_line is not None, output
    assert "inner-plane: journal migrated (schema " in output
    started = dict(re.findall(r"inner-plane: started ([\w-]+) \(pid (\d+)\)", output))
    # Later capabilities add processes (activation worker, beat, API); these two are the base.
    assert {"signals-worker", "flower"} <= set(started)
    assert "queue 'signals'" in output
    assert f"http://127.0.0.1:{flower_port}/" in output

    # Flower answers where `up` said it would, behind basic auth (deploy/flower.md).
    flower = f"http://127.0.0.1:{flower_port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            assert httpx.get(f"{flower}/healthcheck", timeout=2).text == "OK"
            break
        except (httpx.HTTPError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    assert httpx.get(f"{flower}/workers", timeout=5).status_code == 401
    assert httpx.get(f"{flower}/api/workers", timeout=5).status_code == 401
    authorized = httpx.get(f"{flower}/workers", auth=("ops", "s3cret"), timeout=10)
    assert authorized.status_code == 200

    # Remember every server process before stopping, to prove none is left behind.
    redis_pid = int(redis_line.group(2))
    postmaster_pid = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
    plane_pids = set(processes_mentioning(str(data_dir)))  # postgres and its backends
    supervised = {int(pid) for pid in started.values()}
    for pid in list(supervised):  # e.g. the prefork pool children of each worker
        with contextlib.suppress(psutil.Error):
            supervised |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
    assert alive(redis_pid) and alive(postmaster_pid)

    # A developer's second terminal: same data dir, no URLs: it attaches to the running servers.
    cli = [sys.executable, "-m", "inner_plane"]
    dedup_key = f"up-{uuid.uuid4().hex[:8]}"
    published = subprocess.run(
        [*cli, "publish", "--kind", "task.completed", "--source", "dev", "--dedup-key", dedup_key,
         "--data", '{"task_id": "T1"}', "--wait", "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    signal_id = json.loads(published.stdout)["id"]
    up.wait_for(f"[inner-context] event=published id={signal_id}", timeout=30)
    assert "via=celery" in up.output().split(f"event=published id={signal_id}", 1)[1][:300]

    shown = subprocess.run(
        [*cli, "signals", "show", signal_id, "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert (record["kind"], record["source"], record["dedup_key"]) == (
        "task.completed",
        "dev",
        dedup_key,
    )
    # The CLI processes only attached: the servers still run for `up`.
    assert alive(redis_pid) and alive(postmaster_pid)

    # Ctrl-C in the terminal running `up`.
    assert up.process is not None
    offset = len(up.output())
    os.kill(up.pid, signal.SIGINT)
    assert up.process.wait(60) == 0
    tail = up.output()[offset:]
    for name in started:
        assert f"inner-plane: stopping {name}" in tail
    # Each child's whole output is in its own file; the console got the state changes.
    assert "Warm shutdown" in (data_dir / "logs" / "signals-worker.log").read_text()
    last = tail.rstrip().splitlines()[-1]
    assert last.startswith("inner-plane: stopped: ")
    assert "embedded Redis" in last and "embedded PostgreSQL" in last

    leftovers = wait_gone({redis_pid, postmaster_pid} | plane_pids | supervised)
    assert not leftovers, f"processes left running: {sorted(leftovers)}"
    assert processes_mentioning(str(data_dir)) == []
    assert plane_processes(data_dir) == []
    assert not (data_dir / "pg" / "postmaster.pid").exists()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{flower_port}/healthcheck", timeout=2)
