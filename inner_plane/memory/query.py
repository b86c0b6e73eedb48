"""Turning a cue into a full-text query: any of its words may match (OR), ranked by how many
match and how close together. Letters only: digits, ids and timestamps match nothing useful."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_WORDS = 32
_WORD = re.compile(r"[^\W\d_]{2,40}")


def cue_words(texts: Iterable[str], limit: int = MAX_WORDS) -> list[str]:
    """Distinct lowercase words in order of first appearance, at most ``limit``."""
    words: dict[str, None] = {}
    for chunk in texts:
        for word in _WORD.findall(chunk):
            words.setdefault(word.lower(), None)
            if len(words) >= limit:
                return list(words)
    return list(words)


def query_text(words: Iterable[str]) -> str:
    """The journal's recall input: the words, space-separated (each one may match alone)."""
    return " ".join(words)
