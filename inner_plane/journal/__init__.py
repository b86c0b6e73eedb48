"""The journal: PostgreSQL is the truth. Nothing outside this package issues SQL.

Grouped by aggregate: ``lane/`` (claims, leases, activations, closing, recovery, user turns,
notices, the notify outbox), ``signals/`` (the signals table, its history and plain reads,
ambient reads), ``conversation/`` (events, the composer's read, ThoughtFlow), ``timers/``
(schedules and the tick), ``operator/`` (reads, paging, overview, live log, operators). Shared at
the top: ``tables`` and ``declarative`` (the mirrors), ``schema`` (gathers them for Alembic and
the schema check), ``database`` (connections, migrations, the schema gate), ``predicates``
("due" and "fenced", written once), ``plain`` (the journal without SQLAlchemy), ``tolerant``
(readers that never fail on a stored value), and the single-table ``memories``,
``processors`` and ``retention``.

May import only the pure layer (``config``, ``logs``, ``redis_keys``, ``signals``,
``activation``), never a layer above it.
"""
