"""Bench-only Celery task: the raw enqueue-to-start baseline for bench/lane.py. Loaded into the
activation worker with ``--include bench.lane_baseline``; never part of the production app."""

from __future__ import annotations

import time

from celery import shared_task

from inner_plane.runtime import get_runtime


@shared_task(name="bench.lane_start_probe", acks_late=True)
def start_probe(sent_at: float, key: str) -> None:
    get_runtime().redis.rpush(key, f"{sent_at}:{time.time()}")
