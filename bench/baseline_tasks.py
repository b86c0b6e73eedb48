"""Bench-only Celery tasks, loaded into the benchmark's worker with ``--include``:

- ``bench.noop``: receives the same payload as ``inner_plane.publish`` and does nothing (Celery's
  own per-message cost);
- ``bench.insert_one``: a plain task doing one INSERT of the same row into ``signals`` and one
  commit (what a hand-written ingest task costs, without validation, dedup or logs).

They are not part of the plane: production workers never import this module.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from celery import shared_task
from psycopg.types.json import Jsonb

from inner_plane.journal.plain import libpq_url

INSERT_SQL = (
    "INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust, dedup_key,"
    " max_attempts, occurred_at, available_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now(), now())"
)


def row_params(signal: dict[str, Any]) -> tuple[Any, ...]:
    """The row the publish path would write for this wire-form signal (policy already known)."""
    return (
        signal["id"],
        signal.get("delegate_id", "default"),
        signal["kind"],
        signal["source"],
        signal.get("mode", "next-turn"),
        signal.get("priority", 50),
        Jsonb(signal.get("data", {})),
        signal.get("trust", "trusted"),
        signal.get("dedup_key"),
        5,
    )


_connection: tuple[int, psycopg.Connection[Any]] | None = None


def connection() -> psycopg.Connection[Any]:
    """One connection per pool process (a forked child must not share its parent's socket)."""
    global _connection
    if _connection is None or _connection[0] != os.getpid():
        url = libpq_url(os.environ["INNER_PLANE_DATABASE_URL"])
        _connection = (os.getpid(), psycopg.connect(url))
    return _connection[1]


@shared_task(name="bench.noop", acks_late=True, serializer="json")
def noop(signal: Any) -> None:
    return None


@shared_task(name="bench.insert_one", acks_late=True, serializer="json")
def insert_one(signal: dict[str, Any]) -> None:
    conn = connection()
    with conn.cursor() as cursor:
        cursor.execute(INSERT_SQL, row_params(signal))
    conn.commit()
