"""The conversation API on real PostgreSQL and Redis: turns accepted once per Idempotency-Key
(also twenty at once), the person's history paged without inner context, every route's scope,
the route table, and hostile turn bodies and headers (4xx naming the field, nothing stored,
never a 500)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from inner_plane import operators
from inner_plane.config import build_settings
from inner_plane.http import chat_page, conversation_api
from inner_plane.http.app import create_app
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import person
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from inner_plane.signals.kinds import KindRegistry
from inner_plane.sources import processors
from tests.support.api_server import serving
from tests.support.person_tokens import PersonTokens
from tests.support.stores import Stores

BASE = "/v1/delegates/{}/conversation"


@pytest.fixture
def runtime(clean_stores: Stores) -> Iterator[Runtime]:
    """A runtime whose turn rate limit does not get in the way of many requests."""
    configured = build_settings(
        database_url=clean_stores.database_url,
        redis_url=clean_stores.redis_url,
        data_dir=clean_stores.data_dir,
        chat_turns_per_minute=1_000_000,
        chat_max_text=1_000,
    )
    rt = build_runtime(configured, registry=KindRegistry())
    set_runtime(rt)
    yield rt
    set_runtime(None)


@pytest.fixture
def people(runtime: Runtime) -> PersonTokens:
    return PersonTokens(runtime)


@pytest.fixture
def client(runtime: Runtime, people: PersonTokens) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, authenticate_person=people.authenticate)
    with TestClient(app) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def post_turn(
    client: TestClient, delegate: str, token: str, body: Any, key: str | None = "k1", **extra: str
) -> httpx.Response:
    headers = {**bearer(token), "Content-Type": "application/json", **extra}
    if key is not None:
        headers["Idempotency-Key"] = key
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(BASE.format(delegate) + "/turns", content=content, headers=headers)


def stored_turns(runtime: Runtime) -> int:
    with runtime.engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM user_turns")).scalar_one())


def test_a_turn_is_accepted_once_per_key_and_shows_in_the_history(
    runtime: Runtime, client: TestClient, people: PersonTokens
) -> None:
    token = people.issue("alice")
    first = post_turn(client, "alice", token, {"text": "hello", "channel": "app"})
    assert first.status_code == 202, first.text
    body = first.json()
    assert body["state"] == "queued" and body["duplicate"] is False
    again = post_turn(client, "alice", token, {"text": "hello", "channel": "app"})
    assert again.status_code == 202
    assert again.json() == {**body, "duplicate": True}
    # The same key with other words is a mistake of the client, not a second turn.
    other = post_turn(client, "alice", token, {"text": "something else"})
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
    assert stored_turns(runtime) == 1

    page = client.get(BASE.format("alice") + "/messages", headers=bearer(token)).json()
    [message] = page["items"]
    assert message["id"] == message["turn_id"] == body["turn_id"]
    assert (message["role"], message["text"], message["state"]) == ("person", "hello", "queued")
    assert message["channel"] == "app" and page["before"] is None


def test_twenty_concurrent_posts_with_one_key_make_one_turn(
    runtime: Runtime, people: PersonTokens
) -> None:
    token = people.issue("alice")
    app = create_app(lambda: runtime, authenticate_person=people.authenticate)
    answers: list[httpx.Response] = []
    with serving(app) as base:
        start = threading.Barrier(20)

        def send() -> None:
            start.wait()
            answers.append(
                httpx.post(
                    f"{base}{BASE.format('alice')}/turns",
                    json={"text": "once, please"},
                    headers={**bearer(token), "Idempotency-Key": "same-key"},
                    timeout=60,
                )
            )

        threads = [threading.Thread(target=send) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [a.status_code for a in answers] == [202] * 20
    assert len({a.json()["turn_id"] for a in answers}) == 1
    assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 19
    assert stored_turns(runtime) == 1


def _assistant_message(runtime: Runtime, delegate: str, reply: str, turn: str | None) -> None:
    with runtime.engine.begin() as connection:
        conversation.append_events(
            connection,
            delegate,
            [
                conversation.NewEvent(
                    conversation.CONTEXT_ATTACHED,
                    {"signals": [{"data": {"secret": "inner only"}}]},
                    turn_id=None if turn is None else uuid.UUID(turn),
                ),
                conversation.NewEvent(
                    conversation.ASSISTANT_MESSAGE,
                    {
                        "reply": reply,
                        "signals": [{"data": {"secret": "inner only"}}],
                        "envelope": "INNER ENVELOPE",
                        **({"autonomous": True} if turn is None else {}),
                    },
                    turn_id=None if turn is None else uuid.UUID(turn),
                ),
            ],
        )


def test_the_history_pages_backwards_through_both_speakers_without_inner_context(
    runtime: Runtime, client: TestClient, people: PersonTokens
) -> None:
    token = people.issue("alice")
    expected: list[tuple[str, str]] = []
    for n in range(7):
        answer = post_turn(client, "alice", token, {"text": f"question {n}"}, key=f"k{n}")
        turn = answer.json()["turn_id"]
        expected.append(("person", f"question {n}"))
        if n % 3 != 2:
            _assistant_message(runtime, "alice", f"answer {n}", turn)
            expected.append(("assistant", f"answer {n}"))
    _assistant_message(runtime, "alice", "a thought of my own", None)
    expected.append(("assistant", "a thought of my own"))
    post_turn(client, "bob", people.issue("bob"), {"text": "bob's words"}, key="b")

    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = {"limit": "3", **({"before": cursor} if cursor else {})}
        answer = client.get(BASE.format("alice") + "/messages", params=query, headers=bearer(token))
        assert answer.status_code == 200, answer.text
        pages.append(answer.json()["items"])
        cursor = answer.json()["before"]
        if cursor is None:
            break
    shown = [m for page in reversed(pages) for m in page]
    assert [(m["role"], m["text"]) for m in shown] == expected
    assert all(len(page) <= 3 for page in pages)
    assert "inner only" not in json.dumps(pages) and "ENVELOPE" not in json.dumps(pages)
    proactive = [m for m in shown if m["proactive"]]
    assert [m["text"] for m in proactive] == ["a thought of my own"]
    assert proactive[0]["turn_id"] is None and proactive[0]["state"] is None
    replies = [m for m in shown if m["role"] == "assistant" and not m["proactive"]]
    assert all(m["state"] == "answered" and m["turn_id"] for m in replies)

    bad = client.get(
        BASE.format("alice") + "/messages", params={"before": "nope"}, headers=bearer(token)
    )
    assert bad.status_code == 422 and bad.json()["field"] == "before"
    for limit in ("0", "201", "x", "1e3", "٣"):
        bad = client.get(
            BASE.format("alice") + "/messages", params={"limit": limit}, headers=bearer(token)
        )
        assert bad.status_code == 422 and bad.json()["field"] == "limit"


# --- scope -------------------------------------------------------------------------------------


def _request(client: TestClient, method: str, path: str, headers: dict[str, str]) -> int:
    if method == "POST":
        headers = {**headers, "Idempotency-Key": str(uuid.uuid4())}
        return client.post(path, json={"text": "hi"}, headers=headers).status_code
    if path.endswith("/stream"):
        with client.stream("GET", path, headers=headers) as response:
            return response.status_code
    return client.get(path, headers=headers).status_code


def test_every_conversation_route_is_scoped_to_its_delegate(
    runtime: Runtime, client: TestClient, people: PersonTokens
) -> None:
    alice = people.issue("alice", "phone")
    bob = people.issue("bob")
    _operator, operator_token = operators.add(runtime, "olga")
    _processor, processor_token = processors.add(runtime, "ci")
    for (method, template), scope in conversation_api.SCOPES.items():
        on_bob = template.replace("{delegate_id}", "bob")
        assert _request(client, method, on_bob, bearer(alice)) == 403, template
        assert _request(client, method, on_bob, {}) == 401, template
        assert _request(client, method, on_bob, bearer("ipp.garbage.x")) == 401, template
        assert _request(client, method, on_bob, bearer(processor_token)) == 403, template
        expected_operator = 403 if scope is conversation_api.Scope.SEND else 200
        assert _request(client, method, on_bob, bearer(operator_token)) == expected_operator
        if method == "GET" and not template.endswith("/stream"):
            assert _request(client, method, on_bob, bearer(bob)) == 200
    # A revoked token fails on its next request.
    assert _request(client, "GET", BASE.format("alice") + "/messages", bearer(alice)) == 200
    people.revoke("alice", "phone")
    assert _request(client, "GET", BASE.format("alice") + "/messages", bearer(alice)) == 401
    assert _request(client, "POST", BASE.format("alice") + "/turns", bearer(alice)) == 401
    assert stored_turns(runtime) == 0  # nothing of the refused POSTs was stored


def test_a_token_revoked_after_it_sent_is_refused_401_whatever_else_is_wrong(
    runtime: Runtime, client: TestClient, people: PersonTokens
) -> None:
    """A token that sent before passes the next send without a read of its row (the insert
    checks the row): revoked in between, its next send is 401 and stores nothing, also one that
    would otherwise be 422 (bad body, no key, an unknown question), 403 (another delegate's
    conversation) or a duplicate of an accepted key."""
    people.issue("bob")
    hostile: list[tuple[str, Any, str | None]] = [
        ("alice", {"text": "again"}, "k2"),
        ("alice", {"text": "hello"}, "k1"),  # a duplicate of the accepted turn
        ("alice", {"txt": "bad body"}, "k3"),
        ("alice", {"text": "x"}, None),  # no Idempotency-Key
        ("bob", {"text": "to bob"}, "k4"),
        ("alice", {"text": "a reply", "in_reply_to": str(uuid.uuid4())}, "k5"),
    ]
    for n, (delegate, body, key) in enumerate(hostile):
        label = f"phone{n}"
        token = people.issue("alice", label)
        sent = post_turn(client, "alice", token, {"text": "hello"}, key="k1")
        assert sent.status_code == 202, sent.text
        people.revoke("alice", label)
        refused = post_turn(client, delegate, token, body, key=key)
        assert refused.status_code == 401, (n, refused.text)
        assert refused.json()["error"] == "unauthorized"
    assert stored_turns(runtime) == 1  # the first "hello" (k1); the others were duplicates
    # A token that stands is still vouched for: its second send goes through.
    fresh = people.issue("alice", "tablet")
    assert post_turn(client, "alice", fresh, {"text": "one"}, key="t1").status_code == 202
    assert post_turn(client, "alice", fresh, {"text": "two"}, key="t2").status_code == 202
    assert stored_turns(runtime) == 3


def test_a_cookie_borne_turn_needs_the_pages_header(
    runtime: Runtime, client: TestClient, people: PersonTokens
) -> None:
    token = people.issue("alice")
    forged = client.post("/chat/login", data={"token": token}, follow_redirects=False)
    assert forged.status_code == 403  # no anti-CSRF token: another site's form
    form = client.get("/chat")
    csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    signed_in = client.post(
        "/chat/login", data={"token": token, "csrf": csrf}, follow_redirects=False
    )
    assert signed_in.status_code == 303 and "httponly" in signed_in.headers["set-cookie"].lower()
    path = BASE.format("alice") + "/turns"
    headers = {"Idempotency-Key": "c1"}
    refused = client.post(path, json={"text": "forged"}, headers=headers)
    assert refused.status_code == 403 and refused.json()["field"] == "x-inner-plane-ui"
    sent = client.post(path, json={"text": "mine"}, headers={**headers, "X-Inner-Plane-UI": "1"})
    assert sent.status_code == 202
    assert stored_turns(runtime) == 1
    page = client.get("/chat")
    assert page.status_code == 200 and 'data-delegate="alice"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert token not in page.text and token not in str(client.cookies)
    # Revoking the token ends the session it signed in.
    people.revoke("alice", "default")
    assert 'data-delegate="alice"' not in client.get("/chat").text
    again = client.post(path, json={"text": "x"}, headers={"Idempotency-Key": "c2"})
    assert again.status_code == 401


def every_route(routes: list[Any]) -> Iterator[tuple[str, set[str]]]:
    """(path, methods) of every route, those of included routers too (FastAPI keeps an
    included router whole, as one route holding the original)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from every_route(included.routes)
        elif getattr(route, "methods", None):
            yield route.path, set(route.methods)


