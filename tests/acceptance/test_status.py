"""`inner-plane status --json` against a healthy plane, one with its worker down and one with its
database down: the report names each problem with what to do, and the exit code is 0, 1, 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inner_plane.services.embedded import free_port
from tests.support.loaded import run_reporting_loaded
from tests.support.processes import ChildProcess, celery_worker
from tests.support.stores import ROOT, Stores

pytestmark = pytest.mark.acceptance

CLI = [sys.executable, "-m", "inner_plane"]


def status(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [*CLI, "status", "--json", *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def test_status_healthy_then_worker_down_then_database_down(
    clean_stores: Stores, tmp_path: Path, children: list[ChildProcess]
) -> None:
    env = clean_stores.env(INNER_PLANE_DATA_DIR=str(tmp_path / "data"))
    worker = celery_worker(
        "signals", env, tmp_path, queues="signals,activation,user_turns,periodic"
    )
    beat = ChildProcess("beat", [*CLI, "beat"], env, tmp_path)
    children.extend([worker.start(), beat.start()])
    worker.wait_for(" ready.", timeout=90)
    beat.wait_for("beat: Starting", timeout=90)

    code, report = 1, {}
    for _ in range(20):  # until beat's first loop is recorded
        code, report = status(env)
        if code == 0:
            break
        subprocess.run(["sleep", "0.5"], check=True)
    assert code == 0, report
    assert report["state"] == "healthy"
    assert report["stores"]["database"]["reachable"] is True
    assert report["stores"]["database"]["schema"] == report["stores"]["database"]["expected_schema"]
    assert report["stores"]["redis"]["reachable"] is True
    (node,) = report["workers"]
    assert node.startswith("signals@")
    assert set(report["workers"][node]) >= {"signals", "activation", "user_turns", "periodic"}
    assert set(report["queues"]) == {"signals", "activation", "user_turns", "periodic"}
    assert report["beat"]["last_tick_age_s"] < 60
    assert report["journal"]["pending"] == 0 and report["journal"]["dead"] == 0

    # It read the journal (counts, schema) without loading SQLAlchemy: the command starts fast.
    out, loaded = run_reporting_loaded(env, "status", "--json")
    assert json.loads(out)["state"] == "healthy", out
    assert loaded["psycopg"] and not loaded["sqlalchemy"] and not loaded["alembic"]

    # The human form says the same, one fact per line.
    text = subprocess.run(
        [*CLI, "status"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 0 and text.stdout.startswith("plane: healthy\n"), text.stdout

    worker.stop()
    code, report = status(env)
    assert code == 1 and report["state"] == "degraded"
    consumed = [p for p in report["problems"] if "no live worker consumes queue" in p["what"]]
    queues = {p["what"].split("'")[1] for p in consumed}
    assert queues == {"signals", "activation", "user_turns", "periodic"}
    assert all("inner-plane worker" in p["do"] for p in consumed)

    closed = f"postgresql://inner_plane@127.0.0.1:{free_port()}/inner_plane"
    code, report = status({**env, "INNER_PLANE_DATABASE_URL": closed})
    assert code == 2 and report["state"] == "down"
    (down,) = [p for p in report["problems"] if p["severity"] == "down"]
    assert "journal database is unreachable" in down["what"]
    assert "INNER_PLANE_DATABASE_URL" in down["do"]


def test_status_without_a_plane_is_down(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    env["INNER_PLANE_DATA_DIR"] = str(tmp_path / "none")
    code, report = status(env)
    assert code == 2 and report["state"] == "down"
    assert report["problems"][0]["do"] == "start it: `inner-plane up`"
