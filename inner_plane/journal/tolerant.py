"""Readers that never fail on a stored value: what the journal holds can always be read back.

The intake keeps timestamps inside a window and JSON shallow, but a row can still be made odd
behind the model's back (a direct UPDATE, an old version, a restore). Reading such a row must not
stop a lane, the sweeper or an operator's list, so every engine of the plane loads:

- a ``timestamptz`` Python cannot hold (after year 9999, before year 1, ``infinity``) as the
  nearest instant it can (:data:`FAR_PAST` / :data:`FAR_FUTURE`);
- ``json``/``jsonb`` nested too deep for Python's parser as ``{UNREADABLE: reason}``.

Both lie outside what the intake accepts, so the lane recognises such a row and quarantines it
(see ``inner_plane.signals.model.stored_problem``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.types.json import set_json_loads

from inner_plane.signals.unreadable import UNREADABLE_DATA

FAR_PAST = datetime.min.replace(tzinfo=UTC)
FAR_FUTURE = datetime.max.replace(tzinfo=UTC)
UNREADABLE = UNREADABLE_DATA


# The loader psycopg would use (its C one where psycopg-binary is installed, about five times
# faster than the Python one, and not a type Python can subclass): wrapped, not inherited.
_EXACT_TIMESTAMPTZ = psycopg.adapters.get_loader(
    psycopg.postgres.types["timestamptz"].oid, psycopg.pq.Format.TEXT
)


class TolerantTimestamptzLoader(Loader):
    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        assert _EXACT_TIMESTAMPTZ is not None
        self._exact = _EXACT_TIMESTAMPTZ(oid, context)

    def load(self, data: Buffer) -> datetime:
        try:
            value: datetime = self._exact.load(data)
            return value
        except psycopg.DataError:
            text = bytes(data).decode("ascii", "replace")
            return FAR_PAST if text.endswith("BC") or text.startswith("-") else FAR_FUTURE


def tolerant_json_loads(data: str | bytes) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        return {UNREADABLE: f"JSON nested too deep to read ({len(data)} bytes)"}


def install(connection: psycopg.Connection[Any]) -> None:
    """Register the tolerant loaders on one driver connection."""
    connection.adapters.register_loader("timestamptz", TolerantTimestamptzLoader)
    set_json_loads(tolerant_json_loads, connection)
