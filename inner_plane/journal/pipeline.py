"""Statements that ride along with the next one: sent in its round trip (psycopg's pipeline
mode), each still a statement of its own.

Over a network every round trip to PostgreSQL costs its latency, so the lane sends what it
already knows it will send together: ``BEGIN`` with a transaction's first statement, ``COMMIT``
(and what follows a commit) with its last, independent reads beside the statement that needs
their neighbour. :func:`ahead` and :func:`after` queue a statement on a connection; the next
statement that connection executes through SQLAlchemy sends them before or after itself, in
one pipeline ending in one Sync, and each queued statement's rows are then in its
:class:`Queued`. An error in any of them raises from that execution, as a statement's own
would: the caller's transaction rolls back as ever.

Every queued statement is announced to the engine's ``before_cursor_execute`` and
``after_cursor_execute`` listeners like any other, so the query-plan test explains it and the
statement counters count it. Explicit
``BEGIN``/``COMMIT`` need the connection in autocommit (see :func:`pipelined_transaction`):
then psycopg sends no ``BEGIN`` of its own, and SQLAlchemy's commit finds nothing left to do.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, TextClause, event, text
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

_AHEAD = "inner_plane.pipeline.ahead"
_AFTER = "inner_plane.pipeline.after"
_END = "inner_plane.pipeline.end"


@dataclass
class Queued:
    """One statement queued to ride along; its rows (as mappings) once it has run."""

    sql: str
    parameters: Mapping[str, Any] | None
    # Queued with ``optional``: its failure is its own (``error``), not the statement's it rode
    # with.
    optional: bool = False
    error: Exception | None = field(default=None, repr=False)
    _rows: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def ran(self) -> bool:
        return self._rows is not None

    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            if self.error is not None:
                raise RuntimeError(f"it failed: {self.error}") from self.error
            raise RuntimeError("the statement it rides along with has not run")
        return self._rows

    def first(self) -> dict[str, Any] | None:
        rows = self.rows()
        return rows[0] if rows else None

    def one(self) -> dict[str, Any]:
        rows = self.rows()
        if len(rows) != 1:
            raise RuntimeError(f"expected one row, got {len(rows)}")
        return rows[0]


# Each queued statement compiled once per dialect: the lane queues the same few constant
# statements (module-level text clauses, "BEGIN", "COMMIT") on every activation, and compiling a
# text clause (SQLAlchemy's compiler and its bind-parameter regex) cost more CPU than sending it.
# Keyed by the string, or by the clause object's id: the clause is kept alive beside its form,
# so no other object has that id while the entry stands. Bounded, for a caller that would queue
# clauses built per call.
_FORMS: weakref.WeakKeyDictionary[Dialect, dict[int | str, tuple[object, SQLCompiler]]] = (
    weakref.WeakKeyDictionary()
)
_MAX_FORMS = 256


def _form(dialect: Dialect, clause: TextClause | str) -> SQLCompiler:
    forms = _FORMS.get(dialect)
    if forms is None:
        forms = _FORMS[dialect] = {}
    key = clause if isinstance(clause, str) else id(clause)
    known = forms.get(key)
    if known is not None:
        return known[1]
    statement = text(clause) if isinstance(clause, str) else clause
    compiled = statement.compile(dialect=dialect)
    if len(forms) >= _MAX_FORMS:
        forms.clear()
    forms[key] = (clause, compiled)
    return compiled


def _compiled(
    connection: Connection, clause: TextClause | str, params: Mapping[str, Any] | None
) -> tuple[str, Mapping[str, Any] | None]:
    compiled = _form(connection.dialect, clause)
    if compiled.literal_execute_params or compiled.post_compile_params:
        # Values written into the statement (literal_execute) or expanded (IN lists), as
        # SQLAlchemy's own execution renders them.
        expanded = compiled.construct_expanded_state(dict(params or {}))
        return expanded.statement, dict(expanded.parameters)
    # Always a mapping (empty when none): psycopg then reads ``%%`` as ``%``, as SQLAlchemy's
    # own execution does.
    return compiled.string, dict(compiled.construct_params(dict(params or {})))


def ahead(
    connection: Connection, clause: TextClause | str, params: Mapping[str, Any] | None = None
) -> Queued:
    """Send ``clause`` just before the next statement ``connection`` executes, in its round
    trip."""
    return _queue(connection, _AHEAD, clause, params)


def ahead_driver(
    connection: Connection, sql: str, params: Mapping[str, Any] | None = None
) -> Queued:
    """As :func:`ahead`, for a statement already in the driver's form (``%(name)s``
    parameters, as ``exec_driver_sql`` takes it): sent as it is, not compiled."""
    _install(connection)
    queued = Queued(sql, dict(params) if params else None)
    connection.info.setdefault(_AHEAD, []).append(queued)
    return queued


def after(
    connection: Connection,
    clause: TextClause | str,
    params: Mapping[str, Any] | None = None,
    *,
    optional: bool = False,
) -> Queued:
    """Send ``clause`` just after the next statement ``connection`` executes, in its round
    trip (in the order queued).

    ``optional``: a read whose failure is its own. When it fails and every other statement of
    the round trip has been answered, the execution succeeds and the error is in the returned
    :class:`Queued` (so are the optional statements the server then skipped). Queue it after a
    ``COMMIT``: the transaction's fate is then settled before it runs (the lane's opening lets
    the composer's read ride after its commit)."""
    return _queue(connection, _AFTER, clause, params, optional)


