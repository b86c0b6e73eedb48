"""Statements riding along with the next one (``inner_plane.journal.pipeline``): one round trip
for all, each with its own rows, an error in any of them rolling the transaction back, and every
one seen by the engine's statement listeners."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError

from bench.latency_proxy import LatencyProxy, target_of, via
from inner_plane.journal import pipeline
from inner_plane.journal.plain import sqlalchemy_url
from inner_plane.runtime import Runtime
from tests.support.stores import Stores


@pytest.fixture
def counted(runtime: Runtime, clean_stores: Stores) -> Iterator[tuple[Engine, LatencyProxy]]:
    with LatencyProxy({"pg": target_of(clean_stores.database_url)}, 0.0) as proxy:
        engine = create_engine(
            sqlalchemy_url(via(clean_stores.database_url, proxy.ports["pg"])), pool_size=1
        )
        try:
            yield engine, proxy
        finally:
            engine.dispose()


def test_a_transaction_and_its_statements_go_in_two_round_trips(
    counted: tuple[Engine, LatencyProxy],
) -> None:
    engine, proxy = counted
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]).split()[0])

    with engine.connect() as connection:
        connection.execute(text("SELECT 1")).all()
        connection.commit()
        event.listen(engine, "before_cursor_execute", record)
        proxy.reset()
        with pipeline.pipelined_transaction(connection):
            first = pipeline.ahead(connection, text("SELECT :n AS n, '100%' AS pct"), {"n": 7})
            connection.execute(text("CREATE TEMP TABLE ride (n int) ON COMMIT DROP"))
            pipeline.after(connection, "COMMIT")
            rows = connection.execute(text("INSERT INTO ride VALUES (1), (2) RETURNING n")).all()
        event.remove(engine, "before_cursor_execute", record)
    assert proxy.stats()["pg"].round_trips == 2
    assert first.one() == {"n": 7, "pct": "100%"}
    assert sorted(r.n for r in rows) == [1, 2]
    # Each statement is seen by the listeners, the ones riding along included.
    assert sorted(seen) == ["BEGIN", "COMMIT", "CREATE", "INSERT", "SELECT"]


def test_an_error_in_a_statement_riding_along_rolls_the_transaction_back(
    runtime: Runtime,
) -> None:
    with runtime.engine.connect() as connection:
        connection.execute(text("CREATE TABLE IF NOT EXISTS ride_test (n int)"))
        connection.execute(text("TRUNCATE ride_test"))
        connection.commit()
        with pytest.raises(DBAPIError), pipeline.pipelined_transaction(connection):
            connection.execute(text("INSERT INTO ride_test VALUES (1)"))
            pipeline.after(connection, text("SELECT 1 / (SELECT count(*) - 2 FROM ride_test)"))
            pipeline.after(connection, "COMMIT")
            connection.execute(text("INSERT INTO ride_test VALUES (2)"))
        assert connection.execute(text("SELECT count(*) FROM ride_test")).scalar() == 0
        connection.execute(text("DROP TABLE ride_test"))
        connection.commit()


def test_a_queued_statement_is_compiled_once_and_sent_with_each_call_s_parameters(
    counted: tuple[Engine, LatencyProxy],
) -> None:
    engine, _ = counted
    constant = text("SELECT CAST(:n AS int) AS n")
    with engine.connect() as connection:
        answers = []
        for n in (1, 2):
            queued = pipeline.ahead(connection, constant, {"n": n})
            connection.execute(text("SELECT 1")).all()
            answers.append(queued.one()["n"])
        assert answers == [1, 2]
        # The same clause object: one compiled form, reused; another object with the same text
        # (built per call) and a plain string each get theirs, and answer with their own rows.
        assert pipeline._form(connection.dialect, constant) is pipeline._form(
            connection.dialect, constant
        )
        for n in range(pipeline._MAX_FORMS + 5):  # more than the bound: still correct
            built = pipeline.ahead(
                connection, text(f"SELECT {n} AS m, CAST(:n AS int) AS n"), {"n": n}
            )
            plain = pipeline.after(connection, f"SELECT {n} + 1 AS m")
            connection.execute(text("SELECT 1")).all()
            assert built.one() == {"m": n, "n": n}
            assert plain.one() == {"m": n + 1}
        connection.rollback()


def _ride_table(connection: Any) -> None:
    connection.execute(text("CREATE TABLE IF NOT EXISTS ride_optional (n int)"))
    connection.execute(text("TRUNCATE ride_optional"))
    connection.commit()


def test_an_optional_statement_after_the_commit_fails_alone(runtime: Runtime) -> None:
    """A read queued ``optional`` after the COMMIT: its error is its own (and the optional
    statements the server skipped after it carry it too); the transaction stands committed, the
    statement it rode with answers, and the connection goes on."""
    with runtime.engine.connect() as connection:
        _ride_table(connection)
        with pipeline.pipelined_transaction(connection):
            connection.execute(text("INSERT INTO ride_optional VALUES (1)"))
            pipeline.after(connection, "COMMIT")
            before = pipeline.after(connection, text("SELECT 5 AS n"), optional=True)
            failing = pipeline.after(connection, text("SELECT 1 / 0 AS n"), optional=True)
            skipped = pipeline.after(connection, text("SELECT 6 AS n"), optional=True)
            rows = connection.execute(text("INSERT INTO ride_optional VALUES (2) RETURNING n"))
            assert [r.n for r in rows] == [2]
        assert before.one() == {"n": 5}
        for queued in (failing, skipped):
            assert not queued.ran
            assert "division by zero" in str(queued.error)
            with pytest.raises(RuntimeError, match="it failed: division by zero"):
                queued.rows()
        with runtime.engine.connect() as other:
            count = other.execute(text("SELECT count(*) FROM ride_optional")).scalar()
        assert count == 2
        assert connection.execute(text("SELECT 7")).scalar() == 7
        connection.execute(text("DROP TABLE ride_optional"))
        connection.commit()


def test_an_optional_failure_that_skips_a_statement_not_optional_is_the_statement_s(
    runtime: Runtime,
) -> None:
    """An optional read queued before the COMMIT: when it fails, the server skips the COMMIT
    after it, so the execution fails as a statement's own error would and nothing commits."""
    with runtime.engine.connect() as connection:
        _ride_table(connection)
        with (
            pytest.raises(DBAPIError, match="division by zero"),
            pipeline.pipelined_transaction(connection),
        ):
            failing = pipeline.after(connection, text("SELECT 1 / 0 AS n"), optional=True)
            pipeline.after(connection, "COMMIT")
            connection.execute(text("INSERT INTO ride_optional VALUES (1)"))
        assert failing.error is None and not failing.ran
        assert connection.execute(text("SELECT count(*) FROM ride_optional")).scalar() == 0
        connection.execute(text("DROP TABLE ride_optional"))
        connection.commit()


