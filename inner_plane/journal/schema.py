"""The journal's whole schema as the mirrors declare it.

Alembic migrations create the schema; each table's mirror (a Core table in ``tables``, or a row
class in the module that owns the table) shares ``tables.METADATA``. This module gathers them
all, so the metadata is complete whatever else a process imported: Alembic's environment uses
it, and tests/integration/test_schema_mirrors.py checks it against the migrated database
(``compare_metadata`` finds no difference). A new table's owning module is imported here.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Index, MetaData, Table

from inner_plane.journal import memories, policy, processors
from inner_plane.journal.channels import mailboxes, messages
from inner_plane.journal.conversation import capsule, thoughtflow, usage, window
from inner_plane.journal.conversation import events as conversation
from inner_plane.journal.people import people, questions, tokens
from inner_plane.journal.tables import METADATA
from inner_plane.journal.timers import store as timers

# The modules whose row classes join the metadata (imported for that, named so it is explicit).
OWNERS = (
    conversation,
    mailboxes,
    messages,
    memories,
    people,
    policy,
    capsule,
    processors,
    questions,
    thoughtflow,
    timers,
    tokens,
    usage,
    window,
)

metadata: MetaData = METADATA

# The ThoughtFlow records' index, declared beside its row class's table from here (the row
# class's module belongs to the lane's refactor; move it into ThoughtflowRow.__table_args__).
_thoughtflows = cast(Table, thoughtflow.ThoughtflowRow.__table__)
if "ix_thoughtflows_delegate_created" not in {index.name for index in _thoughtflows.indexes}:
    Index(
        "ix_thoughtflows_delegate_created",
        _thoughtflows.c.delegate_id,
        _thoughtflows.c.created_at,
    )
