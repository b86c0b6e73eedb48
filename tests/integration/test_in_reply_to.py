"""A user turn answers a question by ``in_reply_to``: the id must be a question put to that
delegate's person, else the error names ``in_reply_to`` and nothing is stored."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.journal.people import questions
from inner_plane.lane.user_turns import user_turn
from inner_plane.runtime import Runtime
from inner_plane.signals.model import SignalError


def _turns(runtime: Runtime) -> int:
    with runtime.engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM user_turns")).scalar_one())


def _ask(runtime: Runtime, delegate: str) -> uuid.UUID:
    with runtime.engine.begin() as connection:
        asked = questions.ask(
            connection,
            question_id=uuid.uuid4(),
            delegate_id=delegate,
            signal_id=uuid.uuid4(),
            activation_id=None,
            about="calendar.conflict: two events overlap",
            text="Move the dentist to Friday?",
        )
    return asked[0].id


def test_an_answer_links_its_question_and_unknown_ids_store_nothing(runtime: Runtime) -> None:
    mine, theirs = _ask(runtime, "alice"), _ask(runtime, "bob")
    turn = user_turn("alice", "yes, do it", channel="app", runtime=runtime, in_reply_to=mine)
    stored = UserTurns(runtime.engine).get(turn)
    assert stored is not None and stored.in_reply_to == mine

    for wrong in (uuid.uuid4(), theirs):  # no such question; another delegate's question
        with pytest.raises(SignalError) as caught:
            user_turn("alice", "yes", channel="app", runtime=runtime, in_reply_to=wrong)
        assert caught.value.field == "in_reply_to"
    assert _turns(runtime) == 1


def test_an_explicit_turn_id_queues_once(runtime: Runtime) -> None:
    question = _ask(runtime, "alice")
    turn_id = uuid.uuid4()
    for _ in range(3):
        assert (
            user_turn("alice", "yes", runtime=runtime, in_reply_to=question, turn_id=turn_id)
            == turn_id
        )
    assert _turns(runtime) == 1