def test_every_conversation_and_chat_route_has_a_scope_rule(
    runtime: Runtime, people: PersonTokens
) -> None:
    """A route added under the conversation or the chat page without a scope rule fails here."""
    app = create_app(lambda: runtime, authenticate_person=people.authenticate)
    served: set[tuple[str, str]] = set()
    for path, methods in every_route(app.routes):
        if path.startswith(conversation_api.PREFIX) or path == "/chat" or path.startswith("/chat/"):
            served.update((method, path) for method in methods - {"HEAD"})
    ruled = set(conversation_api.SCOPES) | set(chat_page.PAGE_SCOPES)
    assert served == ruled
    schema = app.openapi()
    for method, path in conversation_api.SCOPES:
        operation = schema["paths"][path][method.lower()]
        assert operation["security"] == [{"person": []}, {"operator": []}]


# --- hostile input -----------------------------------------------------------------------------

FIELDS = {"text", "channel", "in_reply_to", "Idempotency-Key", "body"}
weird_text = st.text(
    alphabet=st.characters(codec=None, categories=None, exclude_characters=None), max_size=40
) | st.sampled_from(["\u2028", "a\u2029b", "\x00", "\x1b[31m", "\ud800", "x" * 1_001, "  \n "])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | weird_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(weird_text, children, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "text": json_values | weird_text,
            "channel": json_values | st.sampled_from(["app", "APP", "a b", "\u2028", "x" * 40]),
            "in_reply_to": json_values
            | st.uuids().map(str)
            | st.sampled_from(["not-a-uuid", "\ud800"]),
            "extra": json_values,
        },
    ),
    json_values,
)
raw_bodies = st.sampled_from(
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"text": "' + b"a" * 300_000 + b'"}',
        b'{"text": NaN}',
        b'{"text": 1' + b"0" * 5_000 + b"}",
        b'{"text": "\\ud800"}',
        b'{"text": "\xff\xfe"}',
        b"",
        b"\x00\x00\x00{",
    ]
)
keys = (
    st.none()
    | st.sampled_from(["", " ", "k\u2028", "k\x7f", "x" * 201, "ok-key"])
    | st.text().filter(lambda k: not set(k) & set("\r\n\x00"))
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies | raw_bodies, key=keys)
def test_hostile_turns_answer_4xx_naming_the_field_and_store_nothing_invalid(
    runtime: Runtime, client: TestClient, people: PersonTokens, body: Any, key: str | None
) -> None:
    token = people.issued[0] if people.issued else people.issue("alice")
    before = stored_turns(runtime)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers: dict[str, str | bytes] = {**bearer(token), "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key.encode("utf-8")  # a header is bytes on the wire
    answer = client.post(BASE.format("alice") + "/turns", content=content, headers=headers)
    assert answer.status_code < 500, answer.text
    after = stored_turns(runtime)
    if answer.status_code == 202:
        # Only a valid turn is stored: then it is exactly what was sent.
        assert isinstance(body, dict) and isinstance(body.get("text"), str)
        assert key is not None
        assert after in (before, before + 1)
        turn = answer.json()["turn_id"]
        with runtime.engine.connect() as connection:
            stored = connection.execute(
                text("SELECT text FROM user_turns WHERE id = :id"), {"id": turn}
            ).scalar_one()
        assert stored == body["text"]
        return
    assert after == before, answer.text
    refusal = answer.json()
    assert answer.status_code in (413, 422), answer.text
    if answer.status_code == 422 or "field" in refusal:
        assert refusal["field"] in FIELDS or (
            isinstance(body, dict) and refusal["field"] in {k[:64] for k in body}
        ), refusal


def _unknown_questions(runtime: Runtime, count: int) -> list[str]:
    """Ids that name no question of alice's delegate, in every form a UUID may take: another
    delegate's question, the id of one of her own turns (not a question), the nil UUID, and
    random ones written in upper case, with braces and as URNs."""
    with runtime.engine.begin() as connection:
        bobs = connection.execute(
            text(
                "INSERT INTO questions (id, delegate_id, signal_id, about, text) VALUES "
                "(gen_random_uuid(), 'bob', gen_random_uuid(), 'task.completed', 'go?') "
                "RETURNING id"
            )
        ).scalar_one()
    turn = person.accept_turn(runtime.engine, "alice", "app", "a turn, not a question", "t0")
    forms = (str, lambda u: str(u).upper(), lambda u: "{" + str(u) + "}", lambda u: u.urn)
    ids = [str(bobs), str(turn.id), str(uuid.UUID(int=0))]
    ids += [forms[n % len(forms)](uuid.uuid4()) for n in range(count - len(ids))]
    return ids


def test_unknown_in_reply_to_store_nothing(
    runtime: Runtime, client: TestClient, people: PersonTokens
) -> None:
    """Ids that name no question of the delegate are refused with 422 naming in_reply_to, and
    nothing is stored (the slow test below sends 10,000)."""
    token = people.issue("alice")
    for n, reply_to in enumerate(_unknown_questions(runtime, 300)):
        answer = post_turn(
            client, "alice", token, {"text": "yes, do it", "in_reply_to": reply_to}, key=f"r{n}"
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == "in_reply_to"
    assert stored_turns(runtime) == 1  # the turn whose id was tried as a question


@pytest.mark.slow(reason="10,000 requests through the whole HTTP stack: 30-80 s on 2 shared cores")
def test_ten_thousand_unknown_in_reply_to_over_http_store_nothing(
    runtime: Runtime, people: PersonTokens
) -> None:
    """The issue's 10,000 in_reply_to values that name no question, each POSTed through the
    whole app (auth, rate limit, parsing, the statement that checks and inserts), eight at a
    time: every one 422 naming in_reply_to, never a 500, nothing stored."""
    token = people.issue("alice")
    unknown = _unknown_questions(runtime, 10_000)
    app = create_app(lambda: runtime, authenticate_person=people.authenticate)
    answers: list[tuple[int, str | None]] = []

    async def send_all() -> None:
        waiting = list(enumerate(unknown))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:

            async def sender() -> None:
                while waiting:
                    n, reply_to = waiting.pop()
                    answer = await http.post(
                        BASE.format("alice") + "/turns",
                        json={"text": "yes, do it", "in_reply_to": reply_to},
                        headers={**bearer(token), "Idempotency-Key": f"r{n}"},
                    )
                    answers.append((answer.status_code, answer.json().get("field")))

            await asyncio.gather(*(sender() for _ in range(8)))

    asyncio.run(send_all())
    assert len(answers) == 10_000
    assert set(answers) == {(422, "in_reply_to")}
    assert stored_turns(runtime) == 1  # the turn whose id was tried as a question


def test_too_many_turns_answer_429_with_retry_after(clean_stores: Stores) -> None:
    configured = build_settings(
        database_url=clean_stores.database_url,
        redis_url=clean_stores.redis_url,
        data_dir=clean_stores.data_dir,
        chat_turns_per_minute=3,
    )
    rt = build_runtime(configured, registry=KindRegistry())
    people = PersonTokens(rt)
    token = people.issue("alice")
    with TestClient(create_app(lambda: rt, authenticate_person=people.authenticate)) as client:
        answers = [
            post_turn(client, "alice", token, {"text": f"t{n}"}, key=f"k{n}") for n in range(5)
        ]
        big = post_turn(client, "alice", token, b"{" + b" " * 300_000 + b"}", key="big")
    assert [a.status_code for a in answers] == [202, 202, 202, 429, 429]
    assert int(answers[-1].headers["retry-after"]) >= 1
    assert big.status_code == 413
    assert stored_turns(rt) == 3
    rt.engine.dispose()
