"""The ORM models mirror migration 0011_operator_view: Alembic finds nothing to change in the
tables, columns and indexes it added."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

import inner_plane.journal.conversation.events
import inner_plane.journal.conversation.thoughtflow
import inner_plane.journal.memories
import inner_plane.journal.processors
import inner_plane.journal.timers.store  # noqa: F401 - they define tables on Base
from inner_plane.journal import database
from inner_plane.journal.tables import METADATA
from tests.support.stores import Stores

OURS = (
    "live_events",
    "operators",
    "actor",
    "cancelled_by",
    "dead_delegate",
    "ix_timers_delegate_created",
)


@pytest.mark.filterwarnings("ignore:Did not recognize type")
def test_models_mirror_the_operator_view_migration(stores: Stores) -> None:
    engine = create_engine(database.sqlalchemy_url(stores.database_url))
    try:
        with engine.connect() as connection:
            diffs = compare_metadata(MigrationContext.configure(connection), METADATA)
    finally:
        engine.dispose()
    ours = [str(d) for d in diffs if any(name in str(d) for name in OURS)]
    assert ours == []
