"""Every intake limit through the HTTP API and the MCP adapter of a running `inner-plane serve`:
422 (a tool error starting with 422 over MCP) naming the field, and nothing stored."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp import Client
from sqlalchemy import text

from inner_plane.runtime import Runtime
from tests.acceptance.sources.test_mcp import over_http
from tests.support.http_api import bearer, register
from tests.support.intake_limits import Limit, limits_for

HTTP_LIMITS = limits_for("http")
MCP_LIMITS = limits_for("mcp")


def _external(limit: Limit) -> dict[str, Any]:
    signal: dict[str, Any] = {"kind": "external.ci.x", **limit.fields}
    if "source" in limit.fields:
        signal["source"] = "external.ci\n"
    return signal


@pytest.mark.parametrize("limit", HTTP_LIMITS, ids=[limit.id for limit in HTTP_LIMITS])
def test_http_refuses_with_422_naming_the_field(runtime: Runtime, api: str, limit: Limit) -> None:
    token = register(runtime, "ci", delegates=["*"])
    response = httpx.post(f"{api}/v1/signals", json=_external(limit), headers=bearer(token))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == limit.field
    batch = {"signals": [{"kind": "external.ci.ok"}, _external(limit)]}
    response = httpx.post(f"{api}/v1/signals", json=batch, headers=bearer(token))
    assert response.status_code == 422 and response.json()["field"] == f"signals[1].{limit.field}"
    assert runtime.signals.count() == 0


def test_mcp_refuses_every_limit_with_a_422_tool_error(runtime: Runtime, api: str) -> None:
    token = register(runtime, "ci", delegates=["*"])

    async def session(mcp: Client) -> list[tuple[str, bool, str]]:
        seen = []
        for limit in MCP_LIMITS:
            result = await mcp.call_tool("publish_signal", _external(limit))
            text = " ".join(getattr(block, "text", "") for block in result.content)
            seen.append((limit.field, result.is_error, text))
        return seen

    seen = over_http(api, session, headers={"Authorization": f"Bearer {token}"})
    for field, is_error, message in seen:
        assert is_error and f"422 invalid_signal: {field}: " in message, message
    assert runtime.signals.count() == 0


def test_a_replay_answers_with_the_stored_signal(runtime: Runtime, api: str) -> None:
    token = register(runtime, "ci", max_mode="wake")
    first = httpx.post(
        f"{api}/v1/signals",
        json={"kind": "external.ci.first", "mode": "next-turn", "priority": 10},
        headers={**bearer(token), "Idempotency-Key": "replay-1"},
    ).json()
    again = httpx.post(
        f"{api}/v1/signals",
        json={"kind": "external.ci.second", "mode": "wake", "priority": 90},
        headers={**bearer(token), "Idempotency-Key": "replay-1"},
    )
    assert again.status_code == 200
    replay = again.json()
    assert replay["id"] == first["id"] and replay["deduplicated"] is True
    assert (replay["kind"], replay["mode"], replay["priority"]) == (
        "external.ci.first",
        "next-turn",
        10,
    )
    assert runtime.signals.count() == 1


def test_the_status_read_never_fails_on_an_odd_row(runtime: Runtime, api: str) -> None:
    token = register(runtime, "ci")
    ids = [
        httpx.post(
            f"{api}/v1/signals", json={"kind": "external.ci.x"}, headers=bearer(token)
        ).json()["id"]
        for _ in range(3)
    ]
    deep = '{"d": ' + "[" * 5_000 + "]" * 5_000 + "}"  # past what Python's json can write
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET occurred_at = '10000-01-01T00:00Z' WHERE id = :id"),
            {"id": ids[0]},
        )
        connection.execute(
            text("UPDATE signals SET data = CAST(:d AS jsonb) WHERE id = :id"),
            {"id": ids[1], "d": deep},
        )
        connection.execute(
            text("UPDATE signals SET expires_at = '-infinity', trust = 'loud' WHERE id = :id"),
            {"id": ids[2]},
        )
    for signal_id in ids:
        response = httpx.get(f"{api}/v1/signals/{signal_id}", headers=bearer(token))
        assert response.status_code == 200, response.text
        assert response.json()["id"] == signal_id
