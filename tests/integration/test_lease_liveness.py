"""The lease's liveness lock: a holder whose connection (process) died is taken over at once; a
living holder, a holder without the lock, and a paused holder are handled by the TTL and the
epoch fence exactly as before."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from inner_plane.journal.lane.leases import LeaseLost, Leases, fence
from inner_plane.runtime import Runtime


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
        holder.invalidate()  # the holder's process dies: PostgreSQL ends its session
        holder.close()
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
