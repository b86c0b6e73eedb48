"""The operator API against a journal filled by the real lane: every read endpoint, the actions
with the operator's identity, and operator auth (401 without, 403 with a processor's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from inner_plane import operators
from inner_plane.http.app import create_app
from inner_plane.runtime import Runtime
from inner_plane.timeline import replay
from tests.support.lane_journal import POISON, Filled, fill


@pytest.fixture
def filled(runtime: Runtime) -> Filled:
    return fill(runtime)


@pytest.fixture
def operator_token(runtime: Runtime) -> str:
    _operator, token = operators.add(runtime, "alice")
    return token


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def all_pages(client: TestClient, path: str, headers: dict[str, str], **params: Any) -> list[Any]:
    items: list[Any] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        body = client.get(path, params=query, headers=headers).json()
        items.extend(body["items"])
        cursor = body["next"]
        if cursor is None:
            return items


def test_every_read_endpoint_on_a_journal_the_lane_filled(
    runtime: Runtime, filled: Filled, client: TestClient, operator_token: str
) -> None:
    h = auth(operator_token)

    [overview] = client.get("/v1/delegates", headers=h).json()["items"]
    assert overview["delegate_id"] == "default"
    assert overview["lane"]["state"] == "idle" and overview["lane"]["epoch"] >= 1
    assert overview["counts"]["dead"] == 1 and overview["counts"]["claimed"] == 0
    assert overview["wake_budget"]["used"] == 2  # the background run and the failed one
    assert overview["last_activation"]["id"] == str(filled.failed)
    assert overview["next_timer_due_at"] is not None
    one = client.get("/v1/delegates/default", headers=h).json()
    # Only an ambient memory is pending: retained, not waiting for delivery (predicates.pending).
    assert one["counts"]["pending"] == 0 and one["counts"]["ambient"] >= 1
    assert one["oldest_pending_age_s"] is None
    assert one == overview

    # The timeline: the same entries in the same order as replay, in pages.
    replayed = replay(runtime.engine, "default")
    page = client.get("/v1/delegates/default/timeline", headers=h, params={"limit": 3}).json()
    assert [e["seq"] for e in page["entries"]] == [e["seq"] for e in replayed[-3:]]
    older = client.get(
        "/v1/delegates/default/timeline", headers=h, params={"before": page["older"]}
    ).json()
    assert older["entries"] + page["entries"] == replayed
    after = client.get(
        "/v1/delegates/default/timeline", headers=h, params={"after": 0, "limit": 500}
    ).json()
    assert after["entries"] == replayed
    assert "user" not in {e["role"] for e in replayed if e["type"] != "user.message"}

    activations = all_pages(client, "/v1/delegates/default/activations", h, limit=1)
    assert [a["id"] for a in activations] == [
        str(filled.failed),
        str(filled.turn_activation),
        str(filled.background),
    ]

    detail = client.get(f"/v1/activations/{filled.background}", headers=h).json()
    [claimed] = detail["batch"]
    assert claimed["id"] == str(filled.background_signal)
    for key in ("kind", "source", "mode", "priority", "attempts", "created_at", "data", "trust"):
        assert key in claimed
    assert claimed["data"] == {"task_id": "T1"} and claimed["state"] == "delivered"
    assert [e["event"] for e in claimed["events"]] == ["claimed", "acted"]
    assert "task.completed" in detail["envelope"]
    flow = detail["thoughtflow"]
    assert flow["decision"] == "scripted" and flow["duration_ms"] >= 0
    assert flow["dispositions"][str(filled.background_signal)]["disposition"] == "acted"
    assert detail["events"][0]["type"] == "inner.activation.started"
    failed = client.get(f"/v1/activations/{filled.failed}", headers=h).json()
    assert "scripted failure" in failed["activation"]["error"]
    assert failed["thoughtflow"]["error"] == failed["activation"]["error"]

    dead = client.get("/v1/dead-letters", headers=h).json()["items"]
    assert [d["id"] for d in dead] == [str(filled.dead_signal)]
    assert dead[0]["events"][-1]["event"] == "dead"

    found = client.get(
        "/v1/signals", headers=h, params={"kind_prefix": "task.", "delegate": "default"}
    ).json()["items"]
    assert [s["id"] for s in found] == [str(filled.background_signal)]
    assert found[0]["events"]
    everything = all_pages(client, "/v1/signals", h, limit=1)
    assert len(everything) == 4  # task, note, poison, and the memory's inserted signal
    assert [s["seq"] for s in everything] == sorted((s["seq"] for s in everything), reverse=True)
    by_source = client.get("/v1/signals", headers=h, params={"source": "notes"}).json()
    assert [s["id"] for s in by_source["items"]] == [str(filled.attached_signal)]
    future = client.get(
        "/v1/signals", headers=h, params={"since": "2999-01-01T00:00:00+00:00"}
    ).json()
    assert future["items"] == []
    assert client.get("/v1/signals", headers=h, params={"state": "dead"}).json()["items"] == dead
    one = client.get(f"/v1/signals/{filled.dead_signal}/detail", headers=h).json()
    assert one["state"] == "dead" and one["kind"] == POISON

    [timer] = client.get("/v1/timers", headers=h).json()["items"]
    assert timer["id"] == str(filled.timer_id) and timer["name"] == "review"
    memories = client.get("/v1/memories", headers=h).json()["items"]
    assert [m["content"] for m in memories] == ["when a task completes, tell the user"]
    [processor] = client.get("/v1/processors", headers=h).json()["items"]
    assert processor["name"] == "ci"
    assert not {"secret_hash", "signing_key", "secret"} & set(processor)
    assert filled.processor_secret not in client.get("/v1/processors", headers=h).text

    charts = client.get("/v1/delegates/default/charts", headers=h).json()
    assert sum(p["count"] for p in charts["signals_per_minute"]) == 4
    assert len(charts["activation_durations"]) == 3
    assert len(charts["pending_depth"]) == 60

    schema = client.get("/openapi.json").json()
    for path in (
        "/v1/delegates",
        "/v1/delegates/{delegate_id}/timeline",
        "/v1/activations/{activation_id}",
        "/v1/signals",
        "/v1/dead-letters",
        "/v1/timers",
        "/v1/memories",
        "/v1/processors",
        "/v1/events",
        "/v1/signals/{signal_id}/retry",
    ):
        assert path in schema["paths"], path


def test_bad_parameters_name_the_field(client: TestClient, operator_token: str) -> None:
    h = auth(operator_token)
    cursor = client.get("/v1/signals", headers=h, params={"cursor": "nope"})
    assert cursor.status_code == 422 and cursor.json()["field"] == "cursor"
    naive = client.get("/v1/signals", headers=h, params={"since": "2026-01-01T00:00:00"})
    assert naive.status_code == 422 and naive.json()["field"] == "since"
    state = client.get("/v1/signals", headers=h, params={"state": "lost"})
    assert state.status_code == 422 and "state" in state.text
    bad_id = client.get("/v1/activations/nope", headers=h)
    assert bad_id.status_code == 422 and bad_id.json()["field"] == "activation_id"
    missing = client.get(f"/v1/activations/{uuid.uuid4()}", headers=h)
    assert missing.status_code == 404


def test_operator_actions_are_recorded_with_the_operator(
    runtime: Runtime, filled: Filled, client: TestClient, operator_token: str
) -> None:
    h = auth(operator_token)
    retried = client.post(f"/v1/signals/{filled.dead_signal}/retry", headers=h)
    assert retried.status_code == 200, retried.text
    assert retried.json()["operator"] == "alice"
    again = client.post(f"/v1/signals/{filled.dead_signal}/retry", headers=h)
    assert again.status_code == 409
    assert client.post(f"/v1/signals/{uuid.uuid4()}/retry", headers=h).status_code == 404

    dismissed = client.post(
        f"/v1/signals/{filled.dead_signal}/dismiss", headers=h, json={"reason": "noise"}
    )
    assert dismissed.status_code == 200, dismissed.text
    empty_reason = client.post(
        f"/v1/signals/{filled.dead_signal}/dismiss", headers=h, json={"reason": ""}
    )
    assert empty_reason.status_code == 422

    # Back to dead, then retry everything dead of its activation.
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET state = 'dead' WHERE id = :id"), {"id": filled.dead_signal}
        )
    bulk = client.post(f"/v1/activations/{filled.failed}/retry-dead", headers=h).json()
    assert [r["id"] for r in bulk["result"]] == [str(filled.dead_signal)]

    cancelled = client.post(f"/v1/timers/{filled.timer_id}/cancel", headers=h)
    assert cancelled.status_code == 200 and cancelled.json()["result"]["cancelled_by"] == "alice"
    assert client.post(f"/v1/timers/{filled.timer_id}/cancel", headers=h).status_code == 409

    with runtime.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT event, reason, actor FROM signal_events WHERE signal_id = :id "
                "AND actor IS NOT NULL ORDER BY id"
            ),
            {"id": filled.dead_signal},
        ).all()
    assert [(r.event, r.actor) for r in rows] == [
        ("retried", "alice"),
        ("dismissed", "alice"),
        ("retried", "alice"),
    ]
    assert rows[1].reason == "noise"


def test_operator_auth(runtime: Runtime, filled: Filled, client: TestClient) -> None:
    # No operator yet, loopback: reads are open, actions are not.
    assert client.get("/v1/delegates").status_code == 200
    assert client.post(f"/v1/signals/{filled.dead_signal}/retry").status_code == 401

    _operator, token = operators.add(runtime, "bob")
    no_credential = client.get("/v1/delegates")
    assert no_credential.status_code == 401
    assert no_credential.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/v1/delegates", headers=auth("ipo.bob.wrong")).status_code == 401
    processor = client.get("/v1/delegates", headers=auth(filled.processor_secret))
    assert processor.status_code == 403
    retry_as_processor = client.post(
        f"/v1/signals/{filled.dead_signal}/retry", headers=auth(filled.processor_secret)
    )
    assert retry_as_processor.status_code == 403
    # An operator's token is no processor credential either.
    publish = client.post(
        "/v1/signals", headers=auth(token), json={"kind": "external.ci.done", "data": {}}
    )
    assert publish.status_code == 401
    assert client.get("/v1/delegates", headers=auth(token)).status_code == 200


def test_off_loopback_reads_need_an_operator(runtime: Runtime, filled: Filled) -> None:
    app = create_app(lambda: runtime, bind_host="0.0.0.0")
    with TestClient(app) as client:
        assert client.get("/v1/delegates").status_code == 401
        _operator, token = operators.add(runtime, "carol")
        assert client.get("/v1/delegates", headers=auth(token)).status_code == 200
