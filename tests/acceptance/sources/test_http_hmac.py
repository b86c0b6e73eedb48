"""HMAC-SHA256 request signing: timestamp, replay window, replayed signatures refused."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from inner_plane.runtime import Runtime
from tests.support.http_api import encode, register, signed

BODY = encode({"kind": "external.ci.finished", "data": {"build": 1}})


def test_signed_request_is_accepted_and_a_replay_is_refused(
    runtime: Runtime, http: httpx.Client
) -> None:
    key = register(runtime, "ci", credential="hmac")
    headers = signed("ci", key, BODY)
    first = http.post("/v1/signals", content=BODY, headers=headers)
    assert first.status_code == 201
    stored = runtime.signals.get(uuid.UUID(first.json()["id"]))
    assert stored is not None and stored.source == "external.ci"

    replayed = http.post("/v1/signals", content=BODY, headers=headers)
    assert replayed.status_code == 401
    assert replayed.json() == {"error": "unauthorized", "message": "missing or invalid credentials"}
    assert runtime.signals.count() == 1


@pytest.mark.parametrize(
    "tamper",
    ["stale", "future", "body", "key", "path", "idempotency", "no-timestamp", "revoked"],
)
def test_bad_signatures_are_401_and_store_nothing(
    runtime: Runtime, http: httpx.Client, tamper: str
) -> None:
    key = register(runtime, "ci", credential="hmac")
    body, path, sign_key, stamp = BODY, "/v1/signals", key, int(time.time())
    if tamper == "stale":
        stamp -= 301
    if tamper == "future":
        stamp += 301
    if tamper == "key":
        sign_key = "not-the-key"
    if tamper == "path":
        path = "/v1/other"
    headers = signed("ci", sign_key, body, path=path, timestamp=stamp, idempotency_key="k1")
    if tamper == "body":
        body = encode({"kind": "external.ci.finished", "data": {"build": 2}})
    if tamper == "idempotency":
        headers["Idempotency-Key"] = "k2"
    if tamper == "no-timestamp":
        del headers["X-Inner-Plane-Timestamp"]
    if tamper == "revoked":
        from inner_plane.sources import processors

        processors.revoke(runtime, "ci")
    response = http.post("/v1/signals", content=body, headers=headers)
    assert response.status_code == 401
    assert runtime.signals.count() == 0


def test_signed_get_and_signed_idempotent_retry(runtime: Runtime, http: httpx.Client) -> None:
    key = register(runtime, "ci", credential="hmac")
    earlier = int(time.time()) - 1
    first = http.post(
        "/v1/signals",
        content=BODY,
        headers=signed("ci", key, BODY, idempotency_key="run-9", timestamp=earlier),
    )
    # A retry is a new request: a new timestamp, so a new signature (not a replay).
    retry = http.post(
        "/v1/signals", content=BODY, headers=signed("ci", key, BODY, idempotency_key="run-9")
    )
    assert first.status_code == 201 and retry.status_code == 200
    assert retry.json()["id"] == first.json()["id"]
    path = f"/v1/signals/{first.json()['id']}"
    status = http.get(path, headers=signed("ci", key, b"", path=path, method="GET"))
    assert status.status_code == 200 and status.json()["dedup_key"] == "run-9"
    assert runtime.signals.count() == 1
