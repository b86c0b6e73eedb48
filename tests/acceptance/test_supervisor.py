"""The supervisor behind `inner-plane up`, with stand-in children: however `up` ends (Ctrl-C,
SIGTERM from a service manager, a closed terminal, kill -9), no child outlives it."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import ChildProcess

pytestmark = pytest.mark.acceptance

SUPERVISE = """
import os, sys
from pathlib import Path
from inner_plane.services.processes import ProcessSpec
from inner_plane.services.supervisor import Supervisor
specs = [ProcessSpec("sleeper-%d" % i, ["sleep", "300"], "nowhere") for i in range(2)]
specs.append(ProcessSpec("crasher", [sys.executable, "-c", "raise SystemExit(3)"], "nowhere"))
log_dir = Path(sys.argv[1])
raise SystemExit(Supervisor(specs, dict(os.environ), log_dir, probe=lambda child: True).run())
"""


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def start(tmp_path: Path, children: list[ChildProcess]) -> tuple[ChildProcess, list[int]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [sys.executable, "-c", SUPERVISE, str(tmp_path / "logs")]
    supervisor = ChildProcess("supervisor", command, env, tmp_path)
    children.append(supervisor.start())
    supervisor.wait_for("started sleeper-1", timeout=30)
    pids = [int(p) for p in re.findall(r"started sleeper-\d \(pid (\d+)\)", supervisor.output())]
    assert len(pids) == 2 and all(running(p) for p in pids)
    return supervisor, pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=str)
def test_stop_signals_stop_every_child(
    tmp_path: Path, children: list[ChildProcess], sig: signal.Signals
) -> None:
    supervisor, pids = start(tmp_path, children)
    os.kill(supervisor.pid, sig)
    assert supervisor.process is not None and supervisor.process.wait(30) == 0
    assert wait_gone(pids) == []
    output = supervisor.output()
    assert (
        "inner-plane: stopping sleeper-0" in output and "inner-plane: stopping sleeper-1" in output
    )
    # Shutdown lists what it stopped.
    last = output.rstrip().splitlines()[-1]
    assert last.startswith("inner-plane: stopped: ")
    assert all(f"(pid {pid})" in last for pid in pids)


def test_children_die_with_a_killed_supervisor(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    supervisor, pids = start(tmp_path, children)
    os.kill(supervisor.pid, signal.SIGKILL)  # no chance to stop anything itself
    assert wait_gone(pids) == [], "orphaned children kept running"


def test_a_child_that_dies_is_restarted_with_backoff(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    supervisor, _ = start(tmp_path, children)
    supervisor.wait_for("inner-plane: crasher exited with 3; restarting it in 1 s", timeout=10)
    # Started again after the back-off, and the healthy children were left alone.
    deadline = time.monotonic() + 10
    while supervisor.output().count("started crasher") < 2:
        assert time.monotonic() < deadline, supervisor.output()
        time.sleep(0.05)
    assert supervisor.output().count("started sleeper-0") == 1
    os.kill(supervisor.pid, signal.SIGINT)
    assert supervisor.process is not None and supervisor.process.wait(30) == 0
