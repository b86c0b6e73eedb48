"""EXPLAIN ANALYZE for the plan tests that count the pages a statement touches."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection


def analyzed(connection: Connection, sql: str, parameters: Any = None) -> dict[str, Any]:
    """The top node of ``sql``'s EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON), explained once the
    statement has run on this connection. A backend's first run of a statement also reads
    catalog pages into the backend's own caches, and EXPLAIN counts them with the statement's:
    the composer's snapshot touched 33 pages on a new connection and 18 on one that had run it.
    A test comparing two counts taken on connections the pool handed out, one new and one used,
    saw that difference as growth (or hid growth behind it)."""
    connection.exec_driver_sql(sql, parameters).close()
    (document,) = connection.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, parameters
    ).one()
    top: dict[str, Any] = document[0]["Plan"]
    return top


def buffers(plan: dict[str, Any]) -> int:
    """The shared buffers a plan node and those under it touched (hit or read)."""
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
