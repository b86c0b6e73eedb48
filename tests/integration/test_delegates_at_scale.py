"""A plane of many delegates (issue 30): the delegates overview pages through every delegate once
and is searched by a person's name a page at a time, and the reads `status` and /metrics run at
every scrape cost the page or the live work, never the number of delegates. Shown by behaviour
and by the plans PostgreSQL runs (EXPLAIN ANALYZE: the rows each step of a plan handled)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from inner_plane import operators
from inner_plane.http.app import create_app
from inner_plane.journal import plain
from inner_plane.journal.database import engine_rows
from inner_plane.journal.operator import delegates as delegate_reads
from inner_plane.journal.operator import overview
from inner_plane.runtime import Runtime
from tests.support import plans

DELEGATES = 3_000


@pytest.fixture
def many(runtime: Runtime) -> Runtime:
    """3,000 delegates named by a person, a lease or their signals (each table naming some the
    others do not), three retained ambient signals each for the first thousand, and names that
    hold LIKE's wildcards."""
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO people (delegate_id, display_name)
                SELECT 'p' || lpad(g::text, 5, '0'),
                       (ARRAY['Ada', 'ada', 'ADAM', 'Alan', 'Al_x', 'Al%y', 'Bea'])[1 + g % 7]
                       || ' ' || g
                  FROM generate_series(0, :n - 1) g WHERE g % 3 <> 0
                """
            ),
            {"n": DELEGATES},
        )
        connection.execute(
            text(
                "INSERT INTO leases (delegate_id, epoch) SELECT 'p' || lpad(g::text, 5, '0'), 1 "
                "FROM generate_series(0, :n - 1) g WHERE g % 3 <> 1"
            ),
            {"n": DELEGATES},
        )
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     max_attempts, occurred_at, available_at, expires_at)
                SELECT gen_random_uuid(), 'p' || lpad((g / 3)::text, 5, '0'), 'task.completed',
                       'feed', 'ambient', 50, '{}', 'trusted', 5, now(), now(),
                       now() + interval '7 days'
                  FROM generate_series(0, 2999) g
                """
            )
        )
        connection.execute(text("ANALYZE"))
    return runtime


def known_delegates(runtime: Runtime) -> list[str]:
    with runtime.engine.connect() as connection:
        return list(
            connection.execute(
                text(
                    "SELECT delegate_id FROM people UNION SELECT delegate_id FROM leases "
                    "UNION SELECT delegate_id FROM signals ORDER BY 1"
                )
            ).scalars()
        )


def every_page(runtime: Runtime, limit: int, **search: Any) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = delegate_reads.delegates_overview(
            runtime.engine, wake_budget_per_hour=60, cursor=cursor, limit=limit, **search
        )
        seen.extend(item["delegate_id"] for item in page.items)
        if page.next is None:
            return seen
        cursor = page.next


def test_the_overview_pages_through_every_delegate_once_in_order(many: Runtime) -> None:
    # Pages of 500: a page never reads more than a page from each table, and the union of the
    # pages is every delegate the journal knows, each once.
    assert every_page(many, 500) == known_delegates(many)


def test_a_search_by_name_pages_through_the_matches_in_name_order(many: Runtime) -> None:
    with many.engine.connect() as connection:
        expected = list(
            connection.execute(
                text(
                    "SELECT delegate_id FROM people WHERE lower(display_name) LIKE 'ada%' "
                    'ORDER BY lower(display_name COLLATE "C"), delegate_id'
                )
            ).scalars()
        )
    # Any case; 'ADAM' starts with 'ada' too.
    assert len(expected) > 500
    assert every_page(many, 97, name="AdA") == expected


def test_like_wildcards_in_a_searched_name_are_plain_characters(many: Runtime) -> None:
    underscore = every_page(many, 500, name="al_")
    percent = every_page(many, 500, name="al%")
    with many.engine.connect() as connection:
        people = connection.execute(text("SELECT delegate_id, display_name FROM people"))
        names = {str(row[0]): str(row[1]) for row in people}
    assert underscore and all(names[d].startswith("Al_x") for d in underscore)
    assert percent and all(names[d].startswith("Al%y") for d in percent)
    assert every_page(many, 50, name="%") == []


