"""The operator API's view of a delegate's person: GET /v1/delegates/{id}/person (operators only;
never a token or its hash), and the delegate page of the operator UI showing it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from inner_plane import operators
from inner_plane.http.app import create_app
from inner_plane.people import directory
from inner_plane.runtime import Runtime
from inner_plane.sources import person_auth


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


def test_operators_read_the_person_never_a_token(runtime: Runtime, client: TestClient) -> None:
    _, operator = operators.add(runtime, "olga")
    directory.add(
        runtime,
        "ada",
        display_name="Ada <script>alert(1)</script>",
        time_zone="Europe/Berlin",
        emails=["ada@example.org"],
        phones=["+4915112345678"],
        quiet_hours="22:00-07:00",
    )
    _, token = person_auth.issue_token(runtime, "ada", "phone")
    headers = {"Authorization": f"Bearer {operator}"}

    found = client.get("/v1/delegates/ada/person", headers=headers)
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["time_zone"] == "Europe/Berlin" and body["phones"] == ["+4915112345678"]
    assert body["quiet_hours"] == {"start": "22:00", "end": "07:00"}
    assert [t["label"] for t in body["tokens"]] == ["phone"]
    assert token.split(".")[2] not in found.text and "scrypt" not in found.text

    missing = client.get("/v1/delegates/nobody/person", headers=headers)
    assert missing.status_code == 404
    assert client.get("/v1/delegates/ada/person").status_code == 401
    # A person's token is not an operator's: it opens nothing of the operator API.
    as_person = client.get("/v1/delegates/ada/person", headers={"Authorization": f"Bearer {token}"})
    assert as_person.status_code in (401, 403)
    assert "/v1/delegates/{delegate_id}/person" in client.get("/openapi.json").json()["paths"]


def test_the_delegate_page_shows_the_person_escaped(runtime: Runtime, client: TestClient) -> None:
    _, operator = operators.add(runtime, "olga")
    headers = {"Authorization": f"Bearer {operator}"}
    plain = client.get("/delegates/ada", headers=headers)
    assert plain.status_code == 200 and "No person recorded" in plain.text
    directory.add(
        runtime,
        "ada",
        display_name="Ada <img src=x onerror=alert(1)>",
        time_zone="Europe/Berlin",
        emails=["ada@example.org"],
        quiet_hours="22:00-07:00",
    )
    page = client.get("/delegates/ada", headers=headers)
    assert page.status_code == 200
    assert 'id="person"' in page.text and "Europe/Berlin" in page.text
    assert "22:00\u201307:00" in page.text and "ada@example.org" in page.text
    assert "<img src=x" not in page.text and "&lt;img src=x" in page.text
