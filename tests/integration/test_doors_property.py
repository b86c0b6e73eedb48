"""No request gives a 5xx (issue 29): random headers, query and path values, with the whole byte
range including NUL and numbers of 10,000 digits, against every route the app serves (the
OpenAPI document's and the UI's, found in the app itself: a route added later is covered
without editing this test), on real PostgreSQL and Redis, with the journal filled by the lane.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Mount, Route

from inner_plane import operators
from inner_plane.http.app import create_app
from inner_plane.http.guards import flat_routes
from inner_plane.http.operator_auth import COOKIE
from inner_plane.mcp_adapter.http import build_route
from inner_plane.runtime import Runtime
from tests.support.lane_journal import Filled, fill
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN

# Answers that never end while the client stays (the live feed, MCP's GET stream): sent only
# without a valid credential, so that the in-process client gets its answer.
# Streams never end by themselves: each is sent with a refused credential, so its refusal (not
# an endless body) is what the request reads.
STREAMS = {
    ("GET", "/v1/events"),
    ("GET", "/mcp"),
    ("GET", "/v1/delegates/{delegate_id}/conversation/stream"),
}
PARAMETER = re.compile(r"{([^}:]+)(?::[^}]*)?}")

# Every byte a URL can carry (percent-encoded), NUL included, and a few shapes that broke
# parsers before: huge numbers, UUID-like strings, dots.
ANY_TEXT = st.text(
    st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=["Cs"]), max_size=40
)
VALUES = st.one_of(
    ANY_TEXT,
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    st.integers(min_value=1, max_value=10_000).map(lambda n: "9" * n),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.uuids().map(str),
    st.sampled_from(["", ".", "..", "%00", "\x00", "-1", "0", "1e999", "NaN", "null", "a" * 5000]),
)
# Header values a client can send (HTTP forbids CR, LF and NUL in them; the server never sees
# those): visible ASCII and latin-1, any length up to a few KiB.
HEADER_TEXT = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60),
    st.integers(min_value=1, max_value=4000).map(lambda n: "9" * n),
)
HEADER_NAMES = [
    "authorization", "x-inner-plane-processor", "x-inner-plane-timestamp",
    "x-inner-plane-signature", "idempotency-key", "last-event-id", "x-forwarded-for",
    "content-type", "x-inner-plane-ui", "accept", "mcp-session-id", "mcp-protocol-version",
    "x-twilio-signature",
]  # fmt: skip


def served_routes(app: object) -> list[tuple[str, str]]:
    """(method, path template) of every route the app answers, included routers and mounts
    (a mount as its path and a random rest)."""
    found = []
    for route in flat_routes(app.routes):  # type: ignore[attr-defined]
        if isinstance(route, Mount):
            found.append(("GET", route.path + "/{rest}"))
        elif isinstance(route, Route):
            for method in sorted(route.methods or {"GET", "POST"}):
                if method != "HEAD":
                    found.append((method, route.path))
        else:  # the MCP route (a Starlette Route too) or something new: fail loudly
            raise AssertionError(f"a route this test does not know how to call: {route!r}")
    return found


@pytest.fixture
def setup(runtime: Runtime) -> Iterator[tuple[TestClient, list[tuple[str, str]], str, Filled]]:
    # No throttle in the way: every random request should reach its route's own checks.
    # SMS configured, so that the webhook's own checks (not its 404) meet the random requests.
    settings_ = runtime.settings.model_copy(
        update={
            "auth_failures_per_minute": 10**9,
            "twilio_account_sid": ACCOUNT_SID,
            "twilio_auth_token": AUTH_TOKEN,
        }
    )
    rt = replace(runtime, settings=settings_)
    filled = fill(rt)
    _, token = operators.add(rt, "prop")
    app = create_app(
        lambda: rt, mounts=[build_route(lambda: rt, 1024 * 1024)], bind_host="127.0.0.1"
    )
    routes = served_routes(app)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, routes, token, filled


def test_every_route_of_the_openapi_document_is_served_and_called(
    setup: tuple[TestClient, list[tuple[str, str]], str, Filled],
) -> None:
    client, routes, _, _ = setup
    document = client.get("/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    }
    assert documented <= set(routes)
    ui = {("GET", "/"), ("GET", "/login"), ("POST", "/login"), ("GET", "/dead-letters")}
    assert ui <= set(routes)


def test_no_request_gives_a_5xx(
    setup: tuple[TestClient, list[tuple[str, str]], str, Filled],
) -> None:
    client, routes, token, filled = setup
    known_ids = [str(filled.background), str(filled.dead_signal), "default"]
    called: Counter[tuple[str, str]] = Counter()

    @settings(
        max_examples=40 * len(routes),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(data=st.data())
    def one_request(data: st.DataObject) -> None:
        method, template = data.draw(st.sampled_from(routes), label="route")
        values = {
            name: data.draw(st.one_of(VALUES, st.sampled_from(known_ids)), label=name)
            for name in PARAMETER.findall(template)
        }
        path = PARAMETER.sub(lambda m: quote(values[m.group(1)], safe=""), template)
        query = data.draw(
            st.lists(st.tuples(st.one_of(ANY_TEXT, st.sampled_from(
                ["limit", "cursor", "after", "delegate", "topic", "status", "kind", "next", "q"]
            )), VALUES), max_size=4),
            label="query",
        )  # fmt: skip
        headers = dict(
            data.draw(
                st.lists(st.tuples(st.sampled_from(HEADER_NAMES), HEADER_TEXT), max_size=4),
                label="headers",
            )
        )
        credential = data.draw(st.sampled_from(["none", "operator", "cookie", "random"]))
        stream = (method, template) in STREAMS
        if credential == "operator" and not stream:
            headers["authorization"] = f"Bearer {token}"
        cookies = {COOKIE: data.draw(HEADER_TEXT)} if credential == "cookie" else {}
        if stream:
            headers["authorization"] = "Bearer ipo.nobody.x"
        body = data.draw(st.binary(max_size=200)) if method == "POST" else None
        client.cookies.clear()
        answer = client.request(
            method,
            path,
            params=query,
            headers=headers,
            cookies=cookies,
            content=body,
            follow_redirects=False,
        )
        called[(method, template)] += 1
        assert answer.status_code < 500, (
            method, path, query, headers, answer.status_code, answer.text[:500],
        )  # fmt: skip

    one_request()
    missing = [route for route in routes if called[route] == 0]
    assert not missing, f"routes never called: {missing}"
