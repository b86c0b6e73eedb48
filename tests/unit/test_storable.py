"""What an agent returns is made storable before the journal writes it: no NUL, no lone
surrogate, no non-finite number survives, anything already storable is returned as the same
object, and the cleaning is idempotent."""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.activation import AgentResult, Disposition, Settlement
from inner_plane.activation.storable import storable, storable_result, storable_text

# Every code point, surrogates (category Cs) and NUL included.
ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(ANY_TEXT, inner, max_size=4)
    ),
    max_leaves=20,
)

# A \u0000 escape: preceded by an even number of backslashes (none escaping it).
NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _storable_json(value: Any) -> str:
    """What PostgreSQL's jsonb would be sent; raises if it could not take it."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogate
    # No NUL, raw or as the escape \u0000 (an escaped backslash before "u0000" is plain text).
    assert "\x00" not in text and NUL_ESCAPE.search(text) is None
    return text


@given(JSONISH)
def test_anything_becomes_storable_json(value: Any) -> None:
    _storable_json(storable(value))


@given(JSONISH)
def test_storable_is_idempotent(value: Any) -> None:
    once = storable(value)
    assert _storable_json(storable(once)) == _storable_json(once)


# Text PostgreSQL takes as it is: no NUL, no surrogate.
CLEAN_TEXT = st.text(st.characters(exclude_categories=("Cs",), min_codepoint=1), max_size=5)
CLEAN = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | CLEAN_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(CLEAN_TEXT, inner, max_size=3),
)


@given(CLEAN)
def test_what_is_already_storable_is_the_same_object(value: Any) -> None:
    assert storable(value) is value


def test_each_replacement() -> None:
    assert storable_text("a\x00b") == "a\ufffdb"
    assert storable_text("\ud800x") == "\ufffdx"  # a lone surrogate
    assert storable_text("\ud83d\ude00") == "\U0001f600"  # a pair is its character
    assert storable([math.nan, math.inf, -math.inf, 1.5]) == ["NaN", "Infinity", "-Infinity", 1.5]
    assert storable({"k\x00": ("a", 1)}) == {"k\ufffd": ["a", 1]}


@given(reply=ANY_TEXT, reason=ANY_TEXT, arguments=JSONISH)
def test_an_agent_result_is_storable_throughout(reply: str, reason: str, arguments: Any) -> None:
    signal_id = uuid.uuid4()
    result = AgentResult(
        settlements={signal_id: Settlement(Disposition.ACTED, reason)},
        tool_actions=[{"name": "t", "arguments": arguments, "output": arguments}],
        reply=reply,
        usage={"input_tokens": 3, "cost": math.nan},
        decision=reason,
        model_input=[{"role": "user", "content": reply}],
        compactions=[{"note": reason}],
        agent="a\x00",
    )
    cleaned = storable_result(result)
    _storable_json(
        [cleaned.tool_actions, cleaned.usage, cleaned.model_input, cleaned.compactions,
         cleaned.reply, cleaned.decision, cleaned.agent,
         cleaned.settlements[signal_id].reason]
    )  # fmt: skip
    assert cleaned.settlements[signal_id].disposition is Disposition.ACTED


def test_a_result_nested_past_the_recursion_limit_keeps_the_rest() -> None:
    deep: Any = "x"
    for _ in range(5_000):
        deep = [deep]
    cleaned = storable_result(AgentResult(tool_actions=[{"arguments": deep}], reply="ok\x00"))
    assert cleaned.tool_actions == [] and cleaned.reply == "ok\ufffd"