def test_the_api_searches_by_name_and_refuses_a_cursor_of_another_list(many: Runtime) -> None:
    _operator, token = operators.add(many, "alice")
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(lambda: many, bind_host="127.0.0.1")) as client:
        first = client.get("/v1/delegates", params={"name": "bea", "limit": 5}, headers=headers)
        assert first.status_code == 200, first.text
        body = first.json()
        assert len(body["items"]) == 5 and body["next"] is not None
        listed = client.get("/v1/delegates", params={"limit": 5}, headers=headers).json()
        # The listing's cursor (by delegate id) is not a cursor of the search (by name).
        refused = client.get(
            "/v1/delegates", params={"name": "bea", "cursor": listed["next"]}, headers=headers
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["field"] == "cursor"
        empty = client.get("/v1/delegates", params={"name": ""}, headers=headers)
        assert empty.status_code == 422 and "name" in empty.text


def analyzed(runtime: Runtime, sql: str, params: dict[str, Any], *settings: str) -> dict[str, Any]:
    with runtime.engine.connect() as connection:
        for setting in ("enable_seqscan = off", *settings):
            connection.exec_driver_sql(f"SET {setting}")
        top = plans.analyzed(connection, sql, params)
        connection.rollback()
    return top


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def handled(plan: dict[str, Any]) -> int:
    """The most rows any one step of the plan handled (rows times loops)."""
    return max(int(n["Actual Rows"] * n["Actual Loops"]) for n in nodes(plan))


def driver(sql: str) -> str:
    """SQLAlchemy's ``:name`` parameters as the driver's (``%(name)s``)."""
    for name in ("after_name", "after", "limit", "prefix", "stem"):
        sql = sql.replace(f":{name}", f"%({name})s")
    return sql.replace("%'", "%%'")


def test_a_page_of_the_overview_reads_a_page_not_every_delegate(many: Runtime) -> None:
    plan = analyzed(many, driver(delegate_reads._DELEGATES), {"after": "p01000", "limit": 51})
    # A page from each of the four tables naming delegates at most (of 3,000 delegates).
    assert handled(plan) <= 4 * 51, plan
    # "bea" sorts after every other name: its first page (from the empty key) and its second
    # (from the first's last key, inside the range) read as much; the first page's scan once
    # started at the index's beginning and walked every name before the prefix.
    with many.engine.connect() as connection:
        last = connection.execute(
            text(delegate_reads._BY_NAME),
            {"prefix": "bea%", "stem": "bea", "after_name": "", "after": "", "limit": 51},
        ).all()[-1]
    pages = [
        analyzed(
            many,
            driver(delegate_reads._BY_NAME),
            {"prefix": "bea%", "stem": "bea", "after_name": name_key, "after": after, "limit": 51},
            # Of 2,000 people the planner may as well sort the 858 matches; of 100,000 it walks
            # the index in order (bench.growth --dimension delegates): the plan it must have.
            "enable_bitmapscan = off",
        )
        for name_key, after in (("", ""), (last.name_key, last.delegate_id))
    ]
    for found in pages:
        assert handled(found) <= 2 * 51, found  # a page (and a row the LIKE filter may drop)
        assert {n.get("Index Name") for n in nodes(found)} >= {"ix_people_name"}
    # (19 and 15 buffers here: the first also descends to the range; from the empty key, 28.)
    assert plans.buffers(pages[0]) <= plans.buffers(pages[1]) + 5, [plans.buffers(p) for p in pages]


def test_status_and_metrics_counts_read_live_rows_and_a_capped_ambient_count(
    many: Runtime,
) -> None:
    plan = analyzed(many, overview._COUNTS, {})
    used = {n.get("Index Name") for n in nodes(plan)}
    assert {"ix_signals_ambient_retained", "ix_leases_held"} <= used
    assert "ix_signals_seq" not in used  # the oldest pending is read among the pending alone
    assert handled(plan) <= overview.AMBIENT_COUNT_CAP
    with many.engine.connect() as connection:
        counts = overview.counts(engine_rows(connection))
    # 3,000 retained: counted up to the cap, and said to be at least that.
    assert counts.ambient == overview.AMBIENT_COUNT_CAP and counts.ambient_capped
    assert counts.leases_held == 0 and counts.pending == 0 and counts.oldest_pending_s is None


def test_status_keeps_one_generic_plan_of_the_lanes_read(many: Runtime) -> None:
    """`status` and every /metrics scrape read the lanes with due work. With the number of
    lanes as a parameter of the prepared statement, its generic plan did not know the limit and
    always looked dearer than a custom one, so PostgreSQL planned it again at every call (0.3 ms
    of its 0.55 at 100,000 delegates in bench.growth)."""
    with many.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     max_attempts, occurred_at, available_at)
                SELECT gen_random_uuid(), 'p' || lpad((g % 600)::text, 5, '0'), 'task.completed',
                       'feed', CASE WHEN g % 4 = 0 THEN 'wake' ELSE 'next-turn' END, 50, '{}',
                       'trusted', 5, now(), now()
                  FROM generate_series(0, 1199) g
                """
            )
        )
        connection.execute(text("ANALYZE signals"))
    with plain.connect(many.settings.database_url, 5) as rows:
        for _ in range(15):  # psycopg prepares it at the 5th; the server compares from the 5th
            found = overview.lanes(rows, 10)
        plans_of_it = rows(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%WITH backlog AS%%'"
        )
    assert len(found) == 10 and found[0].waking > 0, found
    assert plans_of_it, "the lanes statement was not prepared"
    assert plans_of_it[0]["generic_plans"] > 0, plans_of_it
    # The statement as sent (its limit written in) reads the due signals by index, never the
    # retained ambient ones around them.
    sent: list[str] = []
    overview.lanes(lambda sql, params=None: sent.append(sql) or [], 10)
    plan = analyzed(many, sent[0], {})
    assert "ix_signals_due" in {n.get("Index Name") for n in nodes(plan)}, plan
    assert "Seq Scan" not in {n["Node Type"] for n in nodes(plan)}, plan
    assert handled(plan) <= 1_200, plan  # the due signals (wake and next-turn), not the ambient


def test_the_dashboard_searches_by_name_and_pages(many: Runtime) -> None:
    with TestClient(create_app(lambda: many, bind_host="127.0.0.1")) as client:
        page = client.get("/", params={"name": "BEA"})
        assert page.status_code == 200, page.text
        with many.engine.connect() as connection:
            beas = list(
                connection.execute(
                    text(
                        "SELECT delegate_id FROM people WHERE display_name LIKE 'Bea %' "
                        'ORDER BY lower(display_name COLLATE "C"), delegate_id'
                    )
                ).scalars()
            )
        shown = re.findall(r'<tr data-delegate="([^"]+)"', page.text)
        assert shown == beas[:100]
        assert 'rel="next"' in page.text and 'value="BEA"' in page.text
        # The live refresh asks for the same page.
        rows = client.get("/ui/overview", params={"name": "bea"}).text
        assert re.findall(r'data-delegate="([^"]+)"', rows) == beas[:100]
        bad = client.get("/", params={"name": "bea", "cursor": "not-a-cursor"})
        assert bad.status_code == 422


def test_status_says_the_ambient_count_is_at_least_the_cap() -> None:
    from inner_plane.cli.status import _text

    journal = {
        "pending": 0,
        "due": 0,
        "claimed": 0,
        "dead": 0,
        "ambient": overview.AMBIENT_COUNT_CAP,
        "ambient_capped": True,
        "oldest_pending_s": None,
        "queued_turns": 0,
        "running_activations": 0,
    }
    report = {
        "state": "healthy",
        "stores": {},
        "workers": {},
        "queues": {},
        "beat": {},
        "endpoints": {},
        "journal": journal,
        "lanes": [],
        "problems": [],
    }
    (line,) = [line for line in _text(report) if line.startswith("signals:")]
    assert f"{overview.AMBIENT_COUNT_CAP}+ ambient retained" in line
    uncapped = _text({**report, "journal": {**journal, "ambient": 3, "ambient_capped": False}})
    assert any("3 ambient retained" in line for line in uncapped)
