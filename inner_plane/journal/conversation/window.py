"""Each delegate's durable context window: what the model saw last of its conversation.

A window is the items a compaction returned (kept user messages and the API's ``compaction``
item, or the plane's labelled summary on Chat Completions), replayed exactly as stored, followed
by the conversation's messages after ``after_seq``. The composer reads it with the rest of an
activation's context (:mod:`inner_plane.journal.conversation.context`); a compaction replaces it
in one fenced transaction (:func:`replace`), so a holder that lost its lease, or died half way,
leaves the old window whole. A failed compaction is recorded on the row (:func:`note_failure`)
and tried again after ``retry_at``.

The row belongs to the delegate's open conversation: when a new conversation starts, the old
row no longer matches and the window starts empty.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import sqlalchemy
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Integer,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from inner_plane.journal.conversation import events
from inner_plane.journal.declarative import Base

Method = Literal["none", "compact", "summary"]
MESSAGE_TYPES = (events.USER_MESSAGE, events.ASSISTANT_MESSAGE)


class ContextWindowRow(Base):
    __tablename__ = "context_windows"

    delegate_id: Mapped[str] = mapped_column(Text, primary_key=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    items: Mapped[list[Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    after_seq: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    method: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'none'::text"))
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    item_tokens: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    failures: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    last_error: Mapped[str | None] = mapped_column(Text)
    retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    __table_args__ = (
        CheckConstraint("method IN ('none', 'compact', 'summary')", name="method"),
        CheckConstraint("jsonb_typeof(items) = 'array'", name="items"),
    )


_W = cast(Table, ContextWindowRow.__table__)

# The window of the delegate's open conversation (one row, by primary key), for the composer's
# snapshot statement: items and the seq its messages follow (0 when none was compacted yet).
WINDOW_OF_OPEN_CONVERSATION = """
    SELECT w.items, w.after_seq, w.method, w.version, w.item_tokens
      FROM context_windows w
      JOIN conversations c ON c.id = w.conversation_id AND c.ended_at IS NULL
     WHERE w.delegate_id = :delegate
"""
AFTER_SEQ = f"coalesce((SELECT win.after_seq FROM ({WINDOW_OF_OPEN_CONVERSATION}) win), 0)"  # noqa: S608


@dataclass(frozen=True)
class WindowMessage:
    seq: int
    type: str
    text: str
    turn_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Window:
    """A delegate's window as read for maintenance: its stored items and the messages since."""

    delegate_id: str
    conversation_id: uuid.UUID | None
    items: list[dict[str, Any]]
    after_seq: int
    method: str
    version: int
    item_tokens: int
    messages: list[WindowMessage] = field(default_factory=list)
    failures: int = 0
    last_error: str | None = None
    retry_at: datetime | None = None
    now: datetime | None = None

    @property
    def retry_due(self) -> bool:
        return self.retry_at is None or self.now is None or self.retry_at <= self.now


def message_text(event_type: str, payload: dict[str, Any]) -> str:
    if event_type == events.ASSISTANT_MESSAGE:
        return str(payload.get("reply") or payload.get("content") or "")
    return str(payload.get("text") or payload.get("content") or "")


_READ = text(
    """
    WITH conv AS (SELECT id FROM conversations WHERE delegate_id = :delegate AND ended_at IS NULL),
         win AS (SELECT w.* FROM context_windows w JOIN conv ON conv.id = w.conversation_id
                  WHERE w.delegate_id = :delegate)
    SELECT (SELECT id FROM conv) AS conversation_id,
           (SELECT row_to_json(win) FROM win) AS window,
           now() AS now,
           (SELECT coalesce(json_agg(m ORDER BY m.seq), '[]'::json) FROM (
               SELECT e.seq, e.type, e.payload, e.turn_id
                 FROM conversation_events e
                WHERE e.conversation_id = (SELECT id FROM conv)
                  AND e.type IN ('user.message', 'assistant.message')
                  AND e.seq > coalesce((SELECT after_seq FROM win), 0)
                ORDER BY e.seq DESC
                LIMIT :limit) m) AS messages
    """
)


