"""Connections to the journal database, Alembic migrations and the schema-version gate."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from sqlalchemy import Connection, CursorResult, Engine, Row, create_engine, event, text
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from inner_plane.journal import pipeline, plain, tolerant
from inner_plane.journal.plain import (
    MIGRATIONS_DIR,
    Found,
    PipelinedRows,
    Statement,
    at_code_head,
    sqlalchemy_url,
)

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic loads only to migrate or to explain a schema mismatch: checking a current schema reads
# the version row and the migration files' names, so a CLI command starts fast.


class SchemaError(RuntimeError):
    """The database schema does not match this version of inner-plane."""


# Failures that mean "the journal is unreachable or unusable now" (a lost connection, a lock or
# statement timeout, no pooled connection free, a schema of another version), as opposed to a
# bug or a bad value: the HTTP faces answer 503, the lane fails the activation (bounded retry)
# rather than blame a signal.
JOURNAL_DOWN = (OperationalError, InterfaceError, PoolTimeout, SchemaError)


_engines: dict[tuple[int, str], Engine] = {}
_engines_lock = threading.Lock()


def get_engine(url: str, pool_size: int = 5) -> Engine:
    """One engine per process and URL. Keyed by pid: a forked Celery child must not reuse the
    parent's pooled sockets."""
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        with _engines_lock:
            engine = _engines.get(key)
            if engine is None:
                engine = create_engine(
                    sqlalchemy_url(url),
                    pool_size=pool_size,
                    max_overflow=pool_size,
                    # No pre-ping: it costs a round trip on every checkout (one per publish).
                    # After a database restart the first statement on a dead connection fails,
                    # SQLAlchemy invalidates the pool, and the caller's retry (Celery autoretry,
                    # HTTP 503, the sweeper) succeeds. Recycle bounds a connection's lifetime.
                    pool_recycle=1800,
                    # Requests wait at most this long for a pooled connection, then fail loudly.
                    pool_timeout=10,
                    connect_args={"connect_timeout": 5, "application_name": "inner-plane"},
                )
                # Whatever a row holds reads back (an odd row is quarantined, not a crash).
                event.listen(engine, "connect", _tolerant_readers)
                _engines[key] = engine
    return engine


def _tolerant_readers(dbapi_connection: Any, _record: Any) -> None:
    tolerant.install(dbapi_connection)


# Selected by a statement (in its select list or a CTE it reads), this makes the commit of its
# transaction return before the WAL is flushed to disk: ``synchronous_commit`` off, for that
# transaction only. Others see the commit at once, as ever; a crash of the database server (not
# of a worker) may lose it, with every later commit, but never partly and never out of order,
# and a later flushed commit flushes it too. Only for the lane's bookkeeping that the lane
# rebuilds after such a crash: the lease (take, renew, release, the safe point's share lock), the
# opening of an activation (claims return to pending, the turn to queued) and live-only notices;
# never a settlement, a reply, an intake or an operator's action, whose commits wait for the
# flush. One flush per activation instead of five is most of its overhead on a busy disk.
SKIP_FLUSH = "set_config('synchronous_commit', 'off', true)"


def single_statement(engine: Engine) -> Connection:
    """A connection in autocommit, for work that is one statement: it is atomic on its own and
    takes one round trip instead of three (BEGIN, statement, COMMIT)."""
    return engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def reading(engine: Engine) -> Connection:
    """A connection for reads, in autocommit. Under READ COMMITTED every statement takes its own
    snapshot even inside a transaction, so a read loses nothing outside one; it saves the BEGIN
    and ROLLBACK round trips, and psycopg forgets a connection's prepared statements at every
    ROLLBACK (the next statements on it would be parsed and planned again)."""
    return single_statement(engine)


@contextmanager
def autocommitted(connection: Connection) -> Iterator[Connection]:
    """``connection`` (a held one, between its transactions) in autocommit for one statement:
    one round trip instead of three, as :func:`single_statement`, without a checkout."""
    connection.execution_options(isolation_level="AUTOCOMMIT")
    try:
        with connection.begin():  # no BEGIN or COMMIT reaches the server in autocommit
            yield connection
    finally:
        connection.execution_options(isolation_level=connection.default_isolation_level)


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Apply every migration (one line of revisions: later ones stack on `0008_one_head`)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def expected_heads(url: str) -> set[str]:
    from alembic.script import ScriptDirectory

    return set(ScriptDirectory.from_config(alembic_config(url)).get_heads())


def current_heads(engine: Engine) -> set[str]:
    with reading(engine) as connection:
        return schema_versions(connection)


