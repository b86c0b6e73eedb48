"""Flower sees the signals worker's batched publishes finish: the batching strategy
(workers/batching.py) sends Celery's task events for every message it buffers, so a real Flower
shows each one SUCCESS (a bad one FAILURE) on the worker that journaled it, and counts it in the
worker's processed figure, instead of PENDING with no worker forever."""

from __future__ import annotations

import base64
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inner_plane import celery_bridge
from inner_plane.config import load_settings
from inner_plane.services.embedded import free_port
from tests.support.processes import ChildProcess
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

CLI = [sys.executable, "-m", "inner_plane"]
AUTH = "flower-test:flower-secret"


def flower_get(port: int, path: str) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        headers={"Authorization": "Basic " + base64.b64encode(AUTH.encode()).decode()},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_flower_sees_every_batched_message_complete(
    stores: Stores, tmp_path: Path, children: list[ChildProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    env = stores.env(
        INNER_PLANE_FLOWER_PORT=str(port),
        INNER_PLANE_DATA_DIR=str(tmp_path / "data"),
        INNER_PLANE_INGEST_FLUSH_MS="200",  # several messages per batch
        FLOWER_BASIC_AUTH=AUTH,
    )
    flower = ChildProcess("flower", [*CLI, "flower"], env, tmp_path).start()
    worker = ChildProcess("worker", [*CLI, "worker", "signals"], env, tmp_path).start()
    children.extend([flower, worker])
    flower.wait_for("Visit me at", timeout=90)
    worker.wait_for(" ready.", timeout=90)
    wait_until(lambda: bool(flower_get(port, "/api/workers?refresh=1")), "a worker", 60)

    for name, value in env.items():
        if name.startswith("INNER_PLANE_"):
            monkeypatch.setenv(name, value)
    settings = load_settings()
    good = [
        celery_bridge.send_publish(
            settings, {"kind": "task.completed", "source": "ci", "dedup_key": f"flower-{n}"}
        )
        for n in range(5)
    ]
    bad = celery_bridge.send_publish(settings, {"kind": "not namespaced", "source": "ci"})

    def states() -> dict[str, dict[str, Any]]:
        tasks: dict[str, dict[str, Any]] = flower_get(port, "/api/tasks")
        return {task_id: tasks.get(task_id, {}) for task_id in [*good, bad]}

    final = {"SUCCESS", "FAILURE", "REJECTED"}
    wait_until(lambda: all(t.get("state") in final for t in states().values()), "final states", 90)
    seen = states()
    for task_id in good:
        assert seen[task_id]["state"] == "SUCCESS", seen[task_id]
        assert str(seen[task_id]["worker"]).startswith("signals@"), seen[task_id]
        assert seen[task_id]["received"] and seen[task_id]["started"], seen[task_id]
    assert seen[bad]["state"] in {"FAILURE", "REJECTED"}, seen[bad]
    assert "namespaced kind" in str(seen[bad].get("exception")), seen[bad]
    # Flower's processed count is its count of task-received events, per worker (its /metrics).
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        scrape = response.read().decode()
    received = sum(
        sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name == "flower_events_total"
        and sample.labels.get("type") == "task-received"
        and sample.labels.get("worker", "").startswith("signals@")
    )
    assert received == 6, scrape
