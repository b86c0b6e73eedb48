"""Schema-driven fuzzing of the HTTP API with schemathesis (hypothesis underneath), against the
OpenAPI document the running server serves: no 500s, responses conform to the document, and an
invalid body never stores a row. Bounded (~200 examples in all) so it stays fast."""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from inner_plane.runtime import Runtime
from tests.support.http_api import bearer, register

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
FUZZ = settings(
    max_examples=70,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


def _grant(runtime: Runtime) -> dict[str, str]:
    # A broad grant so that schema-valid signals can also be accepted, not only refused.
    token = register(runtime, "fuzz", delegates=["*"], max_mode="interrupt", rate_limit=100_000)
    return bearer(token)


def test_invalid_bodies_never_500_and_never_store(runtime: Runtime, api: str) -> None:
    headers = _grant(runtime)
    schema = schemathesis.openapi.from_url(f"{api}/openapi.json")
    operation = schema["/v1/signals"]["POST"]
    statuses: list[int] = []

    @FUZZ
    @given(case=operation.as_strategy(GenerationMode.NEGATIVE))
    def fuzz(case: Any) -> None:
        before = runtime.signals.count()
        response = case.call(base_url=api, headers=headers)
        case.validate_response(response, checks=CHECKS)
        statuses.append(response.status_code)
        if response.status_code >= 400:
            assert runtime.signals.count() == before, response.text

    fuzz()
    assert statuses and all(status < 500 for status in statuses)
    assert any(status in (400, 413, 422) for status in statuses)


def test_schema_valid_bodies_are_accepted_or_refused_precisely(runtime: Runtime, api: str) -> None:
    headers = _grant(runtime)
    schema = schemathesis.openapi.from_url(f"{api}/openapi.json")
    operation = schema["/v1/signals"]["POST"]
    statuses: list[int] = []

    @FUZZ
    @given(case=operation.as_strategy(GenerationMode.POSITIVE), inside=st.booleans())
    def fuzz(case: Any, inside: bool) -> None:
        if inside:  # half the cases aim inside the grant, so acceptance is exercised too
            items = case.body.get("signals", [case.body])
            for n, item in enumerate(items):
                item["kind"] = f"external.fuzz.e{n}"
                item.pop("source", None)
        before = runtime.signals.count()
        response = case.call(base_url=api, headers=headers)
        case.validate_response(response, checks=CHECKS)
        statuses.append(response.status_code)
        if response.status_code >= 400:
            assert runtime.signals.count() == before, response.text

    fuzz()
    assert all(status in (200, 201, 403, 422) for status in statuses), sorted(set(statuses))
    assert 201 in statuses and runtime.signals.count() > 0


def test_status_lookups_never_500(runtime: Runtime, api: str) -> None:
    headers = _grant(runtime)
    schema = schemathesis.openapi.from_url(f"{api}/openapi.json")
    operation = schema["/v1/signals/{signal_id}"]["GET"]

    @settings(FUZZ, max_examples=40)
    @given(case=operation.as_strategy())
    def fuzz(case: Any) -> None:
        response = case.call(base_url=api, headers=headers)
        case.validate_response(response, checks=CHECKS)
        assert response.status_code in (404, 422)

    fuzz()
    assert httpx.get(f"{api}/healthz").status_code == 200


def test_found_signal_conforms_to_the_document(runtime: Runtime, api: str) -> None:
    headers = _grant(runtime)
    published = httpx.post(
        f"{api}/v1/signals", json={"kind": "external.fuzz.one", "data": {"a": [1]}}, headers=headers
    ).json()
    schema = schemathesis.openapi.from_url(f"{api}/openapi.json")
    operation = schema["/v1/signals/{signal_id}"]["GET"]

    @settings(FUZZ, max_examples=3)
    @given(case=operation.as_strategy(path_parameters={"signal_id": published["id"]}))
    def fetch(case: Any) -> None:
        response = case.call(base_url=api, headers=headers)
        assert response.status_code == 200
        case.validate_response(response, checks=CHECKS)

    fetch()
