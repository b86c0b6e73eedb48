"""Memory writes and reads.

A write declares its relation to existing knowledge. ``new`` publishes ``memory.inserted``
(ambient: a fresh extraction never wakes the agent, or every extraction would start another
activation); ``consolidated``, ``conflict`` and ``override`` publish the matching wake kinds with
the new and related memory ids. The memory id and the signal's dedup key are derived from the
outcome, so a re-fired callback for the same outcome stores nothing new and makes no second
signal, even if it died between the memory insert and the publication.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NotRequired, TypedDict

from inner_plane.journal import memories as journal
from inner_plane.journal.database import reading
from inner_plane.memory.query import cue_words, query_text
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.model import IDENTIFIER_RE, PublishResult

MAX_CONTENT = 16_384
# Content carried in the signal's data: enough to recognise the memory, bounded in size.
SIGNAL_CONTENT_CHARS = 2_000
MEMORY_ID_NAMESPACE = uuid.UUID("0b6f4f0e-8a4e-4c53-9d57-8f4a6f2b7c11")


class Relation(StrEnum):
    NEW = "new"
    CONSOLIDATED = "consolidated"
    CONFLICT = "conflict"
    OVERRIDE = "override"


class MemoryKind(StrEnum):
    STANDING = "standing"
    LEARNED = "learned"


SIGNAL_KIND = {
    Relation.NEW: "memory.inserted",
    Relation.CONSOLIDATED: "memory.consolidated",
    Relation.CONFLICT: "memory.conflict",
    Relation.OVERRIDE: "memory.override",
}


class MemoryInputError(ValueError):
    """A memory write was refused; ``field`` names the offending input. Nothing was stored."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class MemoryJson(TypedDict):
    """A memory as the CLI and the tools show it (JSON-ready)."""

    id: str
    delegate_id: str
    kind: str
    content: str
    relation: str
    related_ids: list[str]
    source: str
    signal_id: str | None
    superseded_by: str | None
    created_at: str
    rank: NotRequired[float]  # recall's score


@dataclass(frozen=True)
class Memory:
    id: uuid.UUID
    delegate_id: str
    kind: MemoryKind
    content: str
    relation: Relation
    related_ids: tuple[uuid.UUID, ...]
    source: str
    signal_id: uuid.UUID | None
    superseded_by: uuid.UUID | None
    created_at: datetime
    rank: float | None = None

    @classmethod
    def from_record(cls, record: journal.MemoryRecord, rank: float | None = None) -> Memory:
        return cls(
            id=record["id"],
            delegate_id=record["delegate_id"],
            kind=MemoryKind(record["kind"]),
            content=record["content"],
            relation=Relation(record["relation"]),
            related_ids=tuple(record["related_ids"] or ()),
            source=record["source"],
            signal_id=record["signal_id"],
            superseded_by=record["superseded_by"],
            created_at=record["created_at"],
            rank=rank,
        )

    def public(self) -> MemoryJson:
        shown = MemoryJson(
            id=str(self.id),
            delegate_id=self.delegate_id,
            kind=self.kind.value,
            content=self.content,
            relation=self.relation.value,
            related_ids=[str(i) for i in self.related_ids],
            source=self.source,
            signal_id=None if self.signal_id is None else str(self.signal_id),
            superseded_by=None if self.superseded_by is None else str(self.superseded_by),
            created_at=self.created_at.isoformat(),
        )
        if self.rank is not None:
            shown["rank"] = self.rank
        return shown


@dataclass(frozen=True)
class MemoryWrite:
    memory: Memory
    signal: PublishResult
    created: bool  # False: the same outcome was already stored (a re-fired write)


def derive_memory_id(
    delegate_id: str,
    kind: MemoryKind,
    relation: Relation,
    related: Sequence[uuid.UUID],
    content: str,
    outcome_key: str | None,
) -> uuid.UUID:
    if outcome_key is not None:
        return uuid.uuid5(MEMORY_ID_NAMESPACE, f"{delegate_id}/outcome/{outcome_key}")
    related_part = ",".join(sorted(str(i) for i in related))
    return uuid.uuid5(
        MEMORY_ID_NAMESPACE, f"{delegate_id}/{kind.value}/{relation.value}/{related_part}/{content}"
    )


