"""The UI's pages on a journal filled by the real lane: each renders, payloads are inert text,
security headers are set, inner context is never drawn as a user message, and without a
credential (once an operator exists) pages send to the sign-in form."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from inner_plane import operators
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.http.app import create_app
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.lane_journal import Filled, fill, lane_runtime, run_lane
from tests.support.ui_session import sign_in

HOSTILE = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">'


@pytest.fixture
def filled(runtime: Runtime) -> Filled:
    found = fill(runtime)
    publish(kind="task.completed", source="copilot", data={"note": HOSTILE})
    run_lane(lane_runtime(runtime), ScriptedAgent({"reply": HOSTILE}))
    return found


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(lambda: runtime, bind_host="127.0.0.1")
    with TestClient(app) as test_client:
        yield test_client


def test_every_page_renders_with_inert_payloads(client: TestClient, filled: Filled) -> None:
    pages = [
        "/",
        "/delegates/default",
        f"/activations/{filled.background}",
        f"/activations/{filled.failed}",
        "/dead-letters",
        "/ui/overview",
        "/ui/delegates/default/entries?after=0",
        "/login",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:500])
        assert "<script>window.__xss" not in response.text, path
        assert 'onerror="window' not in response.text, path
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
    timeline = client.get("/delegates/default").text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in timeline
    # Inner context is never drawn as a user message: user bubbles hold only the user's words.
    user_entries = re.findall(r'<li class="entry cat-user[^"]*"[^>]*data-type="([^"]+)"', timeline)
    assert user_entries == ["user.message"]
    assert "Inner context attached to user turn" in timeline
    assert 'class="badge">Inner Plane<' in timeline
    assert "Claimed batch" in timeline and "Inner-context envelope" in timeline
    activation = client.get(f"/activations/{filled.background}").text
    assert "task.completed" in activation and "ThoughtFlow" in activation
    assert str(filled.dead_signal) in client.get("/dead-letters").text
    for asset in ("/static/app.js", "/static/style.css"):
        assert client.get(asset).status_code == 200


def test_pages_need_an_operator_once_one_exists(
    runtime: Runtime, client: TestClient, filled: Filled
) -> None:
    _operator, token = operators.add(runtime, "dana")
    response = client.get("/delegates/default", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/delegates/default"
    wrong = sign_in(client, "ipo.dana.nope")
    assert wrong.status_code == 401
    signed_in = sign_in(client, token, "/dead-letters", follow_redirects=False)
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/dead-letters"
    assert client.get("/dead-letters").status_code == 200  # the cookie now
    # An action with only the cookie needs the UI's header (no cross-site forgery).
    forged = client.post(f"/v1/signals/{filled.dead_signal}/retry")
    assert forged.status_code == 403
    done = client.post(f"/v1/signals/{filled.dead_signal}/retry", headers={"X-Inner-Plane-UI": "1"})
    assert done.status_code == 200 and done.json()["operator"] == "dana"
    offsite = sign_in(client, token, "//evil.example/", follow_redirects=False)
    assert offsite.headers["location"] == "/"


def test_turn_and_timer_pages_render_inert_and_refuse_odd_ids(
    runtime: Runtime, client: TestClient, filled: Filled
) -> None:
    from inner_plane.timers.api import add_timer

    timer = add_timer({"name": "nightly", "purpose": HOSTILE, "every_s": 60}, runtime=runtime)
    for path in (f"/turns/{filled.turn_id}", f"/timers/{timer.id}"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert (
            "<script>window.__xss" not in response.text and 'onerror="window' not in response.text
        )
    turn = client.get(f"/turns/{filled.turn_id}").text
    assert f'href="/activations/{filled.turn_activation}"' in turn
    assert f'href="/signals/{filled.attached_signal}"' in turn
    assert (
        f'href="/turns/{filled.turn_id}"'
        in client.get(f"/activations/{filled.turn_activation}").text
    )
    named = client.get("/delegates/default/timers/nightly", follow_redirects=False)
    assert named.status_code == 303 and named.headers["location"] == f"/timers/{timer.id}"
    for odd in (
        "/turns/not-a-uuid",
        "/turns/00000000-0000-0000-0000-000000000000",
        "/timers/%00",
        "/timers/00000000-0000-0000-0000-000000000000",
        "/delegates/default/timers/no-such-timer",
    ):
        response = client.get(odd)
        assert response.status_code in (404, 422), (odd, response.status_code)
        assert "Traceback" not in response.text


def test_a_turn_that_answers_a_question_shows_the_question_and_links_it(
    runtime: Runtime, client: TestClient, filled: Filled
) -> None:
    import uuid

    from sqlalchemy import text

    from inner_plane.lane.user_turns import user_turn

    question = uuid.uuid4()
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO questions (id, delegate_id, signal_id, activation_id, about, text) "
                "VALUES (:q, 'default', :s, :a, 'deploy', :t)"
            ),
            {"q": question, "s": filled.background_signal, "a": filled.background, "t": HOSTILE},
        )
    turn = user_turn("default", "yes, roll it back", "sms", runtime=runtime, in_reply_to=question)
    page = client.get(f"/turns/{turn}").text
    assert f'href="/signals/{filled.background_signal}"' in page
    assert f'href="/activations/{filled.background}"' in page
    assert "<script>window.__xss" not in page and str(question) not in page
