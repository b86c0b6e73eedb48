"""The composer's size budget: per-section shares, keep order, leftovers, and what is cut."""

from __future__ import annotations

from inner_plane.composer.budget import (
    BYTES_PER_TOKEN,
    ITEM_OVERHEAD,
    SHARES,
    Piece,
    allocate,
    estimate,
)


def piece(section: str, ident: str, tokens: int, priority: int = 0, keep: float = 0.0) -> Piece:
    """A piece costing exactly ``tokens`` estimated tokens, overhead included."""
    text = "x" * ((tokens - ITEM_OVERHEAD) * BYTES_PER_TOKEN)
    made = Piece(section, ident, text, priority, keep)
    assert made.tokens == tokens
    return made


def kept_ids(pieces: list[Piece], available: int) -> list[str]:
    return [p.id for p in allocate(pieces, available).kept]


def test_estimate_rounds_bytes_up_to_tokens() -> None:
    assert estimate("") == 0
    assert estimate("abc") == 1
    assert estimate("abcd") == 2
    assert estimate("é") == 1  # two bytes


def test_the_shares_add_up_to_the_whole() -> None:
    assert abs(sum(SHARES.values()) - 1.0) < 1e-9


def test_each_section_keeps_within_its_share_when_everything_competes() -> None:
    # 100 tokens: inner_context may take 45, ambient 10.
    pieces = [
        piece("inner_context", "i1", 40),
        piece("ambient", "a1", 10),
        piece("ambient", "a2", 10, keep=1.0),
    ]
    result = allocate(pieces, 100)
    assert [p.id for p in result.kept] == ["i1", "a1", "a2"]  # a1 fits the leftover pass
    assert result.used == 60 and result.cut == []


def test_leftover_goes_to_what_did_not_fit_highest_priority_first() -> None:
    # recall's share of 100 is 15: neither 30-token piece fits it; the leftover pass keeps the
    # higher priority one only (60 + 30 = 90 <= 100, then 90 + 30 > 100).
    pieces = [
        piece("inner_context", "i1", 45),
        piece("recall", "low", 30, priority=1),
        piece("recall", "high", 30, priority=5),
        piece("conversation", "c1", 15),
    ]
    result = allocate(pieces, 100)
    assert [p.id for p in result.kept] == ["i1", "high", "c1"]
    assert result.cut == [
        {
            "section": "recall",
            "id": "low",
            "priority": 1,
            "estimated_tokens": 30,
            "reason": "size budget",
        }
    ]


def test_within_a_section_newest_is_kept_first() -> None:
    pieces = [piece("recall", "old", 10, keep=1.0), piece("recall", "new", 10, keep=2.0)]
    # recall's share of 15 is 2: neither fits it; the leftover pass has room for one, the newest.
    assert kept_ids(pieces, 15) == ["new"]


def test_an_unknown_section_gets_a_small_default_share() -> None:
    # 5% of 100 = 5 tokens: a 5-token piece fits its share; a 6-token one fits no budget of 5.
    assert kept_ids([piece("custom", "c", 5)], 100) == ["c"]
    assert allocate([piece("custom", "c", 6)], 5).kept == []


def test_nothing_available_cuts_everything_in_reverse_keep_order() -> None:
    pieces = [piece("recall", "a", 5, priority=2), piece("ambient", "b", 5, priority=1)]
    result = allocate(pieces, 0)
    assert result.kept == [] and result.used == 0
    assert [c["id"] for c in result.cut] == ["b", "a"]


def test_a_negative_budget_is_treated_as_none() -> None:
    assert allocate([piece("recall", "a", 5)], -10).kept == []
