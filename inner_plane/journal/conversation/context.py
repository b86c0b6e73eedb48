"""Everything the composer reads for one activation, in one round trip: standing memories,
recalled memories, relevant ambient signals, and the conversation's context window (its stored
items, :mod:`inner_plane.journal.conversation.window`, and the messages after them)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy
from sqlalchemy import Integer, bindparam, text

from inner_plane.journal.conversation.capsule import LATEST_SQL as LATEST_CAPSULE
from inner_plane.journal.conversation.window import AFTER_SEQ, WINDOW_OF_OPEN_CONVERSATION
from inner_plane.journal.database import Record
from inner_plane.journal.memories import DF_CAP, RECALL_QUERY, MemoryRecord, RecalledMemory
from inner_plane.journal.signals.ambient import RELEVANT_QUERY, AmbientSignal

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
      -- The open conversation first, then its messages after the window's stored items,
      -- newest first through the partial index ix_conversation_events_messages: the scan
      -- stops after :history_limit rows or at the window's start, whichever comes first, so
      -- its cost does not grow with the conversation behind the window.
      (SELECT coalesce(json_agg(h ORDER BY h.seq), '[]'::json) FROM (
          SELECT e.seq, e.type, e.payload, e.turn_id, e.created_at
          FROM conversation_events e
          WHERE e.conversation_id = (SELECT c.id FROM conversations c
                                      WHERE c.delegate_id = :delegate AND c.ended_at IS NULL)
            AND e.type IN ('user.message', 'assistant.message')
            AND e.seq > {AFTER_SEQ}
          ORDER BY e.seq DESC
          LIMIT :history_limit) h) AS history,
      (SELECT row_to_json(w) FROM ({WINDOW_OF_OPEN_CONVERSATION}) w) AS window,
      (SELECT row_to_json(k) FROM ({LATEST_CAPSULE}) k) AS capsule
    """  # noqa: S608 - the interpolated queries are constants, every input is a bound parameter
).bindparams(
    # The word cap and the limits are written into the statement as numbers (a handful of
    # values in a process); the delegate and the cues stay parameters. After a few runs
    # PostgreSQL keeps one generic plan of a prepared statement when it costs no more than
    # planning each call; with the limits unknown it assumes 10% of a conversation's messages,
    # so on a big journal it planned every call again (+0.7 ms of server CPU a composition at
    # 1M rows; tests/integration/test_query_plans.py).
    *(
        bindparam(name, type_=Integer, literal_execute=True)
        for name in ("cap", "standing_limit", "recall_limit", "ambient_limit", "history_limit")
    )
)


class HistoryMessage(TypedDict):
    """A user or assistant message of the delegate's open conversation."""

    seq: int
    type: str
    payload: dict[str, Any]
    turn_id: uuid.UUID | None
    created_at: datetime


def _uuids(values: list[str]) -> list[uuid.UUID]:
    return [uuid.UUID(value) for value in values]


# The snapshot's rows come back as JSON: ids and times as text, read back by key.
_READ_BACK: dict[str, Callable[[Any], Any]] = {
    "id": uuid.UUID,
    "signal_id": uuid.UUID,
    "superseded_by": uuid.UUID,
    "turn_id": uuid.UUID,
    "created_at": datetime.fromisoformat,
    "occurred_at": datetime.fromisoformat,
    "related_ids": _uuids,
}


def _reader(kind: type[Record]) -> Callable[[dict[str, Any]], Record]:
    """Builds ``kind`` records from rows as json_agg wrote them, by key (KeyError for a key
    missing), each value but a null read back into its type in the same pass."""
    plan = tuple((key, _READ_BACK.get(key)) for key in kind.__annotations__)

    def read(row: dict[str, Any]) -> Record:
        record: dict[str, Any] = {}
        for key, read_back in plan:
            value = row[key]
            record[key] = value if read_back is None or value is None else read_back(value)
        return cast(Record, record)

    return read


_standing = _reader(MemoryRecord)
_recalled = _reader(RecalledMemory)
_ambient = _reader(AmbientSignal)
_history = _reader(HistoryMessage)


@dataclass(frozen=True)
class Snapshot:
    standing: list[MemoryRecord]
    recalled: list[RecalledMemory]
    ambient: list[AmbientSignal]
    history: list[HistoryMessage]  # oldest first, after the window's items
    window_items: list[dict[str, Any]] = field(default_factory=list)  # replayed as stored
    window_method: str = "none"
    window_version: int = 0
    capsule: dict[str, Any] | None = None  # the newest version: version, text, created_at


def snapshot_params(
    *,
    delegate_id: str,
    recall_cue: str,
    ambient_cue: str,
    standing_limit: int,
    recall_limit: int,
    ambient_limit: int,
    history_limit: int,
) -> dict[str, Any]:
    """:data:`SNAPSHOT_SQL`'s parameters, for :func:`snapshot` or for a caller that sends it
    along with another statement (``pipeline``) and reads its row with :func:`snapshot_answer`."""
    return {
        "delegate": delegate_id,
        "cap": DF_CAP,
        "recall_cue": recall_cue,
        "ambient_cue": ambient_cue,
        "standing_limit": standing_limit,
        "recall_limit": recall_limit,
        "ambient_limit": ambient_limit,
        "history_limit": history_limit,
    }


def snapshot(connection: sqlalchemy.Connection, params: Mapping[str, Any]) -> Snapshot:
    """The snapshot for :func:`snapshot_params`' ``params``, in one statement."""
    return snapshot_answer(connection.execute(SNAPSHOT_SQL, dict(params)).one()._mapping)


def snapshot_answer(row: Mapping[Any, Any]) -> Snapshot:
    """The snapshot from :data:`SNAPSHOT_SQL`'s one row."""
    window = row["window"] if isinstance(row["window"], dict) else {}
    return Snapshot(
        standing=[_standing(r) for r in row["standing"]],
        recalled=[_recalled(r) for r in row["recalled"]],
        ambient=[_ambient(r) for r in row["ambient"]],
        history=[_history(r) for r in row["history"]],
        window_items=[i for i in window.get("items") or [] if isinstance(i, dict)],
        window_method=str(window.get("method") or "none"),
        window_version=int(window.get("version") or 0),
        capsule=row["capsule"] if isinstance(row["capsule"], dict) else None,
    )
