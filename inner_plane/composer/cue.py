"""The recall cue: words drawn from the activation itself (each signal's kind, source, mode and
data, such as a timer's name, scheduled time, recurrence and purpose; the user's message; the
delegate's local day and part of day). No code maps a signal to a memory: matching words do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from inner_plane.activation import Activation
from inner_plane.memory.query import cue_words as words_of
from inner_plane.memory.query import query_text

MAX_VALUE_CHARS = 400
_ID_LIKE = re.compile(r"^(?=\S*\d)\S+$")


def _values(data: Any, keys: bool = True, depth: int = 0) -> Iterator[str]:
    """Words-bearing strings of a signal's data: keys (when asked) and text values. Values with
    digits and no spaces (ids, timestamps, hashes) carry no words worth recalling by."""
    if depth > 4:
        return
    if isinstance(data, dict):
        for key, value in data.items():
            if keys:
                yield str(key)
            yield from _values(value, keys, depth + 1)
    elif isinstance(data, list | tuple):
        for value in data[:20]:
            yield from _values(value, keys, depth + 1)
    elif isinstance(data, str) and not _ID_LIKE.match(data):
        yield data[:MAX_VALUE_CHARS]


def part_of_day(local: datetime) -> str:
    hour = local.hour
    if 5 <= hour < 12:
        return "morning"
    if 12 <= hour < 18:
        return "afternoon"
    if 18 <= hour < 23:
        return "evening"
    return "night"


def cue_words(activation: Activation, local_now: datetime) -> list[str]:
    """Distinct lowercase words, most important first: the user's message, then per signal
    (highest priority first) its kind, source, mode and data, then the local day and time."""
    texts: list[str] = []
    if activation.user_message is not None:
        texts.append(activation.user_message.text[:2_000])
    for signal in _ordered(activation):
        texts.append(signal.kind.replace(".", " "))
        texts.append(signal.source)
        texts.append(signal.mode.value)
        texts.extend(_values(signal.data))
    texts.append(f"{local_now:%A} {part_of_day(local_now)}")
    return words_of(texts)


def content_words(activation: Activation) -> list[str]:
    """The cue for relevant ambient signals: the user's message and the signals' data values
    only. Kind, source and key words would match every retained signal of the same component."""
    texts: list[str] = []
    if activation.user_message is not None:
        texts.append(activation.user_message.text[:2_000])
    for signal in _ordered(activation):
        texts.extend(_values(signal.data, keys=False))
    return words_of(texts)


def _ordered(activation: Activation) -> list[Any]:
    return sorted(activation.signals, key=lambda s: (-s.priority, s.created_at))


__all__ = ["content_words", "cue_words", "part_of_day", "query_text"]
