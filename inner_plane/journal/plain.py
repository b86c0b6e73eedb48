"""The journal without SQLAlchemy: the URL forms, the migration the code needs, the schema
version a database is at, and rows as mappings from either kind of connection.

`inner-plane status` reads the journal through a plain libpq connection made here, so it starts
without loading SQLAlchemy (about 130 ms of a command that should answer at once). The queries
it runs are the journal's own (:mod:`inner_plane.journal.operator.overview`), written once in the
driver's parameter style, and the engine-based readers (/metrics) run the same text through
:func:`inner_plane.journal.database.engine_rows`. An import contract keeps SQLAlchemy out of
this module and of ``overview``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_PREFIXES = ("postgresql+psycopg://", "postgresql://", "postgres://")


class Rows(Protocol):
    """Runs one statement (``%(name)s`` parameters) and answers its rows by column name."""

    def __call__(
        self, sql: str, params: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]: ...


def _rest(url: str) -> str:
    for prefix in _PREFIXES:
        if url.startswith(prefix):
            return url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {url!r}")


def sqlalchemy_url(url: str) -> str:
    """Accept plain libpq URLs (what ops paste) and pin the psycopg 3 driver."""
    return "postgresql+psycopg://" + _rest(url)


def libpq_url(url: str) -> str:
    """The same database as a plain libpq URL (for psycopg.connect and tools)."""
    return "postgresql://" + _rest(url)


def code_head() -> str:
    """The revision this code needs: the newest migration file's (revision id = file stem, one
    line of them; tests/unit/test_schema_head.py holds Alembic's single head to it)."""
    return max(path.stem for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"))


def at_code_head(versions: Iterable[str]) -> bool:
    """The database is at exactly the revision this code needs (the schema gate's fast path)."""
    return sorted(versions) == [code_head()]


def schema_versions(rows: Rows) -> set[str]:
    """The revisions the database is at (none if never migrated), read as Alembic stores them."""
    if rows("SELECT to_regclass('alembic_version') IS NOT NULL AS present")[0]["present"]:
        return {str(row["version_num"]) for row in rows("SELECT version_num FROM alembic_version")}
    return set()


@contextmanager
def connect(url: str, timeout_s: float, application: str = "inner-plane") -> Iterator[Rows]:
    """A libpq connection in autocommit, each statement bounded to 5 s, as :class:`Rows`; it
    reads whatever a row holds, as the engine's connections do (``journal.tolerant``)."""
    import psycopg
    from psycopg.rows import dict_row

    from inner_plane.journal import tolerant

    with psycopg.connect(
        libpq_url(url),
        autocommit=True,
        connect_timeout=max(1, int(timeout_s)),
        application_name=application,
        options="-c statement_timeout=5000",
        row_factory=dict_row,
    ) as connection:
        tolerant.install(connection)

        def rows(sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
            return connection.execute(sql, params).fetchall()

        yield rows
