"""What an agent returns, made storable before the journal writes it.

A model's output is hostile input: its reply, its tool calls' arguments (``json.loads`` accepts
``NaN``), a tool's output and its settlement reasons may hold what PostgreSQL refuses to store:
a NUL character (in ``text`` and in ``jsonb``), a lone surrogate (not UTF-8), a non-finite number
(not JSON). One such value failed the activation's closing transaction on every attempt, so the
lane could never finish it. Here each is replaced by the nearest storable value, so what the model
did is still recorded:
- NUL becomes U+FFFD, and a lone surrogate too (a valid pair is kept as its character);
- NaN and the infinities become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``;
- a tuple becomes a list; anything else is left as it is (the writers convert the rest).
A value that needs nothing is returned as the same object.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from inner_plane.activation.model import AgentResult, Settlement

REPLACEMENT = "\ufffd"


def _text_problem(text: str) -> str | None:
    """Why PostgreSQL cannot store ``text``, or None."""
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def storable_text(text: str) -> str:
    if _text_problem(text) is None:
        return text
    # UTF-16 joins a valid surrogate pair into its character and replaces a lone one.
    text = text.replace("\x00", REPLACEMENT)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def storable(value: Any) -> Any:
    """``value`` with every string and number storable (see the module's docstring)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        cleaned = {storable(key): storable(item) for key, item in value.items()}
        unchanged = len(cleaned) == len(value) and all(
            new_key is key and new_item is item
            for (key, item), (new_key, new_item) in zip(value.items(), cleaned.items(), strict=True)
        )
        return value if unchanged else cleaned
    if isinstance(value, list | tuple):
        items = [storable(item) for item in value]
        unchanged = isinstance(value, list) and all(
            a is b for a, b in zip(value, items, strict=True)
        )
        return value if unchanged else items
    return value


def first_unstorable(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first string PostgreSQL cannot store (NUL, lone surrogate) as (field, reason):
    for input that is refused rather than cleaned (a signal's fields, a tool call's arguments)."""
    if isinstance(value, str):
        problem = _text_problem(value)
        return None if problem is None else (path, problem)
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = first_unstorable(key, where) or first_unstorable(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = first_unstorable(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _storable_settlement(settlement: Settlement) -> Settlement:
    reason = storable_text(settlement.reason)
    return (
        settlement
        if reason is settlement.reason
        else dataclasses.replace(settlement, reason=reason)
    )


def storable_result(result: AgentResult) -> AgentResult:
    """The agent's result with everything the journal records from it storable."""
    settlements = {
        signal_id: _storable_settlement(settlement)
        for signal_id, settlement in result.settlements.items()
    }
    return dataclasses.replace(
        result,
        settlements=settlements,
        tool_actions=_bounded(result.tool_actions, []),
        reply=None if result.reply is None else storable_text(result.reply),
        usage=_bounded(result.usage, {}),
        decision=storable_text(result.decision),
        model_input=_bounded(result.model_input, None),
        compactions=_bounded(result.compactions, []),
        agent=storable_text(result.agent),
    )


def _bounded(value: Any, too_deep: Any) -> Any:
    # Nested past the interpreter's recursion limit (a model's JSON can be): nothing of it
    # could be written anyway; the rest of the result still is.
    try:
        return storable(value)
    except RecursionError:
        return too_deep
