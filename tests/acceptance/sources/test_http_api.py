"""The HTTP API through real HTTP against `inner-plane serve` on real PostgreSQL and Redis:
every error status with proof that nothing was stored, grants, trust labels, idempotency."""

from __future__ import annotations

import uuid

import httpx
import pytest

from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode, Trust
from inner_plane.sources import processors
from tests.support.http_api import bearer, encode, register

X = {"kind": "external.ci.x"}
UNAUTHORIZED = {"error": "unauthorized", "message": "missing or invalid credentials"}


def _post(http: httpx.Client, token: str, body: object, **headers: str) -> httpx.Response:
    return http.post("/v1/signals", json=body, headers={**bearer(token), **headers})


def test_publish_one_signal_is_journaled_untrusted_under_the_processor_source(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci")
    response = _post(http, token, {"kind": "external.ci.finished", "data": {"build": 7}})

    assert response.status_code == 201
    body = response.json()
    assert body["deduplicated"] is False and body["trust"] == "untrusted"
    stored = runtime.signals.get(uuid.UUID(body["id"]))
    assert stored is not None
    assert (stored.kind, stored.source, stored.delegate_id) == (
        "external.ci.finished",
        "external.ci",
        "default",
    )
    assert stored.trust is Trust.UNTRUSTED and stored.data == {"build": 7}

    status = http.get(f"/v1/signals/{body['id']}", headers=bearer(token))
    assert status.status_code == 200
    assert status.json()["state"] == "pending" and status.json()["trust"] == "untrusted"


def test_batch_is_journaled_together(runtime: Runtime, http: httpx.Client) -> None:
    token = register(runtime, "ci")
    batch = {"signals": [{"kind": "external.ci.step", "data": {"n": n}} for n in range(5)]}
    response = _post(http, token, batch)
    assert response.status_code == 201
    ids = [item["id"] for item in response.json()["signals"]]
    assert len(set(ids)) == 5
    assert runtime.signals.count() == 5


def test_trusted_processor_publishes_trusted_and_may_lower_it(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci", trusted=True)
    trusted = _post(http, token, {"kind": "external.ci.a"}).json()
    lowered = _post(http, token, {"kind": "external.ci.b", "trust": "untrusted"}).json()
    assert runtime.signals.get(uuid.UUID(trusted["id"])).trust is Trust.TRUSTED  # type: ignore[union-attr]
    assert runtime.signals.get(uuid.UUID(lowered["id"])).trust is Trust.UNTRUSTED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer ipt.ci.not-the-token"},
        {"Authorization": "Bearer ipt.nobody.whatever"},
        {"Authorization": "Bearer garbage"},
        {"Authorization": "Basic Y2k6eA=="},
        {"X-Inner-Plane-Processor": "ci", "X-Inner-Plane-Signature": "v1=00"},
    ],
    ids=["none", "wrong-token", "unknown-processor", "malformed", "basic", "hmac-for-bearer"],
)
def test_missing_or_bad_credentials_are_401_without_detail(
    runtime: Runtime, http: httpx.Client, headers: dict[str, str]
) -> None:
    register(runtime, "ci")
    response = http.post("/v1/signals", json={"kind": "external.ci.x"}, headers=headers)
    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert runtime.signals.count() == 0


def test_revoked_processor_is_401(runtime: Runtime, http: httpx.Client) -> None:
    token = register(runtime, "ci")
    assert _post(http, token, {"kind": "external.ci.x"}).status_code == 201
    processors.revoke(runtime, "ci")
    response = _post(http, token, {"kind": "external.ci.y"})
    assert response.status_code == 401 and response.json() == UNAUTHORIZED
    assert runtime.signals.count() == 1


@pytest.mark.parametrize(
    ("signal", "field"),
    [
        ({"kind": "external.other.x"}, "kind"),
        ({"kind": "task.completed", "data": {"task_id": "t"}}, "kind"),
        ({"kind": "external.ci.x", "delegate_id": "someone-else"}, "delegate_id"),
        ({"kind": "external.ci.x", "mode": "wake"}, "mode"),
        ({"kind": "external.ci.urgent", "mode": "interrupt"}, "mode"),
        ({"kind": "external.ci.x", "source": "memory"}, "source"),
        ({"kind": "external.ci.x", "trust": "trusted"}, "trust"),
    ],
    ids=["other-prefix", "internal-kind", "delegate", "mode", "interrupt", "source", "trust"],
)
def test_outside_the_grant_is_403_naming_the_field(
    runtime: Runtime, http: httpx.Client, signal: dict[str, object], field: str
) -> None:
    token = register(runtime, "ci", delegates=["default", "ops"], max_mode="next-turn")
    response = _post(http, token, signal)
    assert response.status_code == 403
    body = response.json()
    assert body["error"] == "forbidden" and body["field"] == field and body["reason"]
    assert runtime.signals.count() == 0


