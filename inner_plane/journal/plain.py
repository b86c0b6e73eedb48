"""The journal without SQLAlchemy: the URL forms, the migration the code needs, the schema
version a database is at, and rows as mappings from either kind of connection.

`inner-plane status` reads the journal through a plain libpq connection made here, so it starts
without loading SQLAlchemy (about 130 ms of a command that should answer at once). The queries
it runs are the journal's own (:mod:`inner_plane.journal.operator.overview`), written once in the
driver's parameter style, and the engine-based readers (/metrics) run the same text through
:func:`inner_plane.journal.database.engine_rows`. An import contract keeps SQLAlchemy out of
this module and of ``overview``.

Several reads an operator's view needs at once go in one round trip (:class:`Batch`): over a
network each round trip costs its latency, and `status` and a /metrics scrape read half a dozen
independent things.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_PREFIXES = ("postgresql+psycopg://", "postgresql://", "postgres://")


class Rows(Protocol):
    """Runs one statement (``%(name)s`` parameters) and answers its rows by column name."""

    def __call__(
        self, sql: str, params: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]: ...


Statement = tuple[str, Mapping[str, Any] | None]
Found = Sequence[Mapping[str, Any]]


@runtime_checkable
class PipelinedRows(Rows, Protocol):
    """:class:`Rows` that can also send several statements in one round trip."""

    def many(self, statements: Sequence[Statement]) -> list[Found]:
        """Each statement's rows, in order, all sent before any answer is awaited; an error in
        any raises (the statements after it are not run)."""
        ...


T = TypeVar("T")


@dataclass(frozen=True)
class Read(Generic[T]):
    """One read of the journal: its statement and what its rows mean."""

    sql: str
    params: Mapping[str, Any] | None
    parse: Callable[[Found], T]

    def __call__(self, rows: Rows) -> T:
        """Run alone, in a round trip of its own."""
        return self.parse(rows(self.sql, self.params))


class Later(Generic[T]):
    """A read added to a :class:`Batch`: its value once the batch has run."""

    def __init__(self, read: Read[T]) -> None:
        self.read = read
        self._answered = False
        self._value: T | None = None

    @property
    def value(self) -> T:
        if not self._answered:
            raise RuntimeError("the batch this read belongs to has not run")
        return self._value  # type: ignore[return-value]  # answered: a T (which may be None)

    def answer(self, found: Found) -> None:
        self._value = self.read.parse(found)
        self._answered = True


class Batch:
    """Independent reads sent together: one round trip where ``rows`` can pipeline
    (:class:`PipelinedRows`: a libpq connection of :func:`connect`, an engine's connection of
    ``database.engine_rows``), one per read otherwise. Each read is the statement it would be
    alone, so each keeps its own plan and its own prepared statement."""

    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.reads: list[Later[Any]] = []

    def add(self, read: Read[T]) -> Later[T]:
        later = Later(read)
        self.reads.append(later)
        return later

    def run(self) -> None:
        statements: list[Statement] = [(r.read.sql, r.read.params) for r in self.reads]
        if isinstance(self.rows, PipelinedRows) and len(statements) > 1:
            answers = self.rows.many(statements)
        else:
            answers = [self.rows(sql, params) for sql, params in statements]
        for later, found in zip(self.reads, answers, strict=True):
            later.answer(found)


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
    """The revisions the database is at (none if never migrated), read as Alembic stores them.

    One statement, and one round trip, on any database migrated once: the table is read as if
    it were there, and only if that fails does the catalog say whether it is missing (never
    migrated) or the failure is another (raised). ``rows`` must be in autocommit, so that the
    failed statement leaves nothing behind (:func:`connect`'s, ``database.reading``'s)."""
    try:
        found = rows("SELECT version_num FROM alembic_version")
    except Exception:
        if rows("SELECT to_regclass('alembic_version') IS NOT NULL AS present")[0]["present"]:
            raise
        return set()
    return {str(row["version_num"]) for row in found}


@contextmanager
def connect(
    url: str, timeout_s: float, application: str = "inner-plane"
) -> Iterator[PipelinedRows]:
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
        yield _LibpqRows(connection)


class _LibpqRows:
    """A libpq connection (psycopg's, rows as dicts) as :class:`PipelinedRows`."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def __call__(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return list(self.connection.execute(sql, params).fetchall())

    def many(self, statements: Sequence[Statement]) -> list[Found]:
        # psycopg's pipeline mode: every statement sent, then one Sync and its answers.
        with self.connection.pipeline():
            cursors = [self.connection.execute(sql, params) for sql, params in statements]
        return [list(cursor.fetchall()) for cursor in cursors]
