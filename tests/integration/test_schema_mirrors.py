"""One schema source, checked: after `alembic upgrade head` on an empty database, the ORM mirrors
(every table's row class, gathered in inner_plane.journal.schema) describe exactly what the
migrations created: tables, columns, types, nullability, server defaults, indexes (with their
predicates and expressions), unique constraints and foreign keys."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from inner_plane.journal import database
from inner_plane.journal.schema import metadata
from inner_plane.journal.tables import AMBIENT_DOCUMENT
from tests.support.stores import Stores, scratch_database


# SQLAlchemy cannot reflect PostgreSQL's xid8 (live_events.xid); the catalog comparison below
# checks that column's type instead.
@pytest.mark.filterwarnings("ignore:Did not recognize type 'xid8'")
def test_the_mirrors_match_the_migrated_schema(stores: Stores) -> None:
    with scratch_database(stores, "inner_plane_mirrors") as url:
        database.upgrade(url)
        engine = create_engine(database.sqlalchemy_url(url))
        try:
            with engine.connect() as connection:
                context = MigrationContext.configure(
                    connection,
                    opts={"compare_type": True, "compare_server_default": True},
                )
                differences: list[Any] = compare_metadata(context, metadata)
        finally:
            engine.dispose()
    # alembic_version is Alembic's own table, not part of the journal.
    differences = [
        d for d in differences if not (d[0] == "remove_table" and d[1].name == "alembic_version")
    ]
    assert differences == [], "\n".join(map(repr, differences))


def test_the_ambient_lookup_uses_the_mirrored_index_expression(stores: Stores) -> None:
    """The document the ambient queries match on is, as PostgreSQL parses it, the expression of
    ix_signals_ambient_fts: so the planner can use the index for them."""
    expression = "SELECT pg_get_indexdef(CAST(:name AS regclass), 1, true)"
    engine = create_engine(database.sqlalchemy_url(stores.database_url))
    try:
        with engine.connect() as connection, connection.begin() as transaction:
            connection.execute(
                text(
                    f"CREATE INDEX probe_ambient_document ON signals USING gin ({AMBIENT_DOCUMENT})"
                )
            )
            probe = connection.execute(text(expression), {"name": "probe_ambient_document"})
            index = connection.execute(text(expression), {"name": "ix_signals_ambient_fts"})
            assert probe.scalar_one() == index.scalar_one()
            transaction.rollback()
    finally:
        engine.dispose()


# What Alembic's comparison leaves out (CHECK constraints, index predicates and methods,
# identity columns), read from PostgreSQL's own catalog in the form it prints definitions in.
CATALOG = """
SELECT 'column' AS what, c.relname AS table_name, a.attname AS name,
       format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
       || CASE a.attidentity WHEN 'a' THEN ' identity always' WHEN 'd' THEN ' identity' ELSE '' END
       || CASE a.attgenerated WHEN 's' THEN ' generated stored' ELSE '' END AS definition
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
   AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index', tablename, indexname, indexdef
  FROM pg_indexes WHERE schemaname = current_schema()
UNION ALL
SELECT 'constraint', conrelid::regclass::text, conname, pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND conrelid <> 0
"""


def catalog(url: str) -> set[tuple[str, str, str, str]]:
    engine = create_engine(database.sqlalchemy_url(url))
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(CATALOG)).all()
    finally:
        engine.dispose()
    return {
        (row.what, row.table_name, row.name, row.definition)
        for row in rows
        if row.table_name != "alembic_version"
    }


def test_the_mirrors_create_what_the_migrations_create(stores: Stores) -> None:
    """Tables made from the mirrors alone equal the migrated ones, column by column, index by
    index (definition, method, predicate) and constraint by constraint (CHECKs included)."""
    with (
        scratch_database(stores, "inner_plane_migrated") as migrated,
        scratch_database(stores, "inner_plane_mirrored") as mirrored,
    ):
        database.upgrade(migrated)
        engine = create_engine(database.sqlalchemy_url(mirrored))
        try:
            metadata.create_all(engine)
        finally:
            engine.dispose()
        from_migrations, from_mirrors = catalog(migrated), catalog(mirrored)
    only_migrations = sorted(from_migrations - from_mirrors)
    only_mirrors = sorted(from_mirrors - from_migrations)
    assert (only_migrations, only_mirrors) == ([], []), "\n".join(
        [f"migrations only: {row}" for row in only_migrations]
        + [f"mirrors only:    {row}" for row in only_mirrors]
    )


def checks(url: str) -> set[tuple[str, str, str]]:
    """The CHECK constraints: (table, name, definition)."""
    return {
        (table, name, definition)
        for what, table, name, definition in catalog(url)
        if what == "constraint" and definition.startswith("CHECK")
    }


KINDS = ("ck", "ix", "uq", "pk")


def doubled_names(url: str) -> list[str]:
    """Names that repeat their naming-convention prefix, as "ck_signals_ck_signals_mode" did."""
    return sorted(
        name
        for what, table, name, _ in catalog(url)
        if what != "column"
        and any(name.startswith(f"{kind}_{table}_{kind}_{table}") for kind in KINDS)
    )


def test_no_name_repeats_its_prefix_and_the_rename_reverts(stores: Stores) -> None:
    """Migration 0018 renamed the doubled CHECK names; its downgrade gives them back, with the
    same definitions, and upgrading again renames them again."""
    with scratch_database(stores, "inner_plane_names") as url:
        database.upgrade(url)
        assert doubled_names(url) == []
        # The constraints as 0018 left them (later migrations add and change their own).
        command.downgrade(database.alembic_config(url), "0018_single_check_names")
        single = checks(url)
        assert single, "the journal has CHECK constraints"
        command.downgrade(database.alembic_config(url), "0017_retention_indexes")
        # Tables created after 0018 (and their CHECKs) are gone at 0017.
        older = {table for table, _, _ in checks(url)}
        assert checks(url) == {
            (table, f"ck_{table}_{name}", definition)
            for table, name, definition in single
            if table in older
        }
        command.upgrade(database.alembic_config(url), "0018_single_check_names")
        assert checks(url) == single
        database.upgrade(url)
        assert doubled_names(url) == []
