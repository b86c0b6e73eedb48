"""Token usage on the operator's dashboard and in the delegates overview: today's tokens (input
+ output, against the daily budget when one is set), their parts, calls and estimated cost, and
the context window's compaction state (with failed compactions), per delegate."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import text

from inner_plane import operators
from inner_plane.http.app import create_app
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.conversation import usage
from inner_plane.runtime import Runtime
from tests.integration.test_outbound import with_settings
from tests.support.ui_session import sign_in


def _journal(runtime: Runtime) -> None:
    """Two delegates with usage today (one of them also yesterday, which is not today's) and
    one window with a failed compaction."""
    with runtime.engine.begin() as connection:
        for delegate in ("ada", "bob"):
            conversation.current_conversation(connection, delegate)
        counts = {"input_tokens": 1200, "cached_tokens": 200, "output_tokens": 300}
        usage.add(connection, "ada", {**counts, "reasoning_tokens": 40}, 3, 0.0125)
        usage.add(connection, "bob", {"input_tokens": 10, "output_tokens": 5}, 1, None)
        connection.execute(
            text(
                "INSERT INTO token_usage_daily (delegate_id, day, input_tokens, output_tokens, "
                "calls) VALUES ('bob', (now() AT TIME ZONE 'UTC')::date - 1, 99999, 1, 7)"
            )
        )
        connection.execute(
            text(
                """INSERT INTO context_windows (delegate_id, conversation_id, method, version,
                       item_tokens, failures, last_error, retry_at)
                   SELECT 'ada', id, 'compact', 3, 812, 2, 'RateLimitError: 429',
                          now() + interval '1 minute'
                     FROM conversations WHERE delegate_id = 'ada' AND ended_at IS NULL"""
            )
        )
        # Signals make both delegates appear in the overview.
        for delegate in ("ada", "bob"):
            connection.execute(
                text(
                    """INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data,
                           trust, max_attempts, occurred_at, available_at, state)
                       VALUES (gen_random_uuid(), :d, 'task.completed', 'copilot', 'wake', 50,
                               '{}', 'trusted', 5, now(), now(), 'delivered')"""
                ),
                {"d": delegate},
            )


def test_todays_tokens_and_the_window_on_the_dashboard_and_the_overview(
    runtime: Runtime,
) -> None:
    rt = with_settings(runtime, daily_token_budget=50_000)
    _journal(rt)
    _operator, token = operators.add(rt, "alice")
    with TestClient(create_app(lambda: rt, bind_host="127.0.0.1")) as client:
        items = client.get("/v1/delegates", headers={"Authorization": f"Bearer {token}"}).json()[
            "items"
        ]
        by = {item["delegate_id"]: item for item in items}
        assert by["ada"]["tokens_today"] == {
            "tokens": 1500,
            "input_tokens": 1200,
            "cached_tokens": 200,
            "output_tokens": 300,
            "reasoning_tokens": 40,
            "calls": 3,
            "cost_usd": 0.0125,
            "budget": 50_000,
        }
        assert by["ada"]["context_window"]["failures"] == 2
        assert by["ada"]["context_window"]["version"] == 3
        assert by["bob"]["tokens_today"]["tokens"] == 15  # yesterday's is not today's
        assert by["bob"]["context_window"] is None

        sign_in(client, token)
        page = client.get("/").text
    cells = {
        name: re.search(
            rf'<tr data-delegate="{name}">.*?data-col="tokens-today">(.*?)</td>', page, re.S
        )
        for name in ("ada", "bob")
    }
    ada, bob = (re.sub(r"\s+", " ", m.group(1)) if m else "" for m in cells.values())
    assert "1500 / 50000" in ada and "3 call(s)" in ada and "~$0.0125" in ada
    assert "window compact v3" in ada and "2 failed compaction(s)" in ada
    assert "15 / 50000" in bob and "window" not in bob
    assert "<th>tokens today</th>" in page
