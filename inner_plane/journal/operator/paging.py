"""Keyset pages for the operator's reads: the page value, opaque cursors, and rows as JSON-ready
dicts. A cursor encodes the last key of a page; the next page reads ``WHERE key < :cursor``."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Row

MAX_LIMIT = 500


class CursorError(ValueError):
    """A cursor that this module did not hand out."""


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def encode_cursor(*values: Any) -> str:
    raw = json.dumps([jsonable(v) for v in values], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, types: Sequence[type]) -> list[Any]:
    """The values of a cursor, each parsed as the given type (int, str, uuid.UUID, datetime)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(types):
            raise ValueError("wrong shape")
        parsed: list[Any] = []
        for value, kind in zip(values, types, strict=True):
            if kind is datetime:
                parsed.append(datetime.fromisoformat(value))
            elif kind is int:
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError("not an integer")
                parsed.append(value)
            else:
                parsed.append(kind(value))
        return parsed
    except (ValueError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise CursorError("not a cursor of this list") from None


def jsonable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def record(row: Row[Any], drop: Sequence[str] = ()) -> dict[str, Any]:
    """A row as a JSON-ready dict, by column name (``drop``: columns left out)."""
    return {k: jsonable(v) for k, v in row._mapping.items() if k not in drop}


def page_limit(limit: int) -> int:
    """A requested page size within 1..MAX_LIMIT."""
    return max(1, min(MAX_LIMIT, limit))