def read(connection: sqlalchemy.Connection, delegate_id: str, limit: int) -> Window:
    """The delegate's window and up to ``limit`` newest messages after it (oldest first)."""
    row = connection.execute(_READ, {"delegate": delegate_id, "limit": limit}).one()
    stored: dict[str, Any] = row.window or {}
    messages = [
        WindowMessage(
            seq=int(m["seq"]),
            type=str(m["type"]),
            text=message_text(
                str(m["type"]), m["payload"] if isinstance(m["payload"], dict) else {}
            ),
            turn_id=None if m["turn_id"] is None else uuid.UUID(m["turn_id"]),
        )
        for m in row.messages
    ]
    retry_at = stored.get("retry_at")
    return Window(
        delegate_id=delegate_id,
        conversation_id=row.conversation_id,
        items=[i for i in stored.get("items") or [] if isinstance(i, dict)],
        after_seq=int(stored.get("after_seq") or 0),
        method=str(stored.get("method") or "none"),
        version=int(stored.get("version") or 0),
        item_tokens=int(stored.get("item_tokens") or 0),
        messages=messages,
        failures=int(stored.get("failures") or 0),
        last_error=stored.get("last_error"),
        retry_at=None if retry_at is None else datetime.fromisoformat(retry_at),
        now=row.now,
    )


_REPLACE = text(
    """
    INSERT INTO context_windows AS w
           (delegate_id, conversation_id, items, after_seq, method, version, item_tokens,
            failures, last_error, retry_at, updated_at)
    VALUES (:delegate, :conversation, CAST(:items AS jsonb), :after_seq, :method, 1, :item_tokens,
            0, NULL, NULL, now())
    ON CONFLICT (delegate_id) DO UPDATE
       SET conversation_id = EXCLUDED.conversation_id, items = EXCLUDED.items,
           after_seq = EXCLUDED.after_seq, method = EXCLUDED.method,
           version = CASE WHEN w.conversation_id = EXCLUDED.conversation_id
                          THEN w.version + 1 ELSE 1 END,
           item_tokens = EXCLUDED.item_tokens, failures = 0, last_error = NULL,
           retry_at = NULL, updated_at = now()
     WHERE w.conversation_id <> EXCLUDED.conversation_id OR w.version = :expected
    RETURNING version
    """
)


def replace(
    connection: sqlalchemy.Connection,
    window: Window,
    *,
    items: list[dict[str, Any]],
    after_seq: int,
    method: Method,
    item_tokens: int,
) -> int | None:
    """Replace ``window`` (as read) with a compaction's result, in the caller's fenced
    transaction; the new version, or None if the window changed since it was read."""
    if window.conversation_id is None:
        return None
    found = connection.execute(
        _REPLACE,
        {
            "delegate": window.delegate_id,
            "conversation": window.conversation_id,
            "items": json.dumps(items),
            "after_seq": after_seq,
            "method": method,
            "item_tokens": item_tokens,
            "expected": window.version,
        },
    ).scalar()
    return None if found is None else int(found)


_FAILED = text(
    """
    INSERT INTO context_windows AS w
           (delegate_id, conversation_id, failures, last_error, retry_at, updated_at)
    VALUES (:delegate, :conversation, 1, :error, now() + make_interval(secs => :backoff_s), now())
    ON CONFLICT (delegate_id) DO UPDATE
       SET failures = w.failures + 1, last_error = EXCLUDED.last_error,
           retry_at = now() + make_interval(secs => :backoff_s * power(2, least(w.failures, 6))),
           updated_at = now()
    """
)


def note_failure(
    connection: sqlalchemy.Connection, window: Window, error: str, backoff_s: float
) -> None:
    """A compaction failed: the window stays as it is; the failure is counted and shown, and
    the next try waits ``backoff_s`` doubled per failure in a row (up to 64 times)."""
    if window.conversation_id is None:
        return
    connection.execute(
        _FAILED,
        {
            "delegate": window.delegate_id,
            "conversation": window.conversation_id,
            "error": error[:2000],
            "backoff_s": backoff_s,
        },
    )


def describe(connection: sqlalchemy.Connection, delegate_id: str) -> dict[str, Any] | None:
    """The window's state for operators (no items: they are opaque and may be large)."""
    row = connection.execute(
        sqlalchemy.select(
            _W.c.method,
            _W.c.version,
            _W.c.after_seq,
            _W.c.item_tokens,
            _W.c.failures,
            _W.c.last_error,
            _W.c.retry_at,
            _W.c.updated_at,
            func.jsonb_array_length(_W.c["items"]).label("items"),
        ).where(_W.c.delegate_id == delegate_id)
    ).first()
    if row is None:
        return None
    values = dict(row._mapping)
    for key in ("retry_at", "updated_at"):
        values[key] = None if values[key] is None else values[key].isoformat()
    return values