def _validate(
    content: str,
    delegate_id: str,
    kind: str,
    relation: str,
    related_ids: Sequence[uuid.UUID | str],
    source: str,
    outcome_key: str | None,
) -> tuple[str, MemoryKind, Relation, list[uuid.UUID]]:
    if not isinstance(content, str) or not content.strip():
        raise MemoryInputError("content", "must be non-empty text")
    content = content.strip()
    if len(content) > MAX_CONTENT:
        raise MemoryInputError(
            "content", f"is {len(content)} characters; the limit is {MAX_CONTENT}"
        )
    if "\x00" in content:
        raise MemoryInputError("content", "must not contain NUL characters")
    if IDENTIFIER_RE.fullmatch(delegate_id) is None:
        raise MemoryInputError(
            "delegate_id", "must be 1 to 128 characters of letters, digits and '._:-'"
        )
    if IDENTIFIER_RE.fullmatch(source) is None:
        raise MemoryInputError(
            "source", "must be 1 to 128 characters of letters, digits and '._:-'"
        )
    try:
        memory_kind = MemoryKind(kind)
    except ValueError:
        raise MemoryInputError("kind", f"{kind!r} is not one of standing, learned") from None
    try:
        memory_relation = Relation(relation)
    except ValueError:
        raise MemoryInputError(
            "relation", f"{relation!r} is not one of new, consolidated, conflict, override"
        ) from None
    related: list[uuid.UUID] = []
    for value in related_ids:
        try:
            related.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise MemoryInputError("related_ids", f"{value!r} is not a memory id") from None
    related = list(dict.fromkeys(related))
    if memory_relation is Relation.NEW and related:
        raise MemoryInputError("related_ids", "a new memory relates to no existing memory")
    if memory_relation is not Relation.NEW and not related:
        raise MemoryInputError(
            "related_ids", f"a {memory_relation.value} memory must name the memories it relates to"
        )
    if outcome_key is not None and not 1 <= len(outcome_key) <= 256:
        raise MemoryInputError("outcome_key", "must be 1 to 256 characters")
    return content, memory_kind, memory_relation, related


def remember(
    content: str,
    *,
    delegate_id: str = "default",
    kind: MemoryKind | str = MemoryKind.LEARNED,
    relation: Relation | str = Relation.NEW,
    related_ids: Sequence[uuid.UUID | str] = (),
    source: str = "memory",
    outcome_key: str | None = None,
    caused_by: uuid.UUID | None = None,
    runtime: Runtime | None = None,
) -> MemoryWrite:
    """Store a memory and publish the signal its relation calls for.

    ``outcome_key`` names the outcome when the caller has one (a consolidation run id, say);
    otherwise the outcome is the content with its relation. Raises MemoryInputError, storing
    nothing, on bad input or related ids unknown for this delegate.
    """
    runtime = runtime or get_runtime()
    text, memory_kind, memory_relation, related = _validate(
        content, delegate_id, str(kind), str(relation), related_ids, source, outcome_key
    )
    memory_id = derive_memory_id(
        delegate_id, memory_kind, memory_relation, related, text, outcome_key
    )
    with runtime.engine.begin() as connection:
        found = journal.get_many(connection, delegate_id, related)
        missing = set(related) - {row["id"] for row in found}
        if missing:
            raise MemoryInputError(
                "related_ids",
                f"no memory {', '.join(sorted(map(str, missing)))} for delegate {delegate_id!r}",
            )
        created = journal.insert_memory(
            connection,
            {
                "id": memory_id,
                "delegate_id": delegate_id,
                "kind": memory_kind.value,
                "content": text,
                "relation": memory_relation.value,
                "related_ids": related,
                "source": source,
            },
        )
        if created and memory_relation in (Relation.CONSOLIDATED, Relation.OVERRIDE):
            # The merged or overriding memory replaces the old ones in recall.
            journal.supersede(connection, related, memory_id)
    related_data = [
        {"id": str(row["id"]), "content": row["content"][:SIGNAL_CONTENT_CHARS]} for row in found
    ]
    # Published after the commit, every time: a write that died before publishing publishes on
    # its retry, and the derived dedup key makes a repeat a no-op.
    signal = publish(
        kind=SIGNAL_KIND[memory_relation],
        source=source,
        delegate_id=delegate_id,
        dedup_key=f"memory:{memory_id}",
        caused_by=caused_by,
        data={
            "memory_id": str(memory_id),
            "memory_kind": memory_kind.value,
            "relation": memory_relation.value,
            "content": text[:SIGNAL_CONTENT_CHARS],
            "related_memory_ids": [str(i) for i in related],
            "related": related_data,
        },
        runtime=runtime,
        via="memory",
    )
    with runtime.engine.begin() as connection:
        journal.set_signal(connection, memory_id, signal.id)
    stored = journal.get(runtime.engine, memory_id)
    assert stored is not None
    return MemoryWrite(Memory.from_record(stored), signal, created)


def list_memories(
    delegate_id: str = "default",
    *,
    kind: MemoryKind | str | None = None,
    include_superseded: bool = False,
    limit: int = 50,
    runtime: Runtime | None = None,
) -> list[Memory]:
    runtime = runtime or get_runtime()
    kind_value = None if kind is None else MemoryKind(str(kind)).value
    rows = journal.list_memories(runtime.engine, delegate_id, kind_value, include_superseded, limit)
    return [Memory.from_record(row) for row in rows]


def recall(
    cue: str, delegate_id: str = "default", *, limit: int = 8, runtime: Runtime | None = None
) -> list[Memory]:
    """Learned memories matching any word of the cue, best first."""
    runtime = runtime or get_runtime()
    with reading(runtime.engine) as connection:
        rows = journal.recall(connection, delegate_id, query_text(cue_words([cue])), limit)
    return [Memory.from_record(row, row["rank"]) for row in rows]
