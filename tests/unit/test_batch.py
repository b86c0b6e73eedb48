"""``journal.plain.Batch``: independent reads sent together where the rows can pipeline, one by
one otherwise, each read answered with what its own statement returned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.journal.plain import Batch, Found, PipelinedRows, Read, Statement


class Journal:
    """Answers each statement with rows naming it and its parameters; counts how it was asked."""

    def __init__(self) -> None:
        self.calls: list[Statement] = []

    def __call__(self, sql: str, params: Mapping[str, Any] | None = None) -> Found:
        self.calls.append((sql, params))
        return [{"sql": sql, "params": dict(params or {})}]


class PipelinedJournal(Journal):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[Statement]] = []

    def many(self, statements: Sequence[Statement]) -> list[Found]:
        self.batches.append(list(statements))
        return [[{"sql": sql, "params": dict(params or {})}] for sql, params in statements]


def _described(found: Found) -> str:
    (row,) = found
    return f"{row['sql']}|{sorted(row['params'].items())}"


statements = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=20),
        st.none() | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    ),
    max_size=8,
)


@given(statements)
def test_each_read_gets_its_own_statements_rows_either_way(batch: list[Statement]) -> None:
    answers = []
    for rows in (Journal(), PipelinedJournal()):
        together = Batch(rows)
        later = [together.add(Read(sql, params, _described)) for sql, params in batch]
        together.run()
        answers.append([each.value for each in later])
    expected = [_described([{"sql": sql, "params": dict(params or {})}]) for sql, params in batch]
    assert answers == [expected, expected]


@given(statements.filter(lambda batch: len(batch) > 1))
def test_rows_that_pipeline_get_every_statement_in_one_call(batch: list[Statement]) -> None:
    rows = PipelinedJournal()
    assert isinstance(rows, PipelinedRows)
    together = Batch(rows)
    for sql, params in batch:
        together.add(Read(sql, params, _described))
    together.run()
    assert rows.batches == [batch] and rows.calls == []


def test_plain_rows_answer_one_statement_at_a_time_in_order() -> None:
    rows = Journal()
    assert not isinstance(rows, PipelinedRows)
    together = Batch(rows)
    together.add(Read("first", None, _described))
    together.add(Read("second", {"n": 1}, _described))
    together.run()
    assert rows.calls == [("first", None), ("second", {"n": 1})]


def test_a_single_read_is_sent_alone() -> None:
    rows = PipelinedJournal()
    together = Batch(rows)
    only = together.add(Read("only", None, _described))
    together.run()
    assert rows.batches == [] and rows.calls == [("only", None)]
    assert only.value == "only|[]"


def test_a_value_before_its_batch_ran_is_refused() -> None:
    together = Batch(Journal())
    later = together.add(Read("x", None, _described))
    with pytest.raises(RuntimeError, match="has not run"):
        _ = later.value


def test_a_read_whose_answer_is_none_is_answered() -> None:
    together = Batch(Journal())
    nothing = together.add(Read("x", None, lambda found: None))
    together.run()
    assert nothing.value is None


def test_an_error_in_the_rows_reaches_the_caller_and_answers_nothing() -> None:
    class Failing(PipelinedJournal):
        def many(self, statements: Sequence[Statement]) -> list[Found]:
            raise LookupError("relation does not exist")

    together = Batch(Failing())
    first = together.add(Read("a", None, _described))
    together.add(Read("b", None, _described))
    with pytest.raises(LookupError, match="does not exist"):
        together.run()
    with pytest.raises(RuntimeError, match="has not run"):
        _ = first.value