def test_a_batch_with_one_signal_outside_the_grant_stores_nothing(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci")
    batch = {
        "signals": [{"kind": "external.ci.ok"}, {"kind": "external.ci.ok", "delegate_id": "x"}]
    }
    response = _post(http, token, batch)
    assert response.status_code == 403
    assert response.json()["field"] == "signals[1].delegate_id"
    assert runtime.signals.count() == 0


def test_grant_caps_a_kind_default_mode_and_interrupt_needs_the_grant(
    runtime: Runtime, http: httpx.Client
) -> None:
    low = register(runtime, "ci", max_mode="next-turn", delegates=["*"])
    capped = _post(http, low, {"kind": "external.ci.urgent", "delegate_id": "anyone"}).json()
    stored = runtime.signals.get(uuid.UUID(capped["id"]))
    assert stored is not None and stored.mode is Mode.NEXT_TURN  # the kind's default is wake

    processors.revoke(runtime, "ci")
    high = register(runtime, "ci-ops", max_mode="interrupt")
    # external.ci-ops.* kinds are unknown to the registry, so interrupt is downgraded to wake by
    # the kinds policy even with the grant; the grant alone is not enough.
    downgraded = _post(http, high, {"kind": "external.ci-ops.page", "mode": "interrupt"}).json()
    assert downgraded["mode"] == "wake"


def test_interrupt_when_granted_and_permitted_by_the_kind(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci", max_mode="interrupt")
    response = _post(http, token, {"kind": "external.ci.urgent", "mode": "interrupt"})
    assert response.status_code == 201 and response.json()["mode"] == "interrupt"


def test_oversized_body_is_413_by_content_length_and_by_actual_size(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci")
    big = encode({"kind": "external.ci.x", "data": {"blob": "x" * (1024 * 1024)}})
    declared = http.post(
        "/v1/signals", content=big, headers={**bearer(token), "Content-Type": "application/json"}
    )
    assert declared.status_code == 413 and declared.json()["error"] == "too_large"

    def chunks():  # no Content-Length: chunked transfer, counted while reading
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    streamed = http.post(
        "/v1/signals",
        content=chunks(),
        headers={**bearer(token), "Content-Type": "application/json"},
    )
    assert streamed.status_code == 413
    assert runtime.signals.count() == 0


@pytest.mark.parametrize(
    ("content", "field", "reason_part"),
    [
        (b"{not json", "body", "not valid JSON"),
        (b"[1, 2]", "body", "signal object"),
        (encode({"kind": "external.ci.x", "priority": 101}), "priority", "less than or equal"),
        (encode({"kind": "external.ci.x", "colour": "red"}), "colour", "not a signal field"),
        (encode({"kind": "nodots"}), "kind", "namespaced"),
        (encode({"kind": "external.ci.x", "data": [1]}), "data", "JSON object"),
        (encode({**X, "occurred_at": "2026-01-01T00:00"}), "occurred_at", "timezone"),
        (encode({"kind": "external.ci.x", "id": str(uuid.uuid4())}), "id", "not accepted"),
        (b'{"kind": "external.ci.x", "data": {"v": NaN}}', "body", "NaN"),
        (encode({"kind": "external.ci.x", "data": {"v": "a\u0000b"}}), "data.v", "NUL"),
        (encode({"signals": []}), "signals", "at least one"),
        (encode({"signals": {}}), "signals", "list"),
        (encode({"signals": [{"kind": "external.ci.x"}], "more": 1}), "more", "batch field"),
        (encode({"signals": [X, {**X, "mode": "loud"}]}), "signals[1].mode", ""),
    ],
    ids=[
        "not-json", "array", "priority", "unknown-field", "kind", "data-list", "naive-time",
        "id", "nan", "nul", "empty-batch", "batch-not-list", "batch-extra", "batch-item",
    ],
)  # fmt: skip
def test_invalid_signal_is_422_naming_field_and_reason(
    runtime: Runtime, http: httpx.Client, content: bytes, field: str, reason_part: str
) -> None:
    token = register(runtime, "ci")
    response = http.post(
        "/v1/signals",
        content=content,
        headers={**bearer(token), "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_signal"
    assert body["field"] == field
    assert reason_part in body["reason"]
    assert runtime.signals.count() == 0


def test_bad_idempotency_key_is_422(runtime: Runtime, http: httpx.Client) -> None:
    token = register(runtime, "ci")
    response = _post(http, token, {"kind": "external.ci.x"}, **{"Idempotency-Key": "has space"})
    assert response.status_code == 422 and response.json()["field"] == "Idempotency-Key"
    assert runtime.signals.count() == 0


def test_idempotent_retry_returns_the_first_signal_id(runtime: Runtime, http: httpx.Client) -> None:
    token = register(runtime, "ci")
    key = {"Idempotency-Key": "deploy-42"}
    first = _post(http, token, {"kind": "external.ci.deployed", "data": {"v": 1}}, **key)
    retry = _post(http, token, {"kind": "external.ci.deployed", "data": {"v": 2}}, **key)
    assert first.status_code == 201 and retry.status_code == 200
    assert retry.json()["id"] == first.json()["id"] and retry.json()["deduplicated"] is True
    assert runtime.signals.count() == 1
    stored = runtime.signals.get(uuid.UUID(first.json()["id"]))
    assert stored is not None and stored.dedup_key == "deploy-42" and stored.data == {"v": 1}

    batch = {"signals": [{"kind": "external.ci.a"}, {"kind": "external.ci.b"}]}
    once = _post(http, token, batch, **{"Idempotency-Key": "batch-1"}).json()["signals"]
    again = _post(http, token, batch, **{"Idempotency-Key": "batch-1"}).json()["signals"]
    assert [s["id"] for s in once] == [s["id"] for s in again]
    assert all(s["deduplicated"] for s in again)
    assert runtime.signals.count() == 3


def test_idempotency_key_conflicting_with_body_dedup_key_is_422(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci")
    response = _post(
        http, token, {"kind": "external.ci.x", "dedup_key": "a"}, **{"Idempotency-Key": "b"}
    )
    assert response.status_code == 422 and response.json()["field"] == "dedup_key"
    assert runtime.signals.count() == 0


def test_rate_limit_is_429_with_retry_after_and_stores_nothing(
    runtime: Runtime, http: httpx.Client
) -> None:
    token = register(runtime, "ci", rate_limit=2)
    for n in range(2):
        assert _post(http, token, {"kind": "external.ci.x", "data": {"n": n}}).status_code == 201
    limited = _post(http, token, {"kind": "external.ci.x", "data": {"n": 3}})
    assert limited.status_code == 429
    assert limited.json()["error"] == "rate_limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert runtime.signals.count() == 2


def test_status_of_another_processors_signal_is_404(runtime: Runtime, http: httpx.Client) -> None:
    ci = register(runtime, "ci")
    other = register(runtime, "other")
    published = _post(http, ci, {"kind": "external.ci.x"}).json()
    assert http.get(f"/v1/signals/{published['id']}", headers=bearer(other)).status_code == 404
    missing = http.get(f"/v1/signals/{uuid.uuid4()}", headers=bearer(ci))
    assert missing.status_code == 404
    bad = http.get("/v1/signals/not-a-uuid", headers=bearer(ci))
    assert bad.status_code == 422 and bad.json()["field"] == "signal_id"
    assert http.get(f"/v1/signals/{published['id']}").status_code == 401


def test_openapi_documents_the_operations_and_their_errors(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    post = document["paths"]["/v1/signals"]["post"]
    assert {"200", "201", "401", "403", "413", "422", "429", "503"} <= set(post["responses"])
    assert "Retry-After" in post["responses"]["429"]["headers"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    get = document["paths"]["/v1/signals/{signal_id}"]["get"]
    assert {"200", "401", "404", "422", "429", "503"} <= set(get["responses"])
    schemas = document["components"]["schemas"]
    assert {"ExternalSignal", "SignalBatch", "ErrorBody", "PublishedSignal"} <= set(schemas)
    assert "id" not in schemas["ExternalSignal"]["properties"]
    assert http.get("/healthz").json() == {"status": "ok", "journal": "ok"}
