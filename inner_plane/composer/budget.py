"""The size budget, in estimated tokens (no tokenizer download: a byte count is a safe proxy).

Mandatory parts (instructions, time, the envelope header and every claimed signal's label, the
user's current message) are always kept. The rest is shared out per section; each section keeps
its items highest priority and newest first, and what is left over goes to the items that did not
fit, in the same order across sections. Everything not kept is recorded as cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# About 3 bytes per token: conservative for English, JSON and escapes (real models do better).
BYTES_PER_TOKEN = 3
ITEM_OVERHEAD = 4

SHARES = {
    "inner_context": 0.45,
    "standing_memory": 0.15,
    "recall": 0.15,
    "conversation": 0.15,
    "ambient": 0.10,
}


def estimate(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


@dataclass
class Piece:
    section: str
    id: str
    text: str
    priority: int
    # Within one priority, higher is kept first (a timestamp for "newest first", or a rank).
    keep: float
    payload: Any = None
    tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = estimate(self.text) + ITEM_OVERHEAD


@dataclass
class Allocation:
    kept: list[Piece]
    cut: list[dict[str, Any]]
    used: int


def allocate(pieces: list[Piece], available: int) -> Allocation:
    """Choose which optional pieces fit into ``available`` tokens."""

    def keep_order(piece: Piece) -> tuple[int, float]:
        return (-piece.priority, -piece.keep)

    kept_ids: set[int] = set()
    used = 0
    by_section: dict[str, list[Piece]] = {}
    for piece in pieces:
        by_section.setdefault(piece.section, []).append(piece)
    for section, members in by_section.items():
        allowance = int(max(available, 0) * SHARES.get(section, 0.05))
        spent = 0
        for piece in sorted(members, key=keep_order):
            if spent + piece.tokens <= allowance:
                kept_ids.add(id(piece))
                spent += piece.tokens
        used += spent
    # Leftover shares go to whatever did not fit, highest priority and newest first.
    for piece in sorted(pieces, key=keep_order):
        if id(piece) not in kept_ids and used + piece.tokens <= available:
            kept_ids.add(id(piece))
            used += piece.tokens
    kept = [p for p in pieces if id(p) in kept_ids]
    cut = [
        {
            "section": p.section,
            "id": p.id,
            "priority": p.priority,
            "estimated_tokens": p.tokens,
            "reason": "size budget",
        }
        for p in sorted(pieces, key=keep_order, reverse=True)
        if id(p) not in kept_ids
    ]
    return Allocation(kept, cut, used)
