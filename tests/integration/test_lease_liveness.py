"""The lease's liveness lock: a holder whose connection (process) died is taken over at once; a
living holder, a holder without the lock, and a paused holder are handled by the TTL and the
epoch fence exactly as before. The sweeper applies the same rule: a dead holder's claims are
recovered by the next sweep, a living or paused holder's are not."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Connection, text

from inner_plane.journal.lane.leases import LeaseLost, Leases, fence
from inner_plane.journal.lane.recovery import Recovery
from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.waiting import wait_until


def end_session(runtime: Runtime, connection: Connection) -> None:
    """The holder's process dies: its connection drops, and PostgreSQL ends its session (and
    frees its advisory locks) a moment later, which is awaited here: a loaded machine can take
    a while to reap the backend."""
    pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    connection.invalidate()
    connection.close()

    def gone() -> bool:
        with runtime.engine.connect() as probe:
            return not probe.execute(
                text("SELECT 1 FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).first()

    wait_until(gone, f"backend {pid} to end")


def expire_lease(runtime: Runtime, delegate: str) -> None:
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE leases SET expires_at = now() - interval '1 s' WHERE delegate_id = :d"),
            {"d": delegate},
        )


def test_a_dead_holder_is_taken_over_at_once_and_its_epoch_is_fenced(runtime: Runtime) -> None:
    leases = Leases(runtime.engine)
    holder = runtime.engine.connect()
    assert leases.take("d", "holder", 60, holder) == (1, False)

    with runtime.engine.connect() as taker:
        assert leases.take("d", "taker", 60, taker) is None  # alive: refused
        end_session(runtime, holder)
        assert leases.take("d", "taker", 60, taker) == (2, False)  # unexpired, yet taken
        with runtime.engine.begin() as connection, pytest.raises(LeaseLost):
            fence(connection, "d", 1)
        assert leases.renew("d", 1, 60) is False
        assert leases.release("d", 1) is False
        assert leases.take("d", "third", 60, None) is None  # the taker holds the lock now
        assert leases.release("d", 2) is True
        Leases.let_go(taker)


def test_a_living_holder_that_released_its_connection_lock_keeps_nothing(
    runtime: Runtime,
) -> None:
    leases = Leases(runtime.engine)
    with runtime.engine.connect() as first:
        assert leases.take("d", "first", 60, first) == (1, False)
        assert leases.release("d", 1)
        Leases.let_go(first)
    with runtime.engine.connect() as again:
        # The pooled connection comes back without the lock: a new holder takes it fresh.
        assert leases.take("d", "second", 60, again) == (2, False)
        with runtime.engine.connect() as other:
            assert leases.take("d", "other", 60, other) is None
            rows = other.execute(
                text(
                    "SELECT count(*) FROM pg_locks"
                    " WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                )
            ).scalar_one()
            assert rows == 0  # a refused take leaves no lock behind
        Leases.let_go(again)


def test_a_lease_taken_without_the_lock_waits_for_its_ttl(runtime: Runtime) -> None:
    leases = Leases(runtime.engine)
    assert leases.acquire("d", "lockless", 60) == 1
    with runtime.engine.connect() as taker:
        assert leases.take("d", "taker", 60, taker) is None  # its lock is free, yet no takeover
        Leases.let_go(taker)
        expire_lease(runtime, "d")
        assert leases.take("d", "taker", 60, taker) == (2, False)
        Leases.let_go(taker)


def test_a_paused_holder_keeps_its_lock_and_is_taken_over_on_expiry_only(
    runtime: Runtime,
) -> None:
    leases = Leases(runtime.engine)
    paused = runtime.engine.connect()
    try:
        assert leases.take("d", "paused", 60, paused) == (1, False)
        with runtime.engine.connect() as taker:
            assert leases.take("d", "taker", 60, taker) is None
            expire_lease(runtime, "d")  # the pause outlived the TTL
            assert leases.take("d", "taker", 60, taker) == (2, False)
            liveness = taker.execute(
                text("SELECT liveness_lock FROM leases WHERE delegate_id = 'd'")
            ).scalar_one()
            taker.rollback()
            assert liveness is False  # the paused one still holds the lock
            with runtime.engine.connect() as third:
                assert leases.take("d", "third", 60, third) is None  # no early takeover
                Leases.let_go(third)
            with runtime.engine.begin() as connection, pytest.raises(LeaseLost):
                fence(connection, "d", 1)  # the paused holder, waking, writes nothing
            Leases.let_go(taker)
    finally:
        Leases.let_go(paused)
        paused.close()


def test_a_taker_waits_out_a_holder_whose_death_postgresql_has_not_seen_yet(
    runtime: Runtime,
) -> None:
    leases = Leases(runtime.engine)
    holder = runtime.engine.connect()
    assert leases.take("d", "holder", 60, holder) == (1, False)
    with runtime.engine.connect() as taker:
        assert Leases.wait_for_liveness(taker, "d", 0.2) is False  # alive: no lock
        dies = threading.Timer(0.3, holder.invalidate)  # the holder's session ends meanwhile
        dies.start()
        assert Leases.wait_for_liveness(taker, "d", 10) is True
        dies.join()
        assert leases.take("d", "taker", 60, taker) == (2, False)
        Leases.let_go(taker)
    holder.close()


# --- the sweeper's liveness rule: a dead holder's claims come back at the next sweep ---


def claimed_signal(runtime: Runtime, delegate: str) -> None:
    """A signal left claimed by the lease's holder (as a killed activation leaves it)."""
    signal = publish(
        kind="task.completed", source="liveness", delegate_id=delegate, runtime=runtime
    )
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET state = 'claimed' WHERE id = :id"), {"id": signal.id}
        )


