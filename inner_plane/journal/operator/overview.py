"""The journal as an operator sees it: live counts, the oldest waiting work and each lane's
backlog, for `inner-plane status` and /metrics.

Every query reads a partial index of live rows (pending, claimed, running) or an index range of
dead rows, so its cost follows the live work and the dead letters, never the whole journal.
Plain SQL run through :class:`~inner_plane.journal.plain.Rows`: `status` reads it on a libpq
connection without loading SQLAlchemy, /metrics on the engine's.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass
from typing import Any

from inner_plane.journal.plain import Found, Read, Rows
from inner_plane.journal.predicates import (
    CLAIMABLE,
    WAKING,
    ambient_retained,
    due,
    lease_live,
    pending,
)

# Retained ambient signals are counted up to this many (then reported as "at least"): a plane
# of 100,000 delegates holds hundreds of thousands, and counting them all at each scrape and
# `status` would cost what the delegates number, not what the live work does (issue 30). A
# constant in the statement, not a parameter: a prepared statement's generic plan would not
# know the limit, cost the count as a tenth of the table and pay for JIT compilation.
AMBIENT_COUNT_CAP = 1_000

# Served by ix_signals_state_seq (state, seq): an index range per state; pending (the one
# definition, predicates.pending) by its partial index ix_signals_due.
_COUNTS = f"""
    SELECT
      (SELECT count(*) FROM signals WHERE {pending()}) AS pending,
      (SELECT count(*) FROM (SELECT 1 FROM signals WHERE {ambient_retained()}
        LIMIT {AMBIENT_COUNT_CAP}) retained) AS ambient,
      (SELECT count(*) FROM signals WHERE state = 'claimed') AS claimed,
      (SELECT count(*) FROM signals WHERE state = 'dead') AS dead,
      (SELECT count(*) FROM signals WHERE {due(CLAIMABLE, of=None)}) AS due,
      (SELECT EXTRACT(EPOCH FROM now() - min(created_at)) FROM signals
        WHERE {pending()}) AS oldest_pending_s,
      (SELECT EXTRACT(EPOCH FROM now() - max(updated_at)) FROM signals
        WHERE state = 'dead') AS newest_dead_s,
      (SELECT count(*) FROM user_turns WHERE state = 'queued') AS queued_turns,
      (SELECT count(*) FROM activations WHERE state = 'running') AS running_activations,
      (SELECT count(*) FROM leases WHERE {lease_live()}) AS leases_held,
      (SELECT count(*) FROM leases WHERE holder IS NOT NULL AND expires_at <= now())
        AS leases_expired
    """  # noqa: S608 - constant fragments

# Delegates with due work, those with due waking signals (the work that should have started an
# activation) first, then by backlog; with their lease and queued user turns. ``next-turn``
# signals are due too but wait for the next activation by design: they alone never make a lane
# look stuck.
_LANES = f"""
    WITH backlog AS (
      SELECT delegate_id, count(*) AS due, min(created_at) AS oldest,
             count(*) FILTER (WHERE {WAKING.format(p="")}) AS waking,
             min(created_at) FILTER (WHERE {WAKING.format(p="")}) AS oldest_waking
        FROM signals
       WHERE {due(CLAIMABLE, of=None)}
       GROUP BY delegate_id
       ORDER BY count(*) FILTER (WHERE {WAKING.format(p="")}) DESC, count(*) DESC, delegate_id
       LIMIT {{top}}
    )
    SELECT b.delegate_id, b.due, EXTRACT(EPOCH FROM now() - b.oldest) AS oldest_due_s,
           b.waking, EXTRACT(EPOCH FROM now() - b.oldest_waking) AS oldest_waking_s,
           {lease_live(alias="l")} AS leased,
           l.epoch,
           (SELECT count(*) FROM user_turns t
             WHERE t.delegate_id = b.delegate_id AND t.state = 'queued') AS queued_turns
      FROM backlog b LEFT JOIN leases l USING (delegate_id)
     ORDER BY b.waking DESC, b.due DESC, b.delegate_id
    """  # noqa: S608 - constant fragments

_DELEGATES_WITH_BACKLOG = f"""
    SELECT count(DISTINCT delegate_id) AS delegates FROM signals WHERE {due(CLAIMABLE, of=None)}
    """  # noqa: S608 - constant fragments


@dataclass(frozen=True)
class Counts:
    pending: int  # predicates.pending: non-ambient, due or not yet (delayed, backing off)
    ambient: int  # ambient signals retained (pending, never waited on), up to AMBIENT_COUNT_CAP
    ambient_capped: bool  # there are at least ``ambient`` (the count stopped at the cap)
    claimed: int
    dead: int
    due: int
    oldest_pending_s: float | None
    newest_dead_s: float | None
    queued_turns: int
    running_activations: int
    leases_held: int
    leases_expired: int

    def public(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Lane:
    delegate_id: str
    due: int
    oldest_due_s: float
    leased: bool
    epoch: int | None
    queued_turns: int
    waking: int = 0  # due signals of a waking mode (wake, interrupt): they start an activation
    oldest_waking_s: float | None = None

    @property
    def idle_with_waking_work(self) -> bool:
        """Due work that should have started an activation, and none holds the lease."""
        return self.waking > 0 and not self.leased

    def stuck(self, after_s: float) -> bool:
        """Idle with waking work whose oldest signal has waited more than ``after_s``."""
        return self.idle_with_waking_work and (self.oldest_waking_s or 0.0) > after_s

    def public(self) -> dict[str, Any]:
        return asdict(self)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _counts(found: Found) -> Counts:
    (row,) = found
    return Counts(
        pending=int(row["pending"]),
        ambient=int(row["ambient"]),
        ambient_capped=int(row["ambient"]) >= AMBIENT_COUNT_CAP,
        claimed=int(row["claimed"]),
        dead=int(row["dead"]),
        due=int(row["due"]),
        oldest_pending_s=_seconds(row["oldest_pending_s"]),
        newest_dead_s=_seconds(row["newest_dead_s"]),
        queued_turns=int(row["queued_turns"]),
        running_activations=int(row["running_activations"]),
        leases_held=int(row["leases_held"]),
        leases_expired=int(row["leases_expired"]),
    )


COUNTS = Read(_COUNTS, None, _counts)


def counts(rows: Rows) -> Counts:
    return COUNTS(rows)


def _lanes(found: Found) -> list[Lane]:
    return [
        Lane(
            delegate_id=str(row["delegate_id"]),
            due=int(row["due"]),
            oldest_due_s=float(row["oldest_due_s"]),
            waking=int(row["waking"]),
            oldest_waking_s=_seconds(row["oldest_waking_s"]),
            leased=bool(row["leased"]),
            epoch=None if row["epoch"] is None else int(row["epoch"]),
            queued_turns=int(row["queued_turns"]),
        )
        for row in found
    ]


def lanes_read(top: int) -> Read[list[Lane]]:
    """The ``top`` delegates with due work, those with due waking signals first, then by
    backlog (delegates without due work are idle lanes)."""
    # The limit is written into the statement, as the ambient count's cap is: as a parameter,
    # the generic plan of the prepared statement did not know it and always looked dearer than
    # a custom one, so PostgreSQL planned this statement again at every `status` and scrape
    # (0.3 ms of its 0.55). A caller's few limits are a few prepared statements.
    limit = operator.index(top)
    if limit < 0:
        raise ValueError(f"top: must be 0 or more, not {limit}")
    return Read(_LANES.replace("{top}", str(limit)), None, _lanes)


def lanes(rows: Rows, top: int) -> list[Lane]:
    return lanes_read(top)(rows)


def _delegates(found: Found) -> int:
    (row,) = found
    return int(row["delegates"])


DELEGATES_WITH_BACKLOG = Read(_DELEGATES_WITH_BACKLOG, None, _delegates)


def delegates_with_backlog(rows: Rows) -> int:
    return DELEGATES_WITH_BACKLOG(rows)


# Background activations per delegate in the last hour (the wake budget's measure), top N.
_WAKE_BUDGET = """
    SELECT delegate_id, count(*) AS used FROM activations
     WHERE started_at > now() - interval '1 hour' AND turn_id IS NULL
     GROUP BY delegate_id ORDER BY count(*) DESC, delegate_id LIMIT %(top)s
    """


def wake_budget_read(top: int) -> Read[dict[str, int]]:
    """The ``top`` delegates by background activations started within the hour."""
    return Read(_WAKE_BUDGET, {"top": top}, _wake_budget)


def _wake_budget(found: Found) -> dict[str, int]:
    return {str(row["delegate_id"]): int(row["used"]) for row in found}


# Today's token usage (UTC day), heaviest first: ix_token_usage_daily_day reads one day's rows.
_TOKENS_TODAY = """
    SELECT delegate_id, input_tokens, cached_tokens, output_tokens, reasoning_tokens, calls,
           cost_usd
      FROM token_usage_daily WHERE day = (now() AT TIME ZONE 'UTC')::date
     ORDER BY input_tokens + output_tokens DESC, delegate_id LIMIT %(top)s
    """


def tokens_today_read(top: int) -> Read[list[dict[str, Any]]]:
    """The ``top`` delegates by tokens (input + output) used today, with their cost estimate."""
    return Read(_TOKENS_TODAY, {"top": top}, _tokens)


def _tokens(found: Found) -> list[dict[str, Any]]:
    return [
        {
            "delegate_id": str(row["delegate_id"]),
            "input_tokens": int(row["input_tokens"]),
            "cached_tokens": int(row["cached_tokens"]),
            "output_tokens": int(row["output_tokens"]),
            "reasoning_tokens": int(row["reasoning_tokens"]),
            "tokens": int(row["input_tokens"]) + int(row["output_tokens"]),
            "calls": int(row["calls"]),
            "cost_usd": round(float(row["cost_usd"]), 6),
        }
        for row in found
    ]


def tokens_today(rows: Rows, top: int) -> list[dict[str, Any]]:
    return tokens_today_read(top)(rows)
