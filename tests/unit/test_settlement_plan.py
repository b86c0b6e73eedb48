"""The settlement plan, one pure rule for the lane and the ThoughtFlow record: every branch
(not rendered, not settled, each disposition, deferral with and without a time)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from inner_plane.activation import (
    DEFAULT_DEFERRAL,
    NOT_RENDERED,
    NOT_SETTLED,
    Activation,
    AgentResult,
    Disposition,
    Settlement,
    SignalOutcome,
    Trigger,
    WorkingContext,
    plan_settlement,
)
from inner_plane.journal.conversation.thoughtflow import build_record
from inner_plane.signals.model import Signal

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def signal(n: int) -> Signal:
    return Signal.model_validate(
        {
            "id": uuid.UUID(int=n),
            "delegate_id": "default",
            "kind": "test.event",
            "source": "test",
            "mode": "wake",
            "priority": 0,
            "data": {},
            "trust": "trusted",
            "attempts": 1,
            "max_attempts": 5,
            "last_error": None,
            "caused_by": None,
            "expires_at": None,
            "created_at": NOW,
            "occurred_at": NOW,
            "available_at": NOW,
            "updated_at": NOW,
            "dedup_key": f"k{n}",
            "state": "claimed",
        }
    )


def activation(count: int) -> Activation:
    return Activation(
        id=uuid.uuid4(),
        delegate_id="default",
        trigger=Trigger.WAKE,
        epoch=1,
        now=NOW,
        signals=tuple(signal(n) for n in range(1, count + 1)),
    )


def test_unrendered_signals_return_and_unsettled_ones_are_dismissed_by_the_plane() -> None:
    act = activation(3)
    first, second, third = (s.id for s in act.signals)
    plan = plan_settlement(act, {first, second}, {first: Settlement(Disposition.ACTED, "done")})
    assert plan.returned == [third]
    assert plan.settled == [
        SignalOutcome(first, "delivered", "acted", "done", None, "agent"),
        SignalOutcome(second, "dismissed", "dismissed", NOT_SETTLED, None, "plane"),
    ]


def test_a_settlement_of_an_unrendered_signal_is_ignored() -> None:
    act = activation(1)
    only = act.signals[0].id
    plan = plan_settlement(act, set(), {only: Settlement(Disposition.ACTED)})
    assert plan.returned == [only] and plan.settled == []


@pytest.mark.parametrize(
    ("disposition", "state"),
    [
        (Disposition.ACTED, "delivered"),
        (Disposition.ESCALATED, "delivered"),
        (Disposition.NEEDS_INPUT, "delivered"),
        (Disposition.DISMISSED, "dismissed"),
    ],
)
def test_each_final_disposition_maps_to_its_state(disposition: Disposition, state: str) -> None:
    act = activation(1)
    only = act.signals[0].id
    plan = plan_settlement(act, {only}, {only: Settlement(disposition, "why")})
    assert plan.settled == [SignalOutcome(only, state, disposition.value, "why", None, "agent")]


def test_deferred_with_a_time_returns_to_pending_until_then() -> None:
    act = activation(1)
    only = act.signals[0].id
    later = NOW + timedelta(hours=2)
    plan = plan_settlement(act, {only}, {only: Settlement(Disposition.DEFERRED, "later", later)})
    assert plan.settled == [SignalOutcome(only, "pending", "deferred", "later", later, "agent")]


def test_deferred_without_a_time_takes_the_default_deferral() -> None:
    act = activation(1)
    only = act.signals[0].id
    plan = plan_settlement(act, {only}, {only: Settlement(Disposition.DEFERRED, "later")})
    assert timedelta(minutes=5) == DEFAULT_DEFERRAL
    assert plan.settled[0].until == NOW + DEFAULT_DEFERRAL


def test_a_time_given_with_a_final_disposition_is_not_kept() -> None:
    act = activation(1)
    only = act.signals[0].id
    settlement = Settlement(Disposition.ACTED, "done", NOW + timedelta(hours=1))
    assert plan_settlement(act, {only}, {only: settlement}).settled[0].until is None


def test_the_thoughtflow_record_shows_the_same_plan_default_deferral_included() -> None:
    act = activation(3)
    first, second, third = (s.id for s in act.signals)
    context = WorkingContext(act, [], {first, second})
    result = AgentResult(settlements={first: Settlement(Disposition.DEFERRED, "later")})
    record = build_record(act, context, result, 1.0, None)
    assert record["dispositions"] == {
        str(first): {
            "disposition": "deferred",
            "reason": "later",
            "by": "agent",
            "until": (NOW + DEFAULT_DEFERRAL).isoformat(),
        },
        str(second): {"disposition": "dismissed", "reason": NOT_SETTLED, "by": "plane"},
        str(third): {"disposition": "returned", "reason": NOT_RENDERED, "by": "plane"},
    }


def test_the_thoughtflow_record_of_a_failure_marks_every_signal_failed() -> None:
    act = activation(2)
    record = build_record(act, None, None, 1.0, "boom")
    assert {v["disposition"] for v in record["dispositions"].values()} == {"failed"}
    assert {v["reason"] for v in record["dispositions"].values()} == {"boom"}
