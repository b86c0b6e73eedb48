"""Token usage summed per delegate per day (UTC), with its estimated cost: every model call's
usage (activations, compactions, capsule refreshes) is added in the transaction that records
its ``context.usage`` event. The daily token budget reads today's row."""

from __future__ import annotations

from datetime import date
from typing import Any, TypedDict, cast

import sqlalchemy
from sqlalchemy import BigInteger, Date, Float, Index, Integer, Table, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.declarative import Base


class TokenUsageDailyRow(Base):
    __tablename__ = "token_usage_daily"

    delegate_id: Mapped[str] = mapped_column(Text, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    cached_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    reasoning_tokens: Mapped[int] = mapped_column(
        BigInteger, nullable=False, server_default=text("0")
    )
    calls: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    cost_usd: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))

    __table_args__ = (Index("ix_token_usage_daily_day", "day"),)


_U = cast(Table, TokenUsageDailyRow.__table__)

# Today's row of the delegate, added to (the day is the database's, in UTC).
ADD_SQL = """
    INSERT INTO token_usage_daily AS u
           (delegate_id, day, input_tokens, cached_tokens, output_tokens, reasoning_tokens,
            calls, cost_usd)
    VALUES (:usage_delegate, (now() AT TIME ZONE 'UTC')::date, :input_tokens, :cached_tokens,
            :output_tokens, :reasoning_tokens, :calls, :cost_usd)
    ON CONFLICT (delegate_id, day) DO UPDATE
       SET input_tokens = u.input_tokens + EXCLUDED.input_tokens,
           cached_tokens = u.cached_tokens + EXCLUDED.cached_tokens,
           output_tokens = u.output_tokens + EXCLUDED.output_tokens,
           reasoning_tokens = u.reasoning_tokens + EXCLUDED.reasoning_tokens,
           calls = u.calls + EXCLUDED.calls,
           cost_usd = u.cost_usd + EXCLUDED.cost_usd
"""
# As a common table expression of the activation's closing statement.
ADD_CTE = f"usage_added AS ({ADD_SQL})"


def add_params(
    delegate_id: str, counts: dict[str, int], calls: int, cost: float | None
) -> dict[str, Any]:
    return {
        "usage_delegate": delegate_id,
        "input_tokens": counts.get("input_tokens", 0),
        "cached_tokens": counts.get("cached_tokens", 0),
        "output_tokens": counts.get("output_tokens", 0),
        "reasoning_tokens": counts.get("reasoning_tokens", 0),
        "calls": calls,
        "cost_usd": cost or 0.0,
    }


def add(
    connection: sqlalchemy.Connection,
    delegate_id: str,
    counts: dict[str, int],
    calls: int,
    cost: float | None,
) -> None:
    """Add one model call's (or activation's) usage to today's row, in the caller's
    transaction."""
    connection.execute(text(ADD_SQL), add_params(delegate_id, counts, calls, cost))


class DailyUsage(TypedDict):
    delegate_id: str
    day: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int
    calls: int
    cost_usd: float


def _daily(row: Any) -> DailyUsage:
    return DailyUsage(
        delegate_id=row.delegate_id,
        day=row.day.isoformat(),
        input_tokens=int(row.input_tokens),
        cached_tokens=int(row.cached_tokens),
        output_tokens=int(row.output_tokens),
        reasoning_tokens=int(row.reasoning_tokens),
        total_tokens=int(row.input_tokens) + int(row.output_tokens),
        calls=int(row.calls),
        cost_usd=float(row.cost_usd),
    )


def recent_days(
    connection: sqlalchemy.Connection, delegate_id: str, days: int = 14
) -> list[DailyUsage]:
    """The delegate's newest ``days`` days, newest first (primary key)."""
    rows = connection.execute(
        sqlalchemy.select(_U)
        .where(_U.c.delegate_id == delegate_id)
        .order_by(_U.c.day.desc())
        .limit(days)
    )
    return [_daily(row) for row in rows]


def top_today(connection: sqlalchemy.Connection, limit: int = 10) -> list[DailyUsage]:
    """Today's heaviest delegates (ix_token_usage_daily_day: one day's rows)."""
    rows = connection.execute(
        text(
            """
            SELECT * FROM token_usage_daily
             WHERE day = (now() AT TIME ZONE 'UTC')::date
             ORDER BY input_tokens + output_tokens DESC, delegate_id
             LIMIT :limit
            """
        ),
        {"limit": limit},
    )
    return [_daily(row) for row in rows]


# Today's tokens of the delegate (input + output), for the daily budget.
TODAY_TOKENS = """
    coalesce((SELECT u.input_tokens + u.output_tokens FROM token_usage_daily u
               WHERE u.delegate_id = :delegate AND u.day = (now() AT TIME ZONE 'UTC')::date), 0)
"""


def tokens_today(connection: sqlalchemy.Connection, delegate_id: str) -> int:
    """The delegate's tokens (input + output) of the current UTC day (primary key)."""
    return int(
        connection.execute(text(f"SELECT {TODAY_TOKENS}"), {"delegate": delegate_id}).scalar_one()
    )
