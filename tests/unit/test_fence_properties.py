"""Fencing and budgeting as properties over arbitrary input (no database)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from inner_plane.composer import fence
from inner_plane.composer.budget import SHARES, Piece, allocate

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=200),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=30), json_values, max_size=6))
def test_any_payload_encodes_to_one_inert_ascii_line_that_decodes_back(
    data: dict[str, Any],
) -> None:
    encoded, removed = fence.encode_data(data)
    assert removed == 0
    assert "\n" not in encoded and "\r" not in encoded and encoded.isascii()
    assert not set("<>`#") & set(encoded)
    assert not re.search(r"(?i)\b(system|developer|assistant|user|tool)\s*:", encoded)
    assert json.loads(encoded) == data
    token = fence.new_token()
    block = fence.fenced(token, "id=x", encoded).splitlines()
    assert block[0] == fence.open_marker(token, "id=x") and block[-1] == fence.close_marker(token)
    assert len(block) == 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(SHARES)), st.integers(0, 100), st.integers(1, 5_000)),
        max_size=60,
    ),
    st.integers(0, 20_000),
)
def test_allocation_never_exceeds_the_budget_and_cuts_lowest_priority_first(
    specs: list[tuple[str, int, int]], available: int
) -> None:
    now = datetime.now(UTC).timestamp()
    pieces = [
        Piece(section, f"p{n}", "x" * size, priority, now - n)
        for n, (section, priority, size) in enumerate(specs)
    ]
    allocation = allocate(pieces, available)
    assert allocation.used == sum(p.tokens for p in allocation.kept) <= max(available, 0)
    assert {c["id"] for c in allocation.cut} | {p.id for p in allocation.kept} == {
        p.id for p in pieces
    }
    # Nothing was cut that still fitted in what was left over.
    left = max(available, 0) - allocation.used
    for record in allocation.cut:
        assert record["estimated_tokens"] > left
