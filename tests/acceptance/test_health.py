"""`inner-plane health ...` against real processes: each probe exits 0 with one line while its
part answers, and 1 with one line once it stops (what docker-compose and Kubernetes call)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inner_plane.services.embedded import free_port
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT, Stores

pytestmark = pytest.mark.acceptance

CLI = [sys.executable, "-m", "inner_plane"]


def probe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*CLI, "health", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert len((done.stdout + done.stderr).strip().splitlines()) == 1, done
    return done


def test_health_probes_answer_for_each_part(
    stores: Stores, tmp_path: Path, children: list[ChildProcess]
) -> None:
    api_port, flower_port = free_port(), free_port()
    env = stores.env(
        INNER_PLANE_API_PORT=str(api_port),
        INNER_PLANE_FLOWER_PORT=str(flower_port),
        INNER_PLANE_DATA_DIR=str(tmp_path / "data"),
    )
    worker = ChildProcess("worker", [*CLI, "worker", "periodic"], env, tmp_path).start()
    beat = ChildProcess("beat", [*CLI, "beat"], env, tmp_path).start()
    api = ChildProcess("api", [*CLI, "serve"], env, tmp_path).start()
    flower = ChildProcess("flower", [*CLI, "flower"], env, tmp_path).start()
    children.extend([worker, beat, api, flower])
    worker.wait_for(" ready.", timeout=90)
    beat.wait_for("beat: Starting", timeout=90)
    api.wait_for("Uvicorn running", timeout=90)
    flower.wait_for("Visit me at", timeout=90)

    for args in (
        ("worker", "periodic"),
        ("worker", "--queue", "periodic"),
        ("beat", "--max-age", "30"),
        ("api",),
        ("flower",),
    ):
        for _ in range(10):  # beat may not have ticked yet
            done = probe(env, *args)
            if done.returncode == 0:
                break
            subprocess.run(["sleep", "0.5"], check=True)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert done.stdout.startswith("ok: "), done.stdout

    # No worker of that role on this host.
    done = probe(env, "worker", "signals", "--timeout", "1")
    assert done.returncode == 1 and done.stdout.startswith("unhealthy: worker signals@")
    # The periodic worker does not consume `activation`.
    done = probe(env, "worker", "periodic", "--queue", "activation")
    assert done.returncode == 1 and "does not consume queue 'activation'" in done.stdout

    worker.stop()
    beat.stop()
    api.stop()
    flower.stop()
    assert probe(env, "worker", "periodic", "--timeout", "1").returncode == 1
    assert probe(env, "api", "--timeout", "1").returncode == 1
    assert probe(env, "flower", "--timeout", "1").returncode == 1
    done = probe(env, "beat", "--max-age", "1")
    subprocess.run(["sleep", "1.5"], check=True)
    done = probe(env, "beat", "--max-age", "1")
    assert done.returncode == 1 and done.stdout.startswith("unhealthy: beat: last tick")


def test_health_without_a_plane_says_so_in_one_line(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "INNER_PLANE_DATA_DIR": str(tmp_path / "none"),
    }
    done = probe(env, "beat")
    assert done.returncode == 1
    assert done.stderr.startswith("inner-plane: error: no plane running on ")
    assert not (tmp_path / "none" / "pg").exists()
