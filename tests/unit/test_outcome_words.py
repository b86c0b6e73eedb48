"""What the timeline says about an activation and its times, as pure functions: the outcome in
words, and every moment with its date and the delegate's zone (UTC on hover)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from inner_plane.activation import SettlementPlan, SignalOutcome, outcome
from inner_plane.activation.settlement import NOT_RENDERED
from inner_plane.http.ui_views import when
from inner_plane.timeline import outcome_words, summary


def settled(disposition: str, reason: str) -> SignalOutcome:
    return SignalOutcome(uuid.uuid4(), "delivered", disposition, reason)


def test_the_outcome_in_words() -> None:
    plan = SettlementPlan(
        settled=[
            settled("acted", "emailed the user"),
            settled("dismissed", "no model configured"),
            settled("dismissed", "no model configured"),
        ]
    )
    assert outcome_words({"outcome": outcome(plan)}) == (
        "acted on 1 (emailed the user), dismissed 2 (no model configured)"
    )
    mixed = SettlementPlan(
        settled=[settled("dismissed", "stale"), settled("dismissed", "duplicate")],
        returned=[uuid.uuid4()],
    )
    assert outcome_words({"outcome": outcome(mixed)}) == (
        f"dismissed 2, returned 1 unread ({NOT_RENDERED})"
    )
    assert outcome_words({"outcome": outcome(SettlementPlan())}) == "no signals to settle"


def test_completed_and_failed_entries_say_it_with_the_duration() -> None:
    payload = {
        "duration_ms": 156.2,
        "outcome": {"counts": {"dismissed": 2}, "reasons": {"dismissed": "no model configured"}},
    }
    assert summary("inner.activation.completed", payload) == (
        "dismissed 2 (no model configured); in 156 ms"
    )
    failed = {"error": "boom", "duration_ms": 9, "outcome": {"counts": {"retrying": 1, "dead": 1}}}
    assert summary("inner.activation.failed", failed) == (
        "boom; 1 to retry after a backoff, 1 dead; in 9 ms"
    )
    # Written before outcomes were recorded, or by another hand: no words, never a crash.
    assert summary("inner.activation.completed", {"duration_ms": 5}) == "in 5 ms"
    assert summary("inner.activation.completed", {"outcome": {"counts": "x"}}) == ""
    assert summary("assistant.message", {"reply": None, "agent": "dry-run"}) == (
        "(no reply: dry run, no model configured)"
    )
    # A user turn's reply is the assistant's words alone, whatever it did with inner context.
    replied = {"reply": "Done.", "outcome": {"counts": {"acted": 1}, "reasons": {"acted": "x"}}}
    assert summary("assistant.message", replied) == "Done."


def test_times_show_date_and_zone_with_utc_on_hover() -> None:
    moment = datetime(2026, 12, 2, 17, 5, 7, 250000, tzinfo=UTC)
    shown = when(moment.isoformat(), "Europe/Berlin")
    assert shown == {
        "text": "2026-12-02 18:05:07 CET",
        "utc": "2026-12-02 17:05:07.250 UTC",
        "iso": "2026-12-02T17:05:07.250000+00:00",
    }
    assert when(moment, "UTC")["text"] == "2026-12-02 17:05:07 UTC"  # type: ignore[index]
    assert when(moment, "Not/AZone")["text"].endswith(" UTC")  # type: ignore[index]
    assert when("not a time", "UTC") is None and when(None) is None
