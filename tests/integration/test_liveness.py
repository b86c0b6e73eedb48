"""Liveness probes (`inner-plane health ... --live`, the API's /livez) fail only for the process
itself: with every store down they pass, where the readiness form of the same probe fails. A
store outage must not get every pod of the plane restarted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from inner_plane.http.app import create_app
from inner_plane.services.embedded import free_port
from tests.support.stores import ROOT

CLI = [sys.executable, "-m", "inner_plane", "health"]


def _env(tmp_path: Path) -> dict[str, str]:
    dead = free_port()  # nothing listens there
    keep = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    return {
        **keep,
        "INNER_PLANE_DATABASE_URL": f"postgresql://inner:plane@127.0.0.1:{dead}/inner_plane",
        "INNER_PLANE_REDIS_URL": f"redis://127.0.0.1:{dead}/0",
        "INNER_PLANE_DATA_DIR": str(tmp_path / "data"),
        "INNER_PLANE_API_PORT": str(dead),
    }


def probe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_with_the_stores_down_liveness_passes_and_readiness_fails(tmp_path: Path) -> None:
    env = _env(tmp_path)
    for args in (
        ("worker", "signals", "--queue", "signals", "--timeout", "1"),
        ("beat", "--max-age", "120"),
    ):
        ready = probe(env, *args)
        assert ready.returncode == 1 and ready.stdout.startswith("unhealthy: "), ready
        live = probe(env, *args, "--live")
        assert live.returncode == 0 and live.stdout.startswith("ok: "), live
        assert "unreachable" in live.stdout


def test_the_api_is_live_while_its_journal_is_down() -> None:
    def journal_down() -> object:
        from sqlalchemy.exc import OperationalError

        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    app = create_app(journal_down, bind_host="127.0.0.1")  # type: ignore[arg-type]
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 503  # readiness: not ready
        live = client.get("/livez")
        assert live.status_code == 200 and live.json() == {"status": "ok"}
