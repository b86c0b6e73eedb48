"""What `up`'s store keeper does at each look (pure), and its backoff: a running server is waited
for, answering or not; a server started from outside on our data dir is adopted once it answers
and never fought; a dead one is restarted when due; past the deadline, and only then, it gives
up."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.services.keeper import (
    FIRST_RESTART_AFTER_CLEAN_STOP_S,
    FIRST_RESTART_AFTER_S,
    MAX_BACKOFF_S,
    Look,
    Move,
    backoff_s,
    next_move,
)


def look(**changes: object) -> Look:
    base = {
        "alive": False,
        "other": False,
        "answers": False,
        "down_for_s": 1.0,
        "restart_due": True,
        "deadline_s": 300.0,
    }
    return Look(**{**base, **changes})  # type: ignore[arg-type]


def test_a_running_server_is_waited_for_whether_it_answers_or_not() -> None:
    assert next_move(look(alive=True, down_for_s=None)) is Move.WAIT
    assert next_move(look(alive=True, down_for_s=299.0)) is Move.WAIT  # SIGSTOP, recovery


def test_a_server_started_from_outside_is_adopted_once_it_answers_never_restarted_over() -> None:
    assert next_move(look(other=True, answers=True)) is Move.ADOPT
    assert next_move(look(other=True, answers=False)) is Move.WAIT  # still starting
    assert next_move(look(other=True, answers=False, restart_due=True)) is Move.WAIT


def test_a_dead_server_is_restarted_when_its_backoff_is_over() -> None:
    assert next_move(look()) is Move.RESTART
    assert next_move(look(restart_due=False)) is Move.WAIT


@given(
    alive=st.booleans(),
    other=st.booleans(),
    answers=st.booleans(),
    due=st.booleans(),
    down=st.one_of(st.none(), st.floats(0, 10_000)),
    deadline=st.floats(1, 5_000),
)
def test_it_gives_up_exactly_when_down_past_the_deadline(
    alive: bool, other: bool, answers: bool, due: bool, down: float | None, deadline: float
) -> None:
    move = next_move(
        Look(
            alive=alive,
            other=other,
            answers=answers,
            down_for_s=down,
            restart_due=due,
            deadline_s=deadline,
        )
    )
    assert (move is Move.GIVE_UP) == (down is not None and down > deadline)


def test_restarts_back_off_up_to_a_ceiling() -> None:
    delays = [backoff_s(n) for n in range(8)]
    assert delays[0] == FIRST_RESTART_AFTER_S
    assert delays[1:5] == [1.0, 2.0, 4.0, 8.0]
    assert delays[5:] == [MAX_BACKOFF_S] * 3


def test_a_clean_stop_waits_longer_for_its_successor_than_a_crash() -> None:
    # `pg_ctl restart` on a loaded machine: its new postmaster may take seconds to appear, and
    # the keeper must adopt it rather than start its own (and say it restarts) in between.
    assert backoff_s(0, stopped_cleanly=True) == FIRST_RESTART_AFTER_CLEAN_STOP_S
    assert FIRST_RESTART_AFTER_CLEAN_STOP_S > FIRST_RESTART_AFTER_S
    assert backoff_s(0, stopped_cleanly=False) == FIRST_RESTART_AFTER_S
    assert backoff_s(2, stopped_cleanly=True) == backoff_s(2)  # later tries: the same backoff


def test_a_restart_from_outside_under_way_is_waited_for_not_raced() -> None:
    # `pg_ctl restart` between its stop and its start: its own server is on its way.
    assert next_move(look(successor_coming=True)) is Move.WAIT
    assert next_move(look(successor_coming=True, other=True, answers=True)) is Move.ADOPT
    # Only the deadline ends the wait, as for any other.
    assert next_move(look(successor_coming=True, down_for_s=301.0)) is Move.GIVE_UP