def at_end(
    connection: Connection, clause: TextClause | str, params: Mapping[str, Any] | None = None
) -> Queued:
    """Send ``clause`` after the statement that ends the transaction's work, whichever it is:
    that statement calls :func:`ending` just before it runs (the lane's closing: its window
    read and its COMMIT ride with the statement that closes the activation). Left unsent if no
    statement does."""
    return _queue(connection, _END, clause, params)


def ending(connection: Connection) -> None:
    """The next statement ends the transaction's work: what :func:`at_end` queued rides after
    it (and after whatever :func:`after` queued already)."""
    connection.info.setdefault(_AFTER, []).extend(connection.info.pop(_END, []))


def _queue(
    connection: Connection,
    key: str,
    clause: TextClause | str,
    params: Mapping[str, Any] | None,
    optional: bool = False,
) -> Queued:
    _install(connection)
    sql, parameters = _compiled(connection, clause, params)
    queued = Queued(sql, parameters, optional)
    connection.info.setdefault(key, []).append(queued)
    return queued


def discard(connection: Connection) -> None:
    """Forget whatever is still queued (the statement it waited for will not run)."""
    connection.info.pop(_AHEAD, None)
    connection.info.pop(_AFTER, None)
    connection.info.pop(_END, None)


@contextmanager
def pipelined_transaction(connection: Connection) -> Iterator[Connection]:
    """A transaction on ``connection`` whose ``BEGIN`` rides with its first statement: the
    connection in autocommit for its duration, ``BEGIN`` queued ahead. Queue ``COMMIT`` with
    :func:`after` on its last statement to end it in that statement's round trip; otherwise
    it commits on exit (a round trip of its own), or rolls back on an error."""
    connection.execution_options(isolation_level="AUTOCOMMIT")
    try:
        with connection.begin():
            ahead(connection, "BEGIN")
            try:
                yield connection
            except BaseException:
                discard(connection)
                # A connection the error broke is SQLAlchemy's to invalidate: its own rollback
                # follows; the error that ended the transaction is the one to raise.
                with contextlib.suppress(Exception):
                    _end(connection, "ROLLBACK")
                raise
            discard(connection)
            _end(connection, "COMMIT")
    finally:
        connection.execution_options(isolation_level=connection.default_isolation_level)


def _end(connection: Connection, command: str) -> None:
    """End the explicit transaction if it is still open (psycopg reads the state from the
    server's last answer: nothing is sent when none is open)."""
    driver = connection.connection.driver_connection
    if driver is None or driver.closed:
        return
    from psycopg.pq import TransactionStatus

    if driver.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        driver.execute("ROLLBACK" if command == "ROLLBACK" or _failed(driver) else command)


def _failed(driver: Any) -> bool:
    from psycopg.pq import TransactionStatus

    return bool(driver.info.transaction_status == TransactionStatus.INERROR)


def _install(connection: Connection) -> None:
    engine = connection.engine
    if not event.contains(engine, "do_execute", _ride_along):
        event.listen(engine, "do_execute", _ride_along)


def _ride_along(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    """SQLAlchemy's execution of one statement, with whatever rides along with it."""
    connection: Connection = context.root_connection
    info = connection.info
    ahead_of: list[Queued] = info.pop(_AHEAD, None) or []
    after_it: list[Queued] = info.pop(_AFTER, None) or []
    if not ahead_of and not after_it:
        return False  # SQLAlchemy executes it as ever
    driver = cursor.connection
    cursors: list[tuple[Queued, Any]] = []
    try:
        with driver.pipeline():
            for queued in ahead_of:
                cursors.append((queued, _send(driver, queued, connection, context)))
            cursor.execute(statement, parameters)
            for queued in after_it:
                cursors.append((queued, _send(driver, queued, connection, context)))
    except Exception as error:
        if not _only_optional_failed(driver, cursor, [*ahead_of, *after_it], cursors):
            raise
        answered = {id(queued) for queued, own in cursors if own.pgresult is not None}
        for queued in after_it:
            if id(queued) not in answered:  # failed, skipped by the server after it, or unsent
                queued.error = error
        for queued, own in cursors:
            if queued.error is not None:
                own.close()
        cursors = [(queued, own) for queued, own in cursors if queued.error is None]
    for queued, own in cursors:
        queued._rows = _mappings(own)
        for listener in connection.dispatch.after_cursor_execute:
            listener(connection, own, queued.sql, queued.parameters, context, False)
        own.close()
    return True


def _only_optional_failed(
    driver: Any, cursor: Any, queued: list[Queued], cursors: list[tuple[Queued, Any]]
) -> bool:
    """Whether a round trip's error came from its optional statements alone: the connection
    stands, and the statement and every statement queued without ``optional`` were sent and
    answered (psycopg sets a cursor's result as it reads it, in order)."""
    if driver.closed or cursor.pgresult is None:
        return False
    answered = {id(q) for q, own in cursors if own.pgresult is not None}
    return all(q.optional or id(q) in answered for q in queued)


def _send(driver: Any, queued: Queued, connection: Connection, context: Any) -> Any:
    own = driver.cursor()
    for listener in connection.dispatch.before_cursor_execute:
        listener(connection, own, queued.sql, queued.parameters, context, False)
    own.execute(queued.sql, queued.parameters)
    return own


def _mappings(cursor: Any) -> list[dict[str, Any]]:
    description = cursor.description  # psycopg builds it anew on every read
    if description is None:
        return []
    names = [column.name for column in description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
