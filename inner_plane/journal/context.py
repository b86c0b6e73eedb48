"""Everything the composer reads for one activation, in one round trip: standing memories,
recalled memories, relevant ambient signals and the conversation's recent messages."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

import sqlalchemy
from sqlalchemy import text

from inner_plane.journal.ambient import RELEVANT_QUERY, AmbientSignal
from inner_plane.journal.database import typed_mapping
from inner_plane.journal.memories import DF_CAP, RECALL_QUERY, MemoryRecord, RecalledMemory

# Four independent reads as scalar subqueries of one statement: each round trip costs about as
# much as a whole small query on a busy machine, and composition runs on every activation.
SNAPSHOT_SQL = text(
    f"""
    SELECT
      (SELECT coalesce(json_agg(s ORDER BY s.created_at, s.id), '[]'::json) FROM (
          SELECT id, delegate_id, kind, content, relation, related_ids, source, signal_id,
                 superseded_by, created_at
          FROM memories
          WHERE delegate_id = :delegate AND kind = 'standing' AND superseded_by IS NULL
          ORDER BY created_at, id
          LIMIT :standing_limit) s) AS standing,
      (SELECT coalesce(json_agg(r ORDER BY r.rank DESC, r.created_at DESC), '[]'::json)
       FROM ({RECALL_QUERY}) r) AS recalled,
      (SELECT coalesce(json_agg(a ORDER BY a.rank DESC, a.created_at DESC), '[]'::json)
       FROM ({RELEVANT_QUERY}) a) AS ambient,
      -- The open conversation first, then its messages newest first through the partial
      -- index ix_conversation_events_messages: the scan stops after :history_limit rows.
      (SELECT coalesce(json_agg(h ORDER BY h.seq), '[]'::json) FROM (
          SELECT e.seq, e.type, e.payload, e.turn_id, e.created_at
          FROM conversation_events e
          WHERE e.conversation_id = (SELECT c.id FROM conversations c
                                      WHERE c.delegate_id = :delegate AND c.ended_at IS NULL)
            AND e.type IN ('user.message', 'assistant.message')
          ORDER BY e.seq DESC
          LIMIT :history_limit) h) AS history
    """  # noqa: S608 - the interpolated queries are constants, every input is a bound parameter
)

_UUIDS = ("id", "signal_id", "superseded_by", "turn_id")
_TIMES = ("created_at", "occurred_at")


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    """A row as json_agg wrote it, its ids and times read back from their JSON text."""
    for key in _UUIDS:
        if row.get(key) is not None:
            row[key] = uuid.UUID(row[key])
    for key in _TIMES:
        if row.get(key) is not None:
            row[key] = datetime.fromisoformat(row[key])
    if "related_ids" in row:
        row["related_ids"] = [uuid.UUID(value) for value in row["related_ids"] or ()]
    return row


class HistoryMessage(TypedDict):
    """A user or assistant message of the delegate's open conversation."""

    seq: int
    type: str
    payload: dict[str, Any]
    turn_id: uuid.UUID | None
    created_at: datetime


@dataclass(frozen=True)
class Snapshot:
    standing: list[MemoryRecord]
    recalled: list[RecalledMemory]
    ambient: list[AmbientSignal]
    history: list[HistoryMessage]  # oldest first


def snapshot(
    connection: sqlalchemy.Connection,
    *,
    delegate_id: str,
    recall_cue: str,
    ambient_cue: str,
    standing_limit: int,
    recall_limit: int,
    ambient_limit: int,
    history_limit: int,
) -> Snapshot:
    row = connection.execute(
        SNAPSHOT_SQL,
        {
            "delegate": delegate_id,
            "cap": DF_CAP,
            "recall_cue": recall_cue,
            "ambient_cue": ambient_cue,
            "standing_limit": standing_limit,
            "recall_limit": recall_limit,
            "ambient_limit": ambient_limit,
            "history_limit": history_limit,
        },
    ).one()
    return Snapshot(
        standing=[typed_mapping(MemoryRecord, _typed(r)) for r in row.standing],
        recalled=[typed_mapping(RecalledMemory, _typed(r)) for r in row.recalled],
        ambient=[typed_mapping(AmbientSignal, _typed(r)) for r in row.ambient],
        history=[typed_mapping(HistoryMessage, _typed(r)) for r in row.history],
    )
