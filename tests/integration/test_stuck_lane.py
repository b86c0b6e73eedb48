"""A lane is stuck only when work that should have started an activation waits: due `wake` (or
`interrupt`) signals and no lease. A lane holding only `next-turn` signals waits for the next
activation by design; `inner-plane status` and /metrics (the alert's input) agree on both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from inner_plane import publish_many
from inner_plane.http.app import create_app
from inner_plane.runtime import Runtime
from inner_plane.services.status import DEGRADED, Targets, collect


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


def _publish_waiting(runtime: Runtime, delegate: str, mode: str, minutes: int) -> None:
    publish_many(
        [{"kind": "task.completed", "source": "ci", "delegate_id": delegate, "mode": mode}],
        runtime=runtime,
    )
    with runtime.engine.begin() as connection:  # as if it had waited that long
        connection.execute(
            text(
                "UPDATE signals SET created_at = now() - make_interval(mins => :m), "
                "available_at = now() - make_interval(mins => :m) WHERE delegate_id = :d"
            ),
            {"m": minutes, "d": delegate},
        )


def _idle_gauges(client: TestClient) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        sample.labels["delegate"]: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "inner_plane_lane_idle_with_due_work"
    }


def _stuck_problems(runtime: Runtime) -> list[str]:
    report = collect(Targets(settings=runtime.settings, api_url=None, flower_url=None))
    return [p.what for p in report.problems if p.what.startswith("lane ")]


def test_next_turn_only_is_not_stuck_a_due_wake_is(runtime: Runtime, client: TestClient) -> None:
    _publish_waiting(runtime, "quiet", "next-turn", minutes=30)
    assert _idle_gauges(client) == {"quiet": 0}
    assert _stuck_problems(runtime) == []

    _publish_waiting(runtime, "woken", "wake", minutes=10)
    assert _idle_gauges(client) == {"quiet": 0, "woken": 1}
    (problem,) = _stuck_problems(runtime)
    assert problem.startswith("lane 'woken' has 1 due waking signal(s) waiting")
    report = collect(Targets(settings=runtime.settings, api_url=None, flower_url=None))
    assert DEGRADED in {p.severity for p in report.problems}
    # The lane with waking work is listed first, whatever the other lanes' backlog.
    assert [lane["delegate_id"] for lane in report.public()["lanes"]] == ["woken", "quiet"]


def test_a_recent_wake_or_a_held_lease_is_not_stuck(runtime: Runtime, client: TestClient) -> None:
    _publish_waiting(runtime, "fresh", "wake", minutes=0)
    assert _stuck_problems(runtime) == []  # idle, but within the 2 minutes a wake may take
    assert _idle_gauges(client) == {"fresh": 1}
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO leases (delegate_id, holder, epoch, expires_at) "
                "VALUES ('fresh', 'worker-1', 1, now() + interval '1 minute') "
                "ON CONFLICT (delegate_id) DO UPDATE SET holder = 'worker-1', "
                "expires_at = now() + interval '1 minute'"
            )
        )
    assert _idle_gauges(client) == {"fresh": 0}
