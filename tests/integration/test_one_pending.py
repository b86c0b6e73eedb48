"""One definition of "pending" (``journal.predicates.pending``): on a journal holding an ambient,
a due, a delayed and a backing-off signal, `status`, the dashboard's row, the overview API, the
pending-depth chart and /metrics all count the same three, and the ambient one apart."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.cli import app, common
from inner_plane.http.app import create_app
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.kinds import KindPolicy
from inner_plane.signals.model import Mode
from tests.support.lane_journal import run_lane

FLAKY = "test.flaky"


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(lambda: runtime, bind_host="127.0.0.1")) as test_client:
        yield test_client


def mixed_journal(runtime: Runtime) -> None:
    """Backing off (failed once, its next attempt minutes away), then ambient, due and delayed."""
    rt = replace(
        runtime,
        settings=runtime.settings.model_copy(
            update={
                "batch_quiet_ms": 0,
                "batch_max_age_ms": 0,
                "retry_base_s": 600.0,
                "retry_max_s": 600.0,
            }
        ),
    )
    rt.registry.register(KindPolicy(FLAKY, Mode.WAKE, 50, max_attempts=5))
    backing_off = publish(kind=FLAKY, source="copilot", runtime=rt).id
    run_lane(rt, ScriptedAgent({"fail_kinds": [FLAKY]}))
    stored = rt.signals.get(backing_off)
    assert stored is not None and stored.state.value == "pending" and stored.attempts == 1
    assert stored.available_at > datetime.now(UTC) + timedelta(seconds=20)
    publish(kind="memory.inserted", source="memory", runtime=rt)  # ambient
    publish(kind="task.completed", source="copilot", data={"n": 1}, runtime=rt)  # due
    publish(
        kind="task.completed",
        source="copilot",
        data={"n": 2},
        available_at=datetime.now(UTC) + timedelta(hours=1),
        runtime=rt,
    )  # delayed


def test_status_dashboard_api_chart_and_metrics_agree_on_pending(
    runtime: Runtime, client: TestClient
) -> None:
    mixed_journal(runtime)

    overview = client.get("/v1/delegates/default").json()
    assert overview["counts"]["pending"] == 3
    assert overview["counts"]["ambient"] == 1
    assert overview["counts"]["due_now"] == 1
    assert overview["oldest_pending_age_s"] is not None

    row = client.get("/ui/overview").text
    assert re.search(r'data-col="pending"[^>]*>(?:<a [^>]*>)?\s*3\b', row), row
    assert re.search(r'data-col="ambient"[^>]*>\s*1\b', row), row

    depth = client.get("/v1/delegates/default/charts").json()["pending_depth"]
    assert depth[-1]["pending"] == 3

    metrics = client.get("/metrics").text
    assert re.search(r'^inner_plane_signals\{state="pending"\} 3\.0$', metrics, re.M), metrics

    common._runtime = None
    try:
        status = CliRunner().invoke(app, ["status"], catch_exceptions=False)
    finally:
        common._runtime = None
    line = next(x for x in status.stdout.splitlines() if x.startswith("signals:"))
    assert line.startswith("signals: 3 pending (1 due)"), line
    assert "1 ambient retained" in line
    assert "oldest pending none" not in line and "oldest pending never" not in line
