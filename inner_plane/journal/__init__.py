"""The journal: PostgreSQL is the truth. Nothing outside this package issues SQL.

One module per table or role: ``signals``, ``signal_events`` (history reads), ``claims`` (the
lane's hold on signals: due window, claim, settle, release, fail, defer, recover), ``recovery``
(the sweeper's reads, the operator's retry/dismiss), ``activations``, ``user_turns``,
``leases``, ``thoughtflow``, ``conversation``, ``memories``, ``timers``, ... ; ``predicates``
writes "due" and "fenced" once for all of them; ``lane_view`` is the operator's one object over
the lane's tables. Each table's row class (its ORM mirror) lives with its module; ``schema``
gathers them for Alembic and the schema check. ``plain`` is the journal without SQLAlchemy (URL
forms, schema version, a libpq connection): ``overview``, ``signal_record`` and
``signal_events`` are plain SQL that the CLI's quick reads run on it and the engine's readers
run through ``database.engine_rows``. May import only the pure layer (``config``,
``logs``, ``redis_keys``, ``signals``, ``activation``), never a layer above it.
"""
