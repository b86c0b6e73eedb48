"""The intake limits every face shares (signal model), as cases each face's test runs: the
fields to merge into a valid signal, and the field the refusal must name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inner_plane.signals.model import MAX_DATA_DEPTH, MAX_DATA_KEYS


def nested(depth: int) -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (``{}`` is one level)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"d": value}
    return value


def wide(keys: int) -> dict[str, Any]:
    return {f"k{n}": n for n in range(keys)}


@dataclass(frozen=True)
class Limit:
    id: str
    field: str
    fields: dict[str, Any]
    # Faces whose wire format cannot carry the value (the CLI has no JSON priority or numeric
    # timestamps; MCP and HTTP fix the source).
    not_on: tuple[str, ...] = ()


LIMITS = [
    Limit("year-10000-in-utc", "occurred_at", {"occurred_at": "9999-12-31T23:59:59-00:01"}),
    Limit("year-0-in-utc", "expires_at", {"expires_at": "0001-01-01T00:00:00+00:01"}),
    Limit("before-1970", "available_at", {"available_at": "1969-12-31T23:59:59+00:00"}),
    Limit("after-9000", "occurred_at", {"occurred_at": "9000-01-01T00:00:00Z"}),
    Limit("number-timestamp", "occurred_at", {"occurred_at": 1_700_000_000}, ("cli",)),
    Limit("data-too-deep", "data", {"data": nested(MAX_DATA_DEPTH + 1)}),
    Limit("data-too-wide", "data", {"data": wide(MAX_DATA_KEYS + 1)}),
    Limit("kind-trailing-newline", "kind", {"kind": "external.ci.x\n"}),
    Limit("source-trailing-newline", "source", {"source": "copilot\n"}, ("http", "mcp")),
    Limit("delegate-trailing-newline", "delegate_id", {"delegate_id": "default\n"}),
    Limit("dedup-key-newline", "dedup_key", {"dedup_key": "k\n"}),
    Limit("dedup-key-line-separator", "dedup_key", {"dedup_key": "k\u2028x"}),
    Limit("priority-bool", "priority", {"priority": True}, ("cli",)),
    Limit("priority-string", "priority", {"priority": "50"}, ("cli",)),
]


def limits_for(face: str) -> list[Limit]:
    return [limit for limit in LIMITS if face not in limit.not_on]
