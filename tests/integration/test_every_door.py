"""Every door of the API holds (issue 29), in process against real PostgreSQL and Redis: each
break found by the attack on a running plane, reproduced and answered.

The doors: the processor API (bearer and HMAC), MCP, the operator API (bearer and the UI's
session cookie), the UI's sign-in form, the live feed. A real server (slow bodies, uvicorn's
X-Forwarded-For, the 151st stream) is in ``tests/acceptance/test_doors_served.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from inner_plane import operators
from inner_plane.config import load_settings
from inner_plane.http.app import create_app
from inner_plane.http.guards import TARPIT_PER_ADDRESS
from inner_plane.http.operator_auth import COOKIE
from inner_plane.mcp_adapter.http import build_route
from inner_plane.runtime import Runtime
from inner_plane.sources import auth_throttle, credentials, processors
from inner_plane.sources.streams import StreamSlots, process_slots
from tests.conftest import ContextLog
from tests.support.stores import journal_checksum
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, inbound
from tests.support.ui_session import form_csrf, sign_in

DUMMY_SALT = credentials._unb64(credentials.DUMMY_HASH.split("$")[4])
NINES = "9" * 400
SMS = "/v1/channels/sms/twilio"


@pytest.fixture
def one_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """One throttle window for the whole test (a real minute boundary would reset the count)."""
    monkeypatch.setattr(auth_throttle, "_clock", lambda: 1_800_000_010.0)


def build(runtime: Runtime, bind_host: str = "127.0.0.1") -> FastAPI:
    return create_app(
        lambda: runtime, mounts=[build_route(lambda: runtime, 1024 * 1024)], bind_host=bind_host
    )


@pytest.fixture
def client(runtime: Runtime, one_window: None) -> Iterator[TestClient]:
    with TestClient(build(runtime), raise_server_exceptions=False) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def hmac_headers(stamp: str) -> dict[str, str]:
    return {
        "X-Inner-Plane-Processor": "nobody",
        "X-Inner-Plane-Timestamp": stamp,
        "X-Inner-Plane-Signature": "v1=0",
    }


# --- 1. no unauthenticated 5xx -----------------------------------------------------------------


def test_a_400_digit_timestamp_is_an_authentication_failure_on_every_face(
    runtime: Runtime, client: TestClient, context_log: ContextLog
) -> None:
    processors.add(runtime, "hooks", credential="hmac")
    faces = [("POST", "/v1/signals"), ("POST", "/mcp"), ("GET", "/v1/delegates")]
    answers = []
    for digits in (NINES, "9" * 309, "9" * 4300, "1" + "0" * 20, "-5", "1e9", "0x10", " 12"):
        for method, path in faces:
            answers.append(client.request(method, path, headers=hmac_headers(digits)).status_code)
    assert 500 not in answers and set(answers) <= {401, 429}
    # They counted: the address is throttled now, on every face.
    for method, path in faces:
        assert client.request(method, path, headers=hmac_headers(NINES)).status_code == 429
    assert context_log.lines("unexpected_error") == []


def test_a_nul_in_any_operator_parameter_is_a_422_naming_it(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    tried = 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "operator" not in operation.get("tags", []):
                continue
            parameters = [
                p for p in operation.get("parameters", []) if p["in"] in ("path", "query")
            ]
            for parameter in parameters:
                values = {
                    p["name"]: str(uuid.uuid4())
                    for p in operation.get("parameters", [])
                    if p["in"] == "path"
                }
                values[parameter["name"]] = "a\x00b"
                url = path.format(
                    **{k: quote(v) for k, v in values.items() if "{" + k + "}" in path}
                )
                query = {k: v for k, v in values.items() if "{" + k + "}" not in path}
                answer = client.request(method, url, params=query)
                assert answer.status_code == 422, (method, path, parameter["name"], answer.text)
                assert answer.json()["field"] == parameter["name"]
                tried += 1
    assert tried >= 12


def test_an_unexpected_error_is_one_rate_limited_line(
    runtime: Runtime, context_log: ContextLog, one_window: None
) -> None:
    app = build(runtime)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("kaboom\nsecond line")

    with TestClient(app, raise_server_exceptions=False) as client:
        answers = [client.get("/boom") for _ in range(50)]
    assert {a.status_code for a in answers} == {500}
    assert answers[0].json() == {
        "error": "internal",
        "message": "an unexpected error; it has been logged",
    }
    lines = context_log.lines("unexpected_error")
    assert len(lines) == 1  # the traceback once, escaped onto its one line
    assert "Traceback" in lines[0] and "kaboom" in lines[0] and "in boom" in lines[0]


def test_log_volume_under_attack_is_bounded(
    runtime: Runtime, client: TestClient, context_log: ContextLog
) -> None:
    processors.add(runtime, "ci")
    malformed: list[dict[str, Any]] = [
        {"headers": hmac_headers(NINES)},
        {"headers": {"Authorization": "Bearer ipt.ci." + "x" * 300}},
        {"headers": {"Authorization": "Basic " + "<script>" * 40}},
        {"headers": {"Authorization": "Bearer ipo.root.nope"}},
        {"headers": {"Cookie": f"{COOKIE}=" + "A" * 43}},
        {"params": {"cursor": "\x00" * 3}},
        {"headers": {"Host": "evil.example"}},
    ]
    paths = ["/v1/signals", "/v1/delegates", "/v1/signals/" + "9" * 1000, "/mcp", "/v1/events"]
    for n in range(1000):
        request = malformed[n % len(malformed)]
        path = paths[n % len(paths)]
        method = "POST" if path in ("/v1/signals", "/mcp") else "GET"
        assert client.request(method, path, **request).status_code < 500
    written = context_log.getvalue().splitlines()
    assert len(written) <= 40, written[:50]
    assert all(line.startswith("[inner-context]") for line in written)


# --- 2. throttles keyed on what the client cannot forge ----------------------------------------


def test_a_rotating_x_forwarded_for_does_not_escape_the_throttle(
    runtime: Runtime, client: TestClient, context_log: ContextLog
) -> None:
    processors.add(runtime, "ci")
    answers = [
        client.get(
            "/v1/signals/" + str(uuid.uuid4()),
            headers={
                "Authorization": f"Bearer ipt.ci.wrong-{n}",
                "X-Forwarded-For": f"10.1.{n // 250}.{n % 250}, <b>{'x' * 300}</b>",
            },
        ).status_code
        for n in range(200)
    ]
    limit = runtime.settings.auth_failures_per_minute
    assert answers[:limit] == [401] * limit
    assert set(answers[limit:]) == {429}
    # The forged value is neither the client logged nor a key of its own.
    failed = context_log.lines("auth_failed")
    assert failed and all("client=127.0.0.1" in line for line in failed)
    assert not runtime.redis.keys("*authfail:10.1.*")


def test_a_known_token_passes_while_its_address_is_throttled(
    runtime: Runtime, client: TestClient
) -> None:
    _, token = processors.add(runtime, "ci")
    published = client.post(
        "/v1/signals",
        json={"kind": "external.ci.done"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert published.status_code == 201, published.text
    for n in range(runtime.settings.auth_failures_per_minute + 5):
        client.post("/v1/signals", json={}, headers={"Authorization": f"Bearer ipt.ci.bad-{n}"})
    refused = client.get(f"/v1/signals/{uuid.uuid4()}", headers={"Authorization": "Bearer x.y"})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    again = client.post(
        "/v1/signals",
        json={"kind": "external.ci.again"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert again.status_code == 201, again.text


def test_a_throttled_address_is_tarpitted_and_cannot_hold_more_than_its_share(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, one_window: None
) -> None:
    """A refusal to a throttled address is held (INNER_PLANE_API_THROTTLED_DELAY_S) before it is
    sent, so a guessing loop is slowed to one request a second per connection; one address has
    at most TARPIT_PER_ADDRESS refusals held, and the next is refused at once, its connection
    closed. A valid token from the same address is never held."""
    monkeypatch.setenv("INNER_PLANE_API_THROTTLED_DELAY_S", "10")
    load_settings.cache_clear()
    # Throttled after two failures (two hashes, not twenty).
    strict = runtime.settings.model_copy(update={"auth_failures_per_minute": 2})
    runtime = dataclasses.replace(runtime, settings=strict)
    _, token = processors.add(runtime, "ci")
    app = build(runtime)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.9", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            ok = await client.post(
                "/v1/signals", json={"kind": "external.ci.done"}, headers=bearer(token)
            )
            assert ok.status_code == 201, ok.text
            for n in range(strict.auth_failures_per_minute):
                await client.post("/v1/signals", json={}, headers=bearer(f"ipt.ci.bad-{n}"))
            assert auth_throttle.known_throttled("127.0.0.9") is not None

            def refused() -> asyncio.Task[httpx.Response]:
                return asyncio.ensure_future(
                    client.get("/v1/delegates", headers=bearer("ipo.x.again"))
                )

            held = [refused() for _ in range(TARPIT_PER_ADDRESS)]
            await asyncio.sleep(0.2)  # every one of them is in the tarpit now
            one_more = await refused()
            # Answered at once, while the others are still held: 429, and the connection closed.
            assert one_more.status_code == 429
            assert one_more.headers["connection"] == "close"
            assert not any(task.done() for task in held)
            # The valid token of the same address is not held.
            again = await client.post(
                "/v1/signals", json={"kind": "external.ci.again"}, headers=bearer(token)
            )
            assert again.status_code == 201 and not any(task.done() for task in held)
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        load_settings.cache_clear()


def test_behind_a_trusted_proxy_the_right_most_untrusted_hop_is_the_client(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, one_window: None
) -> None:
    monkeypatch.setenv("INNER_PLANE_TRUSTED_PROXIES", "127.0.0.0/8, 10.9.0.0/16")
    load_settings.cache_clear()
    try:
        processors.add(runtime, "ci")
        with TestClient(build(runtime)) as client:
            limit = runtime.settings.auth_failures_per_minute
            for n in range(limit):
                forged = {"X-Forwarded-For": f"203.0.113.{n}, 198.51.100.7, 10.9.0.3"}
                answer = client.get(
                    "/v1/delegates", headers={"Authorization": f"Bearer ipo.x.{n}", **forged}
                )
                assert answer.status_code == 401
            # 198.51.100.7 (the hop the trusted proxy saw) is throttled; another is not.
            refused = client.get(
                "/v1/delegates",
                headers={"Authorization": "Bearer ipo.x.y", "X-Forwarded-For": "198.51.100.7"},
            )
            assert refused.status_code == 429
            other = client.get(
                "/v1/delegates",
                headers={"Authorization": "Bearer ipo.x.y", "X-Forwarded-For": "198.51.100.8"},
            )
            assert other.status_code == 401
    finally:
        monkeypatch.delenv("INNER_PLANE_TRUSTED_PROXIES")
        load_settings.cache_clear()


# --- 3. operator sign-in and credentials -------------------------------------------------------


@pytest.fixture
def scrypt_salts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    salts: list[bytes] = []
    real = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        salts.append(kwargs["salt"])
        return real(password, **kwargs)

    monkeypatch.setattr(credentials.hashlib, "scrypt", counting)
    credentials._verified.clear()
    yield salts
    credentials._verified.clear()


def test_the_login_form_is_throttled_and_logged(
    runtime: Runtime, client: TestClient, context_log: ContextLog, scrypt_salts: list[bytes]
) -> None:
    operators.add(runtime, "dana")
    scrypt_salts.clear()
    limit = runtime.settings.auth_failures_per_minute
    answers = [sign_in(client, f"ipo.dana.wrong-{n}").status_code for n in range(limit + 10)]
    assert answers == [401] * limit + [429] * 10
    assert len(scrypt_salts) == limit  # none once throttled
    failed = context_log.lines("auth_failed")
    assert len(failed) == limit
    assert all('face="login form"' in line and "client=127.0.0.1" in line for line in failed)


def test_operator_names_cannot_be_told_apart(
    runtime: Runtime, client: TestClient, scrypt_salts: list[bytes]
) -> None:
    operators.add(runtime, "dana")
    scrypt_salts.clear()
    for token in ("ipo.dana.wrong", "ipo.nobody.wrong"):
        assert (
            client.get("/v1/delegates", headers={"Authorization": f"Bearer {token}"}).status_code
            == 401
        )
        assert sign_in(client, token.replace("wrong", "other")).status_code == 401
    # One hash per attempt, whatever the name: the unknown one against the dummy.
    assert len(scrypt_salts) == 4
    assert scrypt_salts[0] != DUMMY_SALT and scrypt_salts[2] == DUMMY_SALT


def test_an_operator_bearer_meets_the_throttle_before_any_hash(
    runtime: Runtime, client: TestClient, scrypt_salts: list[bytes], context_log: ContextLog
) -> None:
    operators.add(runtime, "dana")
    limit = runtime.settings.auth_failures_per_minute
    for n in range(limit):
        client.get("/v1/delegates", headers={"Authorization": f"Bearer ipo.dana.w{n}"})
    hashed = len(scrypt_salts)
    answer = client.get("/v1/delegates", headers={"Authorization": "Bearer ipo.dana.again"})
    assert answer.status_code == 429 and len(scrypt_salts) == hashed


def test_a_wrong_cookie_is_throttled_and_logged(
    runtime: Runtime, client: TestClient, context_log: ContextLog
) -> None:
    operators.add(runtime, "dana")
    limit = runtime.settings.auth_failures_per_minute
    answers = []
    for n in range(limit + 3):
        client.cookies.set(COOKIE, f"{n:043d}")
        answers.append(client.get("/v1/delegates").status_code)
    assert answers == [401] * limit + [429] * 3
    assert len(context_log.lines("auth_failed")) == limit
    assert 'face="operator cookie"' in context_log.lines("auth_failed")[0]


# --- 4. sessions -------------------------------------------------------------------------------


def test_sign_out_ends_the_session_and_the_cookie_holds_no_token(
    runtime: Runtime, client: TestClient
) -> None:
    _, token = operators.add(runtime, "dana")
    assert sign_in(client, token).status_code == 200
    cookie = client.cookies[COOKIE]
    assert "dana" not in cookie and token not in cookie
    assert client.get("/v1/delegates").status_code == 200
    page = client.get("/")
    assert client.post("/logout", data={"csrf": form_csrf(page.text)}).status_code == 200
    client.cookies.clear()
    client.cookies.set(COOKIE, cookie)  # the old cookie, replayed
    assert client.get("/v1/delegates").status_code == 401


def test_removing_the_operator_ends_its_sessions(runtime: Runtime, client: TestClient) -> None:
    _, token = operators.add(runtime, "dana")
    sign_in(client, token)
    assert client.get("/v1/delegates").status_code == 200
    operators.remove(runtime, "dana")
    operators.add(runtime, "erin")  # reads are not open again
    assert client.get("/v1/delegates").status_code == 401


def test_sign_in_rotates_the_session(runtime: Runtime, client: TestClient) -> None:
    _, token = operators.add(runtime, "dana")
    sign_in(client, token)
    first = client.cookies[COOKIE]
    sign_in(client, token)
    second = client.cookies[COOKIE]
    assert first != second
    client.cookies.clear()
    client.cookies.set(COOKIE, first)
    assert client.get("/v1/delegates").status_code == 401


def test_a_login_csrf_fails(runtime: Runtime, client: TestClient) -> None:
    _, token = operators.add(runtime, "mallory")
    # Another site's page posts the form with its own token: no cookie set with a form, or a
    # made-up one.
    for data in ({"token": token}, {"token": token, "csrf": "made-up"}):
        answer = client.post("/login", data=data, follow_redirects=False)
        assert answer.status_code == 403 and COOKIE not in answer.cookies
    assert client.get("/v1/delegates").status_code == 401


def test_a_logout_needs_the_pages_token(runtime: Runtime, client: TestClient) -> None:
    _, token = operators.add(runtime, "dana")
    sign_in(client, token)
    assert client.post("/logout", data={"csrf": "forged"}).status_code == 403
    assert client.get("/v1/delegates").status_code == 200


# --- 5. Host -----------------------------------------------------------------------------------


def test_open_reads_refuse_a_rebinding_host(client: TestClient) -> None:
    assert client.get("/v1/delegates").status_code == 200
    for host in ("localhost:8700", "127.0.0.1", "[::1]:8700"):
        assert client.get("/v1/delegates", headers={"Host": host}).status_code == 200
    for host in ("evil.example", "evil.example:8700", "127.0.0.1.evil.example", ""):
        answer = client.get("/v1/delegates", headers={"Host": host})
        assert answer.status_code == 421 and answer.json()["field"] == "host"
        assert client.get("/", headers={"Host": host}).status_code == 421


def test_public_names_are_served_but_never_with_open_reads(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INNER_PLANE_PUBLIC_HOSTS", "plane.example.org")
    load_settings.cache_clear()
    try:
        with TestClient(build(runtime)) as client:
            public = {"Host": "plane.example.org"}
            assert client.get("/v1/delegates", headers=public).status_code == 401
            _, token = operators.add(runtime, "dana")
            with_token = {**public, "Authorization": f"Bearer {token}"}
            assert client.get("/v1/delegates", headers=with_token).status_code == 200
            assert client.get("/v1/delegates", headers={"Host": "evil.example"}).status_code == 421
    finally:
        monkeypatch.delenv("INNER_PLANE_PUBLIC_HOSTS")
        load_settings.cache_clear()


def test_no_redirect_echoes_the_host(runtime: Runtime) -> None:
    with TestClient(build(runtime, bind_host="0.0.0.0")) as client:
        for path in ("/v1/delegates/", "/v1/signals/", "/dead-letters/"):
            answer = client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
            assert "evil.example" not in answer.headers.get("location", "")


# --- 7. streams, 8. small holes ----------------------------------------------------------------


def test_streams_are_capped_per_credential_and_in_all() -> None:
    slots = StreamSlots(total=5, per_credential=2)
    slots.acquire("processor:a")
    slots.acquire("processor:a")
    with pytest.raises(Exception) as caught:
        slots.acquire("processor:a")
    assert getattr(caught.value, "status", None) == 429
    for name in ("b", "b", "c"):
        slots.acquire(f"processor:{name}")
    with pytest.raises(Exception) as full:
        slots.acquire("processor:d")
    assert getattr(full.value, "status", None) == 503
    slots.release("processor:a")
    slots.acquire("processor:d")
    assert slots.held() == 5


def test_the_live_feed_and_mcp_streams_take_slots(runtime: Runtime, client: TestClient) -> None:
    _, operator_token = operators.add(runtime, "dana")
    _, processor_token = processors.add(runtime, "ci")
    slots = process_slots()
    doors = [
        ("operator:dana", "/v1/events", operator_token),
        ("processor:ci", "/mcp", processor_token),
    ]
    for credential, path, token in doors:
        for _ in range(slots.per_credential):  # the credential's streams, all open
            slots.acquire(credential)
        try:
            headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
            answer = client.get(path, headers=headers)
            assert answer.status_code == 429, (path, answer.text)
            assert answer.json()["error"] == "too_many_streams"
        finally:
            for _ in range(slots.per_credential):
                slots.release(credential)


def test_docs_are_off_and_errors_do_not_echo_input(client: TestClient) -> None:
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    marker = "<script>alert(1)</script>" * 20
    for answer in (
        client.get("/v1/signals", params={"limit": marker}),
        client.get("/v1/delegates/default/timeline", params={"limit": marker}),
        client.get("/ui/delegates/default/entries", params={"after": marker}),
        client.post("/login", data={"next": marker}),
    ):
        assert answer.status_code == 422, answer.text
        assert "script" not in answer.text
        body = answer.json()
        assert set(body) == {"error", "message", "field", "reason"}


def test_enabled_docs_cannot_be_framed(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INNER_PLANE_API_DOCS", "true")
    load_settings.cache_clear()
    try:
        with TestClient(build(runtime)) as client:
            for path in ("/docs", "/redoc"):
                answer = client.get(path)
                assert answer.status_code == 200
                assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
                assert answer.headers["x-frame-options"] == "DENY"
    finally:
        monkeypatch.delenv("INNER_PLANE_API_DOCS")
        load_settings.cache_clear()


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    runtime: Runtime, client: TestClient
) -> None:
    _, token = operators.add(runtime, "dana")
    for path in ("/v1/signals", "/mcp", f"/v1/signals/{uuid.uuid4()}/dismiss", "/login"):
        answer = client.post(
            path,
            headers={"Content-Length": str(2 * 1024 * 1024), "Authorization": f"Bearer {token}"},
            content=b"x" * 10,
        )
        assert answer.status_code == 413, path
    # ... and every operation that takes a body declares that answer (schemathesis checks it).
    document = client.get("/openapi.json").json()
    for path, operations in document["paths"].items():
        for method in set(operations) & {"post", "put", "patch"}:
            assert "413" in operations[method]["responses"], (method, path)


# --- 9. mail and SMS (issue 24) ----------------------------------------------------------------


@pytest.fixture
def sms_client(runtime: Runtime, one_window: None) -> Iterator[tuple[Runtime, TestClient]]:
    settings = runtime.settings.model_copy(
        update={"twilio_account_sid": ACCOUNT_SID, "twilio_auth_token": AUTH_TOKEN}
    )
    rt = replace(runtime, settings=settings)
    with TestClient(build(rt), raise_server_exceptions=False) as test_client:
        yield rt, test_client


def test_the_sms_webhook_counts_bad_signatures_toward_the_throttle_of_every_face(
    sms_client: tuple[Runtime, TestClient], context_log: ContextLog
) -> None:
    rt, client = sms_client
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = urlencode(inbound("+4915112345678", "hi"))
    answers = [
        client.post(
            SMS, content=body, headers={**form, "X-Twilio-Signature": signature}
        ).status_code
        for signature in (NINES, "", "=" * 50, "\x7f", "AAAA")
    ]
    assert 500 not in answers and set(answers) <= {403}
    for _ in range(rt.settings.auth_failures_per_minute):
        client.post(SMS, content=body, headers={**form, "X-Twilio-Signature": "AAAA"})
    # The address is throttled on the SMS door and on the processors' door alike.
    assert client.post(SMS, content=body, headers=form).status_code == 429
    assert client.post("/v1/signals", headers=hmac_headers(NINES)).status_code == 429
    assert context_log.lines("unexpected_error") == []


def test_the_sms_webhook_refuses_a_body_over_its_limit_before_reading_it(
    sms_client: tuple[Runtime, TestClient],
) -> None:
    rt, client = sms_client
    declared = str(rt.settings.sms_max_body_bytes + 1)
    answer = client.post(SMS, headers={"Content-Length": declared}, content=b"x" * 10)
    assert answer.status_code == 413


def test_the_sms_webhook_without_sms_settings_is_not_found(client: TestClient) -> None:
    assert (
        client.post(SMS, content=b"From=%2B1", headers={"X-Twilio-Signature": "x"}).status_code
        == 404
    )


def test_a_json_body_that_cannot_be_decoded_is_a_declared_422_on_every_route(
    runtime: Runtime, client: TestClient
) -> None:
    """A body no JSON decoder reads (bytes that are not UTF-8; nesting past Python's recursion
    limit) gets FastAPI's own undeclared 400 unless the app answers it (schemathesis found it):
    every route taking JSON answers a status it declares, the operator API 422 naming ``body``
    after the credential check."""
    _, token = operators.add(runtime, "dana")
    document = client.get("/openapi.json").json()
    before = journal_checksum(runtime.engine)
    tried = 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "application/json" not in operation.get("requestBody", {}).get("content", {}):
                continue
            values = {p["name"]: str(uuid.uuid4()) for p in operation.get("parameters", [])}
            url = path.format(**{k: v for k, v in values.items() if "{" + k + "}" in path})
            declared = {int(code) for code in operation["responses"] if code.isdigit()}
            for body in (b"1\xffU", b"\xfe\xff\x00[", b"[" * 100_000):
                for headers in ({}, bearer(token)):
                    answer = client.request(
                        method, url, content=body,
                        headers={**headers, "Content-Type": "application/json"},
                    )  # fmt: skip
                    where = (method, path, body[:4], bool(headers), answer.text)
                    assert answer.status_code in declared, where
                    if "operator" in operation.get("tags", []):
                        if headers:
                            assert answer.status_code == 422, where
                            assert answer.json()["field"] == "body"
                        else:
                            assert answer.status_code == 401, where
                    tried += 1
    assert tried >= 20
    assert journal_checksum(runtime.engine) == before  # nothing stored, in any table


def test_mcp_is_built_by_its_first_request_and_a_build_that_fails_is_a_503_alone(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, context_log: ContextLog
) -> None:
    """The MCP server is built on the first authenticated /mcp request (not at start); if that
    fails, /mcp answers 503 and is logged, and the rest of the API goes on."""
    from inner_plane.mcp_adapter import tools

    _, token = processors.add(runtime, "ci")
    built: list[bool] = []

    def broken(*_: Any) -> Any:
        built.append(True)
        raise RuntimeError("no MCP today")

    monkeypatch.setattr(tools, "build_server", broken)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {**bearer(token), "Accept": "application/json, text/event-stream"}
    with TestClient(build(runtime), raise_server_exceptions=False) as client:
        assert client.post("/mcp", json=call).status_code == 401
        assert built == []  # an unauthenticated request builds nothing
        for _ in range(2):
            answer = client.post("/mcp", json=call, headers=headers)
            assert answer.status_code == 503 and answer.json()["error"] == "unavailable"
        assert built == [True]
        assert client.get("/healthz").status_code == 200
    assert [line for line in context_log.lines("mcp_unavailable") if "no MCP today" in line]