def engine_rows(connection: Connection) -> PipelinedRows:
    """``connection`` as :class:`~inner_plane.journal.plain.PipelinedRows`: the journal's plain
    SQL (driver parameter style) on an engine's connection."""
    return _EngineRows(connection)


class _EngineRows:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def __call__(
        self, sql: str, params: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]:
        found = self.connection.exec_driver_sql(sql, dict(params) if params else None)
        return cast(Sequence[Mapping[str, Any]], found.mappings().all())

    def many(self, statements: Sequence[Statement]) -> list[Found]:
        # All but the last ride ahead of it (journal.pipeline): one round trip, and each is
        # still announced to the engine's listeners (the statement counters, the plan tests).
        *first, (sql, params) = statements
        queued = [pipeline.ahead_driver(self.connection, s, p) for s, p in first]
        try:
            last = self(sql, params)
        except BaseException:
            pipeline.discard(self.connection)  # nothing of them may ride with a later statement
            raise
        return [*(q.rows() for q in queued), last]


def schema_versions(connection: Connection) -> set[str]:
    """The revisions the database is at (none if never migrated); ``connection`` in autocommit
    (:func:`reading`)."""
    return plain.schema_versions(engine_rows(connection))


def check_schema(engine: Engine, url: str) -> None:
    """Refuse to run on a database that is not exactly at this code's migration heads."""
    try:
        with engine.connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    except Exception:
        versions = []
    if at_code_head(row[0] for row in versions):
        return  # the fast path: at the one head
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(url))
    expected = set(script.get_heads())
    current = current_heads(engine)
    if current == expected:
        return
    if not current:
        raise SchemaError(
            "the journal database is not migrated: run `inner-plane db upgrade` "
            f"(database: {engine.url.render_as_string(hide_password=True)})"
        )
    known = {rev.revision for rev in script.walk_revisions()}
    unknown = current - known
    if unknown:
        raise SchemaError(
            f"the journal database schema ({', '.join(sorted(unknown))}) is newer than this "
            "inner-plane; upgrade inner-plane before running it against this database"
        )
    raise SchemaError(
        "the journal database is behind this inner-plane "
        f"(at {', '.join(sorted(current))}, need {', '.join(sorted(expected))}): "
        "run `inner-plane db upgrade`"
    )


def ensure_database(url: str) -> None:
    """Create the database named in ``url`` if it does not exist (embedded and test servers)."""
    target = make_url(sqlalchemy_url(url))
    name = target.database
    if not name:
        return
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            exists = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
            ).scalar()
            if not exists:
                quoted = connection.dialect.identifier_preparer.quote(name)
                connection.execute(text(f"CREATE DATABASE {quoted}"))
    finally:
        admin.dispose()


Record = TypeVar("Record")


def typed_row(kind: type[Record], row: Row[Any]) -> Record:
    """``row`` as the record type ``kind`` (a TypedDict), built by column name: every key the
    type declares must be a column of the row (KeyError otherwise), other columns are left out."""
    mapping = row._mapping
    return cast(Record, {key: mapping[key] for key in kind.__annotations__})


_Processors = list[tuple[str, Callable[[Any], Any]]]


class DriverForm:
    """A constant statement compiled once per dialect (engine) to the driver's SQL, with
    SQLAlchemy's own bind processors, and run with ``exec_driver_sql``: a hot statement skips
    SQLAlchemy's per-execution work (its cache key is a walk of the whole statement, costly for
    one of several CTEs), while what reaches the server is the same SQL with the same
    parameters. Rows come back as the driver gives them (psycopg's own types)."""

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._forms: weakref.WeakKeyDictionary[Dialect, _Form] = weakref.WeakKeyDictionary()

    def form(self, dialect: Dialect) -> _Form:
        form = self._forms.get(dialect)
        if form is None:
            compiled = cast(SQLCompiler, self.statement.compile(dialect=dialect))
            processors: _Processors = []
            # The statement's own values (its literals, such as a state compared with): the
            # caller gives only the parameters the statement names.
            fixed: dict[str, Any] = {}
            for bind, name in compiled.bind_names.items():
                processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
                if not bind.required:
                    value = bind.effective_value
                    fixed[name] = value if processor is None else processor(value)
                elif processor is not None:
                    processors.append((name, processor))
            form = self._forms[dialect] = _Form(str(compiled), processors, fixed)
        return form

    def execute(self, connection: Connection, params: dict[str, Any]) -> CursorResult[Any]:
        """Run the statement with ``params`` (by the statement's parameter names)."""
        sql, processors, fixed = self.form(connection.dialect)
        for name, process in processors:
            params[name] = process(params[name])
        return connection.exec_driver_sql(sql, {**fixed, **params})


class _Form(NamedTuple):
    sql: str
    processors: _Processors
    fixed: dict[str, Any]
