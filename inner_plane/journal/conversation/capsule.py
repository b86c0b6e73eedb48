"""The continuity capsule's versions: a short document of each delegate's standing state
(commitments, open questions, the person's current situation, what it is waiting on), written
by the model on a refresh. Every version is kept, so operators can read each one and what
changed; the composer reads the newest."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy
from sqlalchemy import BigInteger, DateTime, Integer, Table, Text, func
from sqlalchemy import text as sql
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.declarative import Base


class CapsuleRow(Base):
    __tablename__ = "capsules"

    delegate_id: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    text: Mapped[str] = mapped_column(Text, nullable=False)
    trigger: Mapped[str] = mapped_column(Text, nullable=False)
    # The newest conversation event the refresh had seen.
    through_seq: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=sql("0"))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


_K = cast(Table, CapsuleRow.__table__)


class CapsuleVersion(TypedDict):
    delegate_id: str
    version: int
    text: str
    trigger: str
    through_seq: int
    created_at: str


def _version(row: Any) -> CapsuleVersion:
    return CapsuleVersion(
        delegate_id=row.delegate_id,
        version=int(row.version),
        text=row.text,
        trigger=row.trigger,
        through_seq=int(row.through_seq),
        created_at=row.created_at.isoformat(),
    )


# The newest version of the delegate's capsule (primary key, backwards), for the composer's
# snapshot statement.
LATEST_SQL = """
    SELECT k.version, k.text, k.created_at FROM capsules k
     WHERE k.delegate_id = :delegate ORDER BY k.version DESC LIMIT 1
"""


def latest(connection: sqlalchemy.Connection, delegate_id: str) -> CapsuleVersion | None:
    row = connection.execute(
        sqlalchemy.select(_K)
        .where(_K.c.delegate_id == delegate_id)
        .order_by(_K.c.version.desc())
        .limit(1)
    ).first()
    return None if row is None else _version(row)


def versions(
    connection: sqlalchemy.Connection, delegate_id: str, limit: int = 50
) -> list[CapsuleVersion]:
    """The delegate's versions, newest first."""
    rows = connection.execute(
        sqlalchemy.select(_K)
        .where(_K.c.delegate_id == delegate_id)
        .order_by(_K.c.version.desc())
        .limit(limit)
    )
    return [_version(row) for row in rows]


_ADD = sql(
    """
    INSERT INTO capsules (delegate_id, version, text, trigger, through_seq)
    SELECT :delegate, coalesce(max(version), 0) + 1, :text, :trigger, :through_seq
      FROM capsules WHERE delegate_id = :delegate
    RETURNING version
    """
)


def add_version(
    connection: sqlalchemy.Connection,
    delegate_id: str,
    capsule_text: str,
    trigger: str,
    through_seq: int,
) -> int:
    """Store a new version in the caller's (fenced) transaction; its number."""
    return int(
        connection.execute(
            _ADD,
            {
                "delegate": delegate_id,
                "text": capsule_text,
                "trigger": trigger,
                "through_seq": through_seq,
            },
        ).scalar_one()
    )


class RefreshState(TypedDict):
    """What the capsule's refresh triggers read."""

    latest: CapsuleVersion | None
    newest_seq: int  # the newest message of the open conversation (0: none)
    messages_since: int  # messages after the latest version's through_seq (capped)
    window_after_seq: int  # where the window's compacted part ends (moves on each compaction)
    now: datetime


_STATE = sql(
    """
    WITH conv AS (SELECT id FROM conversations WHERE delegate_id = :delegate AND ended_at IS NULL),
         k AS (SELECT * FROM capsules WHERE delegate_id = :delegate
                ORDER BY version DESC LIMIT 1)
    SELECT (SELECT row_to_json(k) FROM k) AS latest,
           coalesce((SELECT e.seq FROM conversation_events e
                      WHERE e.conversation_id = (SELECT id FROM conv)
                        AND e.type IN ('user.message', 'assistant.message')
                      ORDER BY e.seq DESC LIMIT 1), 0) AS newest_seq,
           (SELECT count(*) FROM (
               SELECT 1 FROM conversation_events e
                WHERE e.conversation_id = (SELECT id FROM conv)
                  AND e.type IN ('user.message', 'assistant.message')
                  AND e.seq > coalesce((SELECT through_seq FROM k), 0)
                ORDER BY e.seq DESC LIMIT :cap) m) AS messages_since,
           coalesce((SELECT w.after_seq FROM context_windows w
                      WHERE w.delegate_id = :delegate
                        AND w.conversation_id = (SELECT id FROM conv)), 0) AS window_after_seq,
           now() AS now
    """
)


def refresh_state(connection: sqlalchemy.Connection, delegate_id: str, cap: int) -> RefreshState:
    row = connection.execute(_STATE, {"delegate": delegate_id, "cap": cap}).one()
    latest = row.latest
    return RefreshState(
        latest=None
        if latest is None
        else CapsuleVersion(
            delegate_id=latest["delegate_id"],
            version=int(latest["version"]),
            text=latest["text"],
            trigger=latest["trigger"],
            through_seq=int(latest["through_seq"]),
            created_at=latest["created_at"],
        ),
        newest_seq=int(row.newest_seq),
        messages_since=int(row.messages_since),
        window_after_seq=int(row.window_after_seq),
        now=row.now,
    )
