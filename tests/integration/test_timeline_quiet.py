"""The timeline's quiet entries on a journal the real lane wrote: ambient and next-turn
arrivals, an interrupt downgraded to a wake, deferrals for the wake budget and for a backoff, and
a quarantine appear between the conversation entries, each once, each linking its signal; and
the UI's other small pages answer (the favicon, the signal search's refusals)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.http.app import create_app
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.kinds import KindPolicy
from inner_plane.signals.model import Mode
from tests.support.lane_journal import run_lane

FLAKY = "test.flaky"


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(lambda: runtime, bind_host="127.0.0.1")) as test_client:
        yield test_client


def entry_types(html: str) -> list[str]:
    return re.findall(r'<li class="entry[^"]*"[^>]*data-type="([^"]+)"', html)


def test_quiet_entries_show_what_started_nothing(runtime: Runtime, client: TestClient) -> None:
    rt = replace(
        runtime,
        settings=runtime.settings.model_copy(
            update={
                "batch_quiet_ms": 0, "batch_max_age_ms": 0, "wake_budget_per_hour": 2,
                "retry_base_s": 600.0, "retry_max_s": 600.0,
            }
        ),
    )  # fmt: skip
    rt.registry.register(KindPolicy(FLAKY, Mode.WAKE, 50, max_attempts=5))
    flaky = publish(kind=FLAKY, source="ci", runtime=rt).id
    assert run_lane(rt, ScriptedAgent({"fail_kinds": [FLAKY]}))  # failed: it backs off
    ambient = publish(kind="memory.inserted", source="memory", runtime=rt).id
    next_turn = publish(
        kind="external.notes.saved", source="notes", mode="next-turn", runtime=rt
    ).id
    downgraded = publish(kind="task.completed", source="ci", mode="interrupt", runtime=rt).id
    odd = publish(kind="task.completed", source="ci", runtime=rt).id
    with rt.engine.begin() as connection:
        connection.execute(text("UPDATE signals SET source = 'x y' WHERE id = :id"), {"id": odd})
    assert run_lane(rt, ScriptedAgent())  # the second of the budget; the odd one quarantined
    budgeted = publish(kind="task.completed", source="ci", data={"n": 3}, runtime=rt).id
    assert run_lane(rt, ScriptedAgent()) == []  # the budget is spent: deferred

    page = client.get("/delegates/default").text
    types = entry_types(page)
    assert types.count("signal.arrived") == 2
    for quiet in ("signal.downgraded", "signal.retry_scheduled", "signal.quarantined"):
        assert types.count(quiet) == 1, (quiet, types)
    assert types.count("signal.deferred") == 1, types
    for signal_id in (ambient, next_turn, downgraded, flaky, odd, budgeted):
        assert f'href="/signals/{signal_id}"' in page, signal_id
    assert "Ambient signal arrived" in page and "Next-turn signal arrived" in page
    assert "Interrupt downgraded to wake" in page and "Deferred: wake budget spent" in page
    assert "Backing off" in page and "Quarantined" in page
    # In time order with the conversation's entries: the arrivals come between the first
    # activation (which failed) and the second.
    first_failed = types.index("inner.activation.failed")
    assert first_failed < types.index("signal.arrived") < types.index("inner.activation.completed")
    # The live view's fragment gives the same quiet entries since a moment.
    fragment = client.get("/ui/delegates/default/entries?after=0&since=2000-01-01T00:00Z").text
    assert sorted(entry_types(fragment)) == sorted(types)
    assert client.get("/ui/delegates/default/entries?since=soon").status_code == 422

    # The signal page says what holds the budgeted one back.
    held = client.get(f"/signals/{budgeted}").text
    assert "Held back until" in held and "budget" in held
    assert "requested, downgraded" in client.get(f"/signals/{downgraded}").text


def test_favicon_search_refusals_and_missing_pages(client: TestClient) -> None:
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"
    bad_state = client.get("/signals?state=lost")
    assert bad_state.status_code == 422 and "state: one of pending" in bad_state.text
    bad_time = client.get("/signals?until=tomorrow")
    assert bad_time.status_code == 422 and "until: not a date and time" in bad_time.text
    assert client.get("/signals?q=not-an-id").status_code == 422
    assert client.get("/signals/nope").status_code == 404
    assert client.get("/signals/00000000-0000-0000-0000-000000000000").status_code == 404
    found = client.get("/signals?q=00000000-0000-0000-0000-000000000000", follow_redirects=False)
    assert found.status_code == 303
    assert found.headers["location"] == "/signals/00000000-0000-0000-0000-000000000000"
    empty = client.get("/signals?kind=nothing.")
    assert empty.status_code == 200 and "No signals match." in empty.text


def test_times_follow_the_persons_time_zone_once_recorded(
    runtime: Runtime, client: TestClient
) -> None:
    from inner_plane.people import directory

    publish(kind="memory.inserted", source="memory", runtime=runtime)
    utc = client.get("/delegates/default").text
    assert re.search(r"<time [^>]*>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>", utc)
    directory.add(runtime, "default", display_name="Ada", time_zone="Europe/Berlin")
    berlin = client.get("/delegates/default").text
    assert "times in Europe/Berlin" in berlin
    stamp = re.search(r'<time [^>]*title="([^"]+)">([^<]+)</time>', berlin)
    assert stamp is not None
    assert stamp.group(2).endswith((" CET", " CEST")) and stamp.group(1).endswith(" UTC")