def advisory_locks(runtime: Runtime) -> int:
    with runtime.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            ).scalar_one()
        )


def test_the_sweeper_recovers_a_dead_holders_claims_before_the_ttl(runtime: Runtime) -> None:
    leases = Leases(runtime.engine)
    holder = runtime.engine.connect()
    assert leases.take("d", "holder", 600, holder) == (1, False)
    claimed_signal(runtime, "d")
    assert sweep(runtime).recovered == []  # alive: its claims are its own
    assert advisory_locks(runtime) == 1  # the probe left no lock of its own behind

    end_session(runtime, holder)
    report = sweep(runtime)  # the lease has ten minutes left, yet:
    assert report.recovered == ["d"] and report.woken == ["d"]
    assert advisory_locks(runtime) == 0
    with runtime.engine.connect() as taker:  # the activate the sweep sent takes over at once
        assert leases.take("d", "taker", 600, taker) == (2, True)
        Leases.let_go(taker)


def test_the_sweeper_wakes_due_work_of_a_dead_holder_and_leaves_a_living_ones(
    runtime: Runtime,
) -> None:
    leases = Leases(runtime.engine)
    living, dead = runtime.engine.connect(), runtime.engine.connect()
    try:
        assert leases.take("alive", "living", 600, living) == (1, False)
        assert leases.take("gone", "dead", 600, dead) == (1, False)
        for delegate in ("alive", "gone"):
            publish(kind="task.completed", source="liveness", delegate_id=delegate, runtime=runtime)
        end_session(runtime, dead)
        report = sweep(runtime)
        assert report.recovered == [] and report.woken == ["gone"]
    finally:
        Leases.let_go(living)
        living.close()
        dead.close()


def test_the_sweeper_leaves_a_paused_or_lockless_holder_to_the_ttl(runtime: Runtime) -> None:
    leases = Leases(runtime.engine)
    paused = runtime.engine.connect()  # a SIGSTOPped worker: its session lives on
    try:
        assert leases.take("paused", "paused", 600, paused) == (1, False)
        assert leases.acquire("lockless", "lockless", 600) == 1  # no liveness lock to test
        for delegate in ("paused", "lockless"):
            claimed_signal(runtime, delegate)
        assert sweep(runtime).recovered == []
        expire_lease(runtime, "paused")
        expire_lease(runtime, "lockless")
        assert sorted(sweep(runtime).recovered) == ["lockless", "paused"]
        with runtime.engine.connect() as taker:
            assert leases.take("paused", "taker", 600, taker) == (2, True)
            Leases.let_go(taker)
        with runtime.engine.begin() as connection, pytest.raises(LeaseLost):
            fence(connection, "paused", 1)  # the paused holder, waking, writes nothing
    finally:
        Leases.let_go(paused)
        paused.close()


def test_a_limited_sweep_finds_its_limit_past_the_delegates_whose_lease_is_held(
    runtime: Runtime,
) -> None:
    """The sweeper reads the due wakes in delegate order up to its limit (so that the read is an
    index scan: test_query_plans), and the held leases are dropped after that read: the limit
    covers them, so the delegates first in order being busy hides none of the others."""
    leases = Leases(runtime.engine)
    for busy in ("a", "b"):
        assert leases.acquire(busy, f"worker-{busy}", 600) == 1
    for delegate in ("a", "b", "c", "d", "e"):
        publish(kind="task.completed", source="limit", delegate_id=delegate, runtime=runtime)
    assert sorted(Recovery(runtime.engine).delegates_to_wake(limit=3)) == ["c", "d", "e"]
    assert len(Recovery(runtime.engine).delegates_to_wake(limit=2)) == 2
