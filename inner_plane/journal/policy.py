"""The ``policy_versions`` and ``policy_in_force`` tables: every attention policy document ever
applied (TOML text, as given), who applied it and when, and the one-row pointer to the version
in force (migration 0022). No row in ``policy_in_force``: none applied, the settings decide.

Applying and rolling back are one transaction each: a new version row, the pointer moved, and a
NOTIFY on :data:`CHANNEL` with the version (sent only if it commits). The lane does not need the
notice: its opening statement reads the pointer (:data:`IN_FORCE_COLUMNS`), so it decides under
the version in force at that very moment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg
from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    ForeignKey,
    Identity,
    Integer,
    Table,
    Text,
    func,
    text,
    true,
)

from inner_plane.journal.database import reading
from inner_plane.journal.plain import libpq_url
from inner_plane.journal.tables import METADATA

CHANNEL = "inner_plane_policy"

POLICY_VERSIONS = Table(
    "policy_versions",
    METADATA,
    Column("version", Integer, Identity(always=True), primary_key=True),
    Column("document", Text, nullable=False),
    Column("applied_by", Text, nullable=False),
    Column("applied_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("note", Text, nullable=False, server_default=""),
)

POLICY_IN_FORCE = Table(
    "policy_in_force",
    METADATA,
    Column("singleton", Boolean, primary_key=True, server_default=true()),
    Column(
        "version",
        Integer,
        ForeignKey("policy_versions.version", name="fk_policy_in_force_version"),
        nullable=False,
    ),
    Column("changed_by", Text, nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# The pointer as columns of another statement (the lane's due window): the version in force and
# when it was set (a stamp: a journal truncated and re-applied reuses version numbers).
IN_FORCE_COLUMNS = (
    "(SELECT version FROM policy_in_force WHERE singleton) AS policy_version, "
    "(SELECT changed_at FROM policy_in_force WHERE singleton) AS policy_changed_at"
)


@dataclass(frozen=True)
class PolicyVersion:
    version: int
    document: str
    applied_by: str
    applied_at: datetime
    note: str


@dataclass(frozen=True)
class InForce:
    """The pointer: which version is in force, since when, set by whom."""

    version: int
    changed_at: datetime
    changed_by: str


_COLUMNS = "version, document, applied_by, applied_at, note"


def _version(row: object) -> PolicyVersion:
    return PolicyVersion(
        version=int(row.version),  # type: ignore[attr-defined]
        document=str(row.document),  # type: ignore[attr-defined]
        applied_by=str(row.applied_by),  # type: ignore[attr-defined]
        applied_at=row.applied_at,  # type: ignore[attr-defined]
        note=str(row.note),  # type: ignore[attr-defined]
    )


_APPLY = text(
    """
    WITH added AS (
        INSERT INTO policy_versions (document, applied_by, note)
        VALUES (:document, :by, :note)
        RETURNING version
    ), pointed AS (
        INSERT INTO policy_in_force (singleton, version, changed_by)
        SELECT true, version, :by FROM added
        ON CONFLICT (singleton) DO UPDATE
           SET version = excluded.version, changed_by = excluded.changed_by,
               changed_at = now()
        RETURNING version
    )
    SELECT version, pg_notify(:channel, version::text) FROM pointed
    """
)


def apply(engine: Engine, document: str, applied_by: str, note: str = "apply") -> int:
    """Store ``document`` (already validated) as a new version and put it in force."""
    with engine.begin() as connection:
        return _apply(connection, document, applied_by, note)


def _apply(connection: Connection, document: str, applied_by: str, note: str) -> int:
    row = connection.execute(
        _APPLY, {"document": document, "by": applied_by, "note": note, "channel": CHANNEL}
    ).one()
    return int(row.version)


def rollback(engine: Engine, version: int, applied_by: str) -> int | None:
    """Put the document of ``version`` back in force as a new version (the history keeps every
    step, and decisions name the version that made them); None if no such version."""
    with engine.begin() as connection:
        old = connection.execute(
            text(f"SELECT {_COLUMNS} FROM policy_versions WHERE version = :v"),  # noqa: S608
            {"v": version},
        ).first()
        if old is None:
            return None
        return _apply(connection, str(old.document), applied_by, f"rollback to {version}")


def in_force(connection: Connection) -> PolicyVersion | None:
    row = connection.execute(
        text(
            f"SELECT {', '.join('v.' + c.strip() for c in _COLUMNS.split(','))} "  # noqa: S608
            "FROM policy_in_force p JOIN policy_versions v ON v.version = p.version "
            "WHERE p.singleton"
        )
    ).first()
    return None if row is None else _version(row)


def pointer(connection: Connection) -> InForce | None:
    row = connection.execute(
        text("SELECT version, changed_at, changed_by FROM policy_in_force WHERE singleton")
    ).first()
    return None if row is None else InForce(int(row.version), row.changed_at, row.changed_by)


def version_in_force(engine: Engine) -> PolicyVersion | None:
    with reading(engine) as connection:
        return in_force(connection)


def get(engine: Engine, version: int) -> PolicyVersion | None:
    with reading(engine) as connection:
        row = connection.execute(
            text(f"SELECT {_COLUMNS} FROM policy_versions WHERE version = :v"),  # noqa: S608
            {"v": version},
        ).first()
    return None if row is None else _version(row)


def document_of(connection: Connection, version: int) -> str | None:
    """The document of ``version`` (in the caller's transaction: the lane's, on a change)."""
    value = connection.execute(
        text("SELECT document FROM policy_versions WHERE version = :v"), {"v": version}
    ).scalar()
    return None if value is None else str(value)


def history(engine: Engine, limit: int = 50) -> list[PolicyVersion]:
    """The newest versions first (primary-key order)."""
    with reading(engine) as connection:
        rows = connection.execute(
            text(
                f"SELECT {_COLUMNS} FROM policy_versions "  # noqa: S608
                "ORDER BY version DESC LIMIT :limit"
            ),
            {"limit": max(1, min(limit, 1_000))},
        ).all()
    return [_version(row) for row in rows]


def listen(
    database_url: str,
    on_change: Callable[[], None],
    stop: threading.Event,
    poll_s: float = 1.0,
    reconnect_s: float = 1.0,
) -> None:
    """LISTEN on :data:`CHANNEL` until ``stop`` is set; ``on_change`` after every notice and
    after every (re)connection (notices may have been missed meanwhile)."""
    conninfo = libpq_url(database_url)
    while not stop.is_set():
        try:
            with psycopg.connect(conninfo, autocommit=True) as connection:
                connection.execute(f"LISTEN {CHANNEL}")
                on_change()
                while not stop.is_set():
                    for _notify in connection.notifies(timeout=poll_s):
                        on_change()
                        if stop.is_set():
                            break
        except psycopg.Error:
            stop.wait(reconnect_s)
