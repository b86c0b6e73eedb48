"""The API answers what its OpenAPI document declares: a refused parameter gets the declared
error body (not FastAPI's ``{"detail": [...]}``), naming the field and never echoing the value;
without a credential an operator route is 401 whatever its parameters; ids the server requires to
be UUIDs are declared with ``format: uuid``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inner_plane import operators
from inner_plane.http.app import create_app
from inner_plane.runtime import Runtime

ERROR_KEYS = {"error", "message", "field", "reason"}
BAD_PARAMETERS = [
    ("/v1/delegates", {"limit": "0"}, "limit"),
    ("/v1/delegates", {"limit": "many"}, "limit"),
    ("/v1/signals", {"until": "AAA"}, "until"),
    ("/v1/signals", {"since": "2026-13-45"}, "since"),
    ("/v1/delegates/default/charts", {"minutes": "1"}, "minutes"),
    ("/v1/delegates/default/timeline", {"after": "-1"}, "after"),
]


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def token(runtime: Runtime) -> str:
    _operator, token = operators.add(runtime, "alice")
    return token


@pytest.mark.parametrize(("path", "params", "field"), BAD_PARAMETERS)
def test_a_refused_parameter_gets_the_declared_error_body(
    client: TestClient, token: str, path: str, params: dict[str, str], field: str
) -> None:
    response = client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == ERROR_KEYS and "detail" not in body
    assert body["error"] == "invalid" and body["field"] == field
    assert body["message"].startswith(f"{field}: ")


@pytest.mark.parametrize(("path", "params", "field"), BAD_PARAMETERS)
def test_without_a_credential_it_is_401_before_any_validation(
    client: TestClient, token: str, path: str, params: dict[str, str], field: str
) -> None:
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        response = client.get(path, params=params, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_a_bad_path_id_is_401_without_a_credential_and_422_with_one(
    client: TestClient, token: str
) -> None:
    for path in ("/v1/activations/not-a-uuid", "/v1/signals/not-a-uuid/detail"):
        assert client.get(path).status_code == 401
        response = client.get(path, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 422 and set(response.json()) == ERROR_KEYS
    # The processors' status route: the credential is checked before the id too.
    assert client.get("/v1/signals/not-a-uuid").status_code == 401


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=st.text(min_size=1, max_size=300))
def test_the_refused_value_is_never_echoed(client: TestClient, token: str, value: str) -> None:
    marker = f"ECHO{value}ECHO"
    response = client.get(
        "/v1/signals", params={"until": marker}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 422
    assert "ECHO" not in response.text and len(response.content) < 600


def test_uuid_path_ids_are_declared_as_uuids(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    declared = {
        (path, parameter["name"]): parameter["schema"]
        for path, operations in document["paths"].items()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "path"
    }
    ids = {key: schema for key, schema in declared.items() if key[1] != "delegate_id"}
    assert len(ids) >= 7
    assert all(schema.get("format") == "uuid" for schema in ids.values()), ids
    # Every declared 422 is the API's error body.
    for operations in document["paths"].values():
        for operation in operations.values():
            refused = operation.get("responses", {}).get("422")
            if refused is not None:
                schema = refused["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, operation
    assert uuid.UUID(int=0)  # ids in the examples above are refused, never parsed loosely
