"""What ``status`` and ``/metrics`` show of the channels, read through :class:`~inner_plane.
journal.plain.Rows` (no SQLAlchemy: ``status`` starts without it): each mailbox's last poll,
IDLE state, error and backlog, and the answers waiting to go out."""

from __future__ import annotations

from typing import Any

from inner_plane.journal.plain import Found, Read, Rows

MAILBOXES_SHOWN = 100

_MAILBOXES = """
    SELECT delegate_id, username || '@' || host || ':' || port || '/' || folder AS mailbox,
           EXTRACT(EPOCH FROM now() - last_poll_at)::float8 AS last_poll_age_s,
           idle, backlog, last_error
      FROM mailboxes ORDER BY delegate_id LIMIT %(limit)s
"""
# The partial index ix_channel_messages_pending: as many rows as are waiting.
_PENDING = """
    SELECT channel, count(*) AS waiting FROM channel_messages
     WHERE reply_state = 'pending' GROUP BY channel
"""


def mailboxes_read(limit: int = MAILBOXES_SHOWN) -> Read[list[dict[str, Any]]]:
    return Read(_MAILBOXES, {"limit": limit}, _mailboxes)


def _mailboxes(found: Found) -> list[dict[str, Any]]:
    return [dict(row) for row in found]


def mailboxes(rows: Rows, limit: int = MAILBOXES_SHOWN) -> list[dict[str, Any]]:
    return mailboxes_read(limit)(rows)


def _pending(found: Found) -> dict[str, int]:
    return {str(row["channel"]): int(row["waiting"]) for row in found}


ANSWERS_PENDING = Read(_PENDING, None, _pending)


def answers_pending(rows: Rows) -> dict[str, int]:
    """Answers (turns that came in by mail or text) not sent yet, by channel."""
    return ANSWERS_PENDING(rows)
