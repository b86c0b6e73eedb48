"""The continuity decisions, pure: the daily token budget, the capsule's refresh triggers, the
labelled token count, the cost estimate and what a compaction keeps verbatim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.activation.tokens import ESTIMATE, cost_usd, counter_for, usage_counts
from inner_plane.agent.capsule import refresh_due
from inner_plane.agent.continuity import kept_messages
from inner_plane.journal.conversation.capsule import CapsuleVersion, RefreshState
from inner_plane.lane.decide import DeferForBudget, token_budget

NOW = datetime(2026, 12, 2, 17, 30, tzinfo=UTC)


def test_a_spent_budget_defers_to_the_next_utc_midnight_with_the_reason() -> None:
    assert token_budget(999, 1_000, NOW) is None
    assert token_budget(5_000, None, NOW) is None
    deferred = token_budget(1_000, 1_000, NOW)
    assert isinstance(deferred, DeferForBudget)
    assert deferred.until == datetime(2026, 12, 3, tzinfo=UTC)
    assert "token budget" in deferred.reason and "1000" in deferred.reason


@given(st.integers(0, 10**9), st.integers(1, 10**9))
def test_the_budget_defers_exactly_when_spent(used: int, budget: int) -> None:
    deferred = token_budget(used, budget, NOW)
    assert (deferred is not None) == (used >= budget)
    if deferred is not None:
        assert NOW < deferred.until <= NOW + timedelta(days=1)


def _state(
    latest: CapsuleVersion | None, newest: int, since: int, after: int, age_s: float = 0
) -> RefreshState:
    return RefreshState(
        latest=latest,
        newest_seq=newest,
        messages_since=since,
        window_after_seq=after,
        now=NOW + timedelta(seconds=age_s),
    )


def _version(through: int) -> CapsuleVersion:
    return CapsuleVersion(
        delegate_id="d",
        version=1,
        text="notes",
        trigger="messages",
        through_seq=through,
        created_at=NOW.isoformat(),
    )


def test_the_capsule_is_due_on_its_triggers() -> None:
    assert refresh_due(_state(None, 0, 0, 0), 20, 3600) is None  # nothing said
    assert refresh_due(_state(None, 30, 19, 0), 20, 3600) is None
    assert refresh_due(_state(None, 30, 20, 0), 20, 3600) == "messages"
    assert refresh_due(_state(_version(10), 30, 2, 25), 20, 3600) == "compaction"
    assert refresh_due(_state(_version(10), 30, 2, 5), 20, 3600) is None
    assert refresh_due(_state(_version(10), 30, 2, 5, age_s=3600), 20, 3600) == "schedule"
    # Nothing new since the last version: never due, whatever its age.
    assert refresh_due(_state(_version(30), 30, 0, 40, age_s=10**6), 1, 1) is None


def test_the_token_count_says_how_it_was_counted() -> None:
    counter = counter_for("a-local-model")
    assert counter.method == ESTIMATE
    assert counter.count("abcd" * 10) == 10
    item: dict[str, Any] = {"type": "compaction", "encrypted_content": "x" * 400}
    assert counter.item(item) > 100


def test_cost_from_the_price_table() -> None:
    prices = {"m": {"input": 2.0, "cached": 0.5, "output": 8.0}}
    usage = {"input_tokens": 1_000_000, "cached_tokens": 400_000, "output_tokens": 100_000}
    assert cost_usd("m", usage, prices) == pytest.approx(1.2 + 0.2 + 0.8)
    assert cost_usd("other", usage, prices) is None
    assert usage_counts({"input_tokens": True, "output_tokens": "5"}) == {
        "input_tokens": 0,
        "cached_tokens": 0,
        "output_tokens": 0,
        "reasoning_tokens": 0,
    }


def test_a_compaction_keeps_the_newest_messages_that_fit_and_at_least_the_count() -> None:
    assert kept_messages([100, 100, 100, 100, 100], 2, 250) == 2  # a third would not fit
    assert kept_messages([100, 100, 100, 100, 100], 2, 300) == 3
    assert kept_messages([100, 900, 50, 50], 1, 200) == 2  # the newest that fit, then stop
    assert kept_messages([100, 100], 4, 0) == 2  # the count alone: nothing left to compact
    assert kept_messages([10, 10, 10], 0, 1_000) == 2  # the tokens never keep the oldest
    assert kept_messages([], 4, 1_000) == 0


@given(st.lists(st.integers(0, 5_000), max_size=60), st.integers(0, 100), st.integers(0, 20_000))
def test_what_a_compaction_keeps_is_a_newest_run_within_its_rules(
    sizes: list[int], keep_messages: int, keep_tokens: int
) -> None:
    kept = kept_messages(sizes, keep_messages, keep_tokens)
    assert min(keep_messages, len(sizes)) <= kept <= len(sizes)
    if kept > keep_messages:  # more than the count: by the tokens, so they fit and leave one
        assert sum(sizes[len(sizes) - kept :]) <= keep_tokens
        assert kept < len(sizes)
    if min(keep_messages, len(sizes)) <= kept < len(sizes) - 1:  # stopped by the next one
        assert sum(sizes[len(sizes) - kept - 1 :]) > keep_tokens


def test_a_negative_keep_tokens_setting_is_refused_by_name() -> None:
    from inner_plane.config import ConfigError, build_settings

    with pytest.raises(ConfigError, match="INNER_PLANE_CONTEXT_KEEP_TOKENS"):
        build_settings(context_keep_tokens=-1)
    assert build_settings().context_keep_tokens is None  # a quarter of the threshold
