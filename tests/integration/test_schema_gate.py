"""The schema gate: the app refuses an un-migrated database and one newer than the code."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from inner_plane.journal import database, plain
from inner_plane.journal.database import SchemaError, check_schema
from tests.support.stores import ROOT, Stores


@pytest.fixture
def scratch_url(stores: Stores) -> Iterator[str]:
    """A fresh, empty database on the test server, dropped afterwards."""
    name = f"inner_plane_gate_{uuid.uuid4().hex[:8]}"
    url = (
        make_url(database.sqlalchemy_url(stores.database_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )
    database.ensure_database(url)
    yield url
    admin = create_engine(
        make_url(database.sqlalchemy_url(url)).set(database="postgres"),
        isolation_level="AUTOCOMMIT",
    )
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def gate(url: str) -> str:
    engine = create_engine(database.sqlalchemy_url(url))
    try:
        with pytest.raises(SchemaError) as error:
            check_schema(engine, url)
    finally:
        engine.dispose()
    return str(error.value)


def cli_signals_list(stores: Stores, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inner_plane", "signals", "list"],
        env=stores.env(INNER_PLANE_DATABASE_URL=url),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def stamp(url: str, revision: str) -> None:
    engine = create_engine(database.sqlalchemy_url(url))
    try:
        with engine.begin() as connection:
            connection.execute(
                text("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
            )
            connection.execute(text("INSERT INTO alembic_version VALUES (:r)"), {"r": revision})
    finally:
        engine.dispose()


def test_unmigrated_database_is_refused(stores: Stores, scratch_url: str) -> None:
    message = gate(scratch_url)
    assert message.startswith("the journal database is not migrated: run `inner-plane db upgrade`")
    completed = cli_signals_list(stores, scratch_url)
    assert completed.returncode == 1
    assert completed.stdout == ""
    assert completed.stderr.strip().splitlines()[-1] == f"inner-plane: error: {message}"


def test_newer_schema_is_refused(stores: Stores, scratch_url: str) -> None:
    stamp(scratch_url, "9999_from_the_future")
    message = gate(scratch_url)
    assert message == (
        "the journal database schema (9999_from_the_future) is newer than this inner-plane; "
        "upgrade inner-plane before running it against this database"
    )
    completed = cli_signals_list(stores, scratch_url)
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines()[-1] == f"inner-plane: error: {message}"


def test_migrated_database_passes_and_db_upgrade_is_idempotent(
    stores: Stores, scratch_url: str
) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "inner_plane", "db", "upgrade"],
        env=stores.env(INNER_PLANE_DATABASE_URL=scratch_url),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    engine = create_engine(database.sqlalchemy_url(scratch_url))
    try:
        check_schema(engine, scratch_url)  # does not raise
    finally:
        engine.dispose()
    database.upgrade(scratch_url)  # a second upgrade changes nothing
    assert cli_signals_list(stores, scratch_url).returncode == 0


def test_status_names_the_schema_it_finds_and_the_one_it_needs(
    stores: Stores, scratch_url: str
) -> None:
    def database_entry() -> tuple[int, dict[str, Any]]:
        completed = subprocess.run(
            [sys.executable, "-m", "inner_plane", "status", "--json"],
            env=stores.env(INNER_PLANE_DATABASE_URL=scratch_url),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return completed.returncode, json.loads(completed.stdout)["stores"]["database"]

    head = plain.code_head()
    code, entry = database_entry()
    assert code == 2 and entry["schema"] == [] and entry["expected_schema"] == [head]
    database.upgrade(scratch_url)
    code, entry = database_entry()
    assert entry["schema"] == entry["expected_schema"] == [head]
    engine = create_engine(database.sqlalchemy_url(scratch_url))
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    finally:
        engine.dispose()
    code, entry = database_entry()
    assert code == 2 and entry["schema"] == ["9999_future"] and entry["expected_schema"] == [head]


def test_the_schema_read_tells_a_missing_table_from_a_failing_one(
    stores: Stores, scratch_url: str
) -> None:
    """The versions are read in one statement; only its failure asks the catalog whether the
    table is missing (never migrated: no versions) or failing (raised), on either connection."""
    engine = create_engine(database.sqlalchemy_url(scratch_url))
    try:
        with plain.connect(scratch_url, 5) as rows:
            assert plain.schema_versions(rows) == set()
        assert database.current_heads(engine) == set()
        with engine.begin() as connection:  # a table there that cannot be read
            connection.execute(
                text("CREATE VIEW alembic_version AS SELECT (1 / 0)::text AS version_num")
            )
        with (
            plain.connect(scratch_url, 5) as rows,
            pytest.raises(Exception, match="division by zero"),
        ):
            plain.schema_versions(rows)
        with pytest.raises(Exception, match="division by zero"):
            database.current_heads(engine)
        with engine.begin() as connection:
            connection.execute(text("DROP VIEW alembic_version"))
        stamp(scratch_url, "0001_x")
        with plain.connect(scratch_url, 5) as rows:
            assert plain.schema_versions(rows) == {"0001_x"}
        assert database.current_heads(engine) == {"0001_x"}
    finally:
        engine.dispose()