def test_the_statement_s_own_failure_raises_whatever_is_optional(runtime: Runtime) -> None:
    with runtime.engine.connect() as connection:
        _ride_table(connection)
        with (
            pytest.raises(DBAPIError, match="ride_missing"),
            pipeline.pipelined_transaction(connection),
        ):
            pipeline.after(connection, "COMMIT")
            pipeline.after(connection, text("SELECT 1 AS n"), optional=True)
            connection.execute(text("INSERT INTO ride_missing VALUES (1)"))
        connection.execute(text("DROP TABLE ride_optional"))
        connection.commit()


def test_a_queued_statement_with_values_written_into_it_is_rendered_as_sqlalchemy_does(
    runtime: Runtime,
) -> None:
    """A clause whose limits are written into the statement (``literal_execute``) and one with
    an expanding IN list ride along rendered as SQLAlchemy's own execution renders them."""
    from sqlalchemy import Integer, bindparam

    limited = text("SELECT n FROM generate_series(1, 10) n WHERE n > :low LIMIT :cap").bindparams(
        bindparam("cap", type_=Integer, literal_execute=True)
    )
    listed = text("SELECT n FROM generate_series(1, 10) n WHERE n IN :ns ORDER BY n").bindparams(
        bindparam("ns", expanding=True)
    )
    with runtime.engine.connect() as connection:
        for cap in (2, 3):
            first = pipeline.ahead(connection, limited, {"low": 4, "cap": cap})
            second = pipeline.after(connection, listed, {"ns": [2, 9, 11]})
            connection.execute(text("SELECT 1")).all()
            assert [r["n"] for r in first.rows()] == [5, 6, 7][:cap]
            assert [r["n"] for r in second.rows()] == [2, 9]
        connection.rollback()
