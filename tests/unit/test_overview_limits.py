"""The lanes read's limit is written into its statement (so its prepared statement keeps one
generic plan): only a whole number of lanes, never a value that could change the statement."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.journal.operator import overview


class Recorded:
    """The statements a read sends, answering none (the rows are not what is tested here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def __call__(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        self.sent.append((sql, params))
        return []


@given(st.integers(min_value=0, max_value=10**12))
def test_the_limit_is_the_number_written_into_the_statement(top: int) -> None:
    rows = Recorded()
    assert overview.lanes(rows, top) == []
    [(sql, params)] = rows.sent
    assert params is None
    assert f"LIMIT {top}\n" in sql
    assert "{" not in sql and "%(" not in sql


@pytest.mark.parametrize("top", [-1, -(10**9)])
def test_a_negative_limit_is_refused_naming_it_and_sends_nothing(top: int) -> None:
    rows = Recorded()
    with pytest.raises(ValueError, match="top: must be 0 or more"):
        overview.lanes(rows, top)
    assert rows.sent == []


@pytest.mark.parametrize("top", [1.5, "10", "10; DROP TABLE signals", None])
def test_a_limit_that_is_not_a_whole_number_is_refused_and_sends_nothing(top: Any) -> None:
    rows = Recorded()
    with pytest.raises(TypeError):
        overview.lanes(rows, top)
    assert rows.sent == []
