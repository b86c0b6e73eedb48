"""Benchmark of the timer tick (issue 5) with 10,000 dynamic timers, in one run on the same
stores:

  (a) tick: one ``inner_plane.timers.tick`` run: lock the due timers, decide each (missed policy,
      next moment in its zone), publish one ``timer.due`` signal per due moment through the
      publish path (Redis fast-path dedup + journal insert), move the cursors, commit;
  (b) baseline: the plain indexed query for the same due rows at the same instant
      (``SELECT id FROM timers WHERE state = 'active' AND next_due <= :now``);
  (c) the tick's own SQL: each statement the tick sends, timed from send to answer (engine
      events), summed per tick (``tick_sql_*``), and its write alone (``write_*``). That is the
      floor under (a) that no change to the tick's Python moves (docs/timers.md).

The timers are a realistic mix (intervals of a minute to a day, and daily cron timers in
Europe/Berlin), spread so that about 40 moments fall due per second. The clock is simulated:
run k ticks at ``base + k`` seconds back to back, and each run's query is timed just before its
tick, at the same instant, so both see the same due set. Most of a busy tick is the publish path
itself (dedup, journal insert, wake scheduling) for each due moment; an idle tick (nothing due)
shows the fixed cost. Prints medians and p99; the last line is one JSON object with every figure.

The machine is shared (2 cores, other test runs): read the ratio, not the absolute times.

    .venv/bin/python -m bench.timers [--quick] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import statistics
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert

from bench import harness
from bench.harness import QUICK, median, p99, ratio
from inner_plane import logs
from inner_plane.config import build_settings
from inner_plane.journal.timers.store import TimerJournal, TimerRow
from inner_plane.runtime import build_runtime, redis_client, set_runtime
from inner_plane.signals.kinds import KindRegistry
from inner_plane.timers import Cron, Interval, tick
from tests.support.stores import Stores, truncate_all

TIMERS = 10_000
WARMUP = 5
RUNS = 100 if QUICK else 300
INTERVALS = (60, 300, 900, 3_600, 86_400)
CRON_SHARE = 0.1


def timer_rows(base: datetime) -> list[dict[str, Any]]:
    rng = random.Random(5)
    created = base - timedelta(seconds=1)
    rows: list[dict[str, Any]] = []
    for n in range(TIMERS):
        row: dict[str, Any] = {
            "id": uuid.uuid4(),
            "delegate_id": f"d{n % 100}",
            "name": f"bench-{n}",
            "purpose": "Benchmark timer",
            "cron": None,
            "timezone": "UTC",
            "every_s": None,
            "start_at": None,
            "at": None,
            "mode": "wake",
            "priority": None,
            "missed": "latest",
            "catch_up_s": 86_400.0,
            "state": "active",
            "created_by": "bench",
            "created_at": created,
        }
        if rng.random() < CRON_SHARE:
            row.update(cron=f"{rng.randrange(60)} {rng.randrange(24)} * * *",
                       timezone="Europe/Berlin")  # fmt: skip
            schedule: Cron | Interval = Cron(row["cron"], row["timezone"])
        else:
            every = rng.choice(INTERVALS)
            anchor = base - timedelta(seconds=rng.uniform(0, every))
            row.update(every_s=float(every), start_at=anchor)
            schedule = Interval(timedelta(seconds=every), anchor)
        row["next_due"] = schedule.next_after(created)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", default=None, help="cProfile of the timed ticks, for pstats")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    with harness.stores("timers") as stores:
        benchmark(stores, profile)
    if profile is not None:
        profile.dump_stats(args.profile)


def benchmark(stores: Stores, profile: cProfile.Profile | None = None) -> None:
    truncate_all(stores.database_url)
    redis_client(stores.redis_url).flushdb()
    settings = build_settings(
        database_url=stores.database_url,
        redis_url=stores.redis_url,
        data_dir=stores.data_dir,
        timers_file=Path("/nonexistent/timers.toml"),  # dynamic timers only
        timers_leader_lock=False,  # ticks run back to back on a simulated clock
        timers_batch=1_000,
        log_level="WARNING",
    )
    runtime = build_runtime(settings, registry=KindRegistry())
    set_runtime(runtime)
    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - one line per signal otherwise
    journal = TimerJournal(runtime.engine)

    base = journal.now()
    rows = timer_rows(base)
    with runtime.engine.begin() as connection:
        for start in range(0, len(rows), 1_000):
            connection.execute(insert(TimerRow), rows[start : start + 1_000])
        connection.exec_driver_sql("ANALYZE timers")

    # Each statement's time from send to answer (client side), to split a tick into its SQL
    # (the floor no Python change moves) and the rest.
    statements: list[tuple[str, float]] = []
    started: list[float] = []

    def before(*_: Any) -> None:
        started.append(time.perf_counter())

    def after(*args: Any) -> None:  # conn, cursor, statement, parameters, context, many
        statements.append((args[2][:11], (time.perf_counter() - started.pop()) * 1_000))

    event.listen(runtime.engine, "before_cursor_execute", before)
    event.listen(runtime.engine, "after_cursor_execute", after)

    tick_ms: list[float] = []
    query_ms: list[float] = []
    tick_sql_ms: list[float] = []
    write_ms: list[float] = []
    tick_statements: list[int] = []
    due_counts: list[int] = []
    published = 0
    for k in range(WARMUP + RUNS):
        now = base + timedelta(seconds=k)
        t0 = time.perf_counter()
        due = journal.due_ids(now, settings.timers_batch)
        t1 = time.perf_counter()
        statements.clear()
        if profile is not None and k >= WARMUP:
            profile.enable()
        report = tick(runtime, now=now)
        t2 = time.perf_counter()
        if profile is not None:
            profile.disable()
        if k < WARMUP:
            continue
        query_ms.append((t1 - t0) * 1_000)
        tick_ms.append((t2 - t1) * 1_000)
        tick_sql_ms.append(sum(ms for _, ms in statements))
        write_ms.extend(ms for text, ms in statements if text == "WITH moved ")
        tick_statements.append(len(statements))
        due_counts.append(len(due))
        published += report.fired + report.caught_up
        assert report.dynamic_timers >= len(due)

    # A tick with nothing due (every cursor already at `now`): the tick's fixed cost.
    idle_ms: list[float] = []
    for _ in range(50):
        t0 = time.perf_counter()
        report = tick(runtime, now=now)
        idle_ms.append((time.perf_counter() - t0) * 1_000)
        assert report.fired == 0

    figures = {
        "timers": TIMERS,
        "runs": RUNS,
        "due_per_run_mean": round(statistics.mean(due_counts), 1),
        "due_per_run_max": max(due_counts),
        "signals_published": published,
        "tick_p50_ms": round(median(tick_ms), 3),
        "tick_p99_ms": round(p99(tick_ms), 3),
        "query_p50_ms": round(median(query_ms), 3),
        "query_p99_ms": round(p99(query_ms), 3),
        "idle_tick_p50_ms": round(median(idle_ms), 3),
        "idle_tick_p99_ms": round(p99(idle_ms), 3),
    }
    figures["tick_vs_query_p50"] = ratio(figures["tick_p50_ms"], figures["query_p50_ms"], 2)
    figures["tick_vs_query_p99"] = ratio(figures["tick_p99_ms"], figures["query_p99_ms"], 2)
    figures["tick_statements_max"] = max(tick_statements)
    figures["tick_sql_p50_ms"] = round(median(tick_sql_ms), 3)
    figures["tick_sql_p99_ms"] = round(p99(tick_sql_ms), 3)
    figures["write_p50_ms"] = round(median(write_ms), 3)
    figures["write_p99_ms"] = round(p99(write_ms), 3)
    figures["write_vs_query_p50"] = ratio(figures["write_p50_ms"], figures["query_p50_ms"], 2)
    figures["tick_sql_vs_query_p50"] = ratio(figures["tick_sql_p50_ms"], figures["query_p50_ms"], 2)
    figures["tick_sql_vs_query_p99"] = ratio(figures["tick_sql_p99_ms"], figures["query_p99_ms"], 2)
    # Issue 30: the tick over its own SQL in the same run: what the process adds on top of the
    # statements it must send (deciding, drafting, packing, logging, the wake round trip).
    figures["tick_vs_sql_floor_p50"] = ratio(figures["tick_p50_ms"], figures["tick_sql_p50_ms"], 2)
    figures["tick_vs_sql_floor_p99"] = ratio(figures["tick_p99_ms"], figures["tick_sql_p99_ms"], 2)
    figures["tick_process_p50_ms"] = round(
        median([t - q for t, q in zip(tick_ms, tick_sql_ms, strict=True)]), 3
    )
    figures["tick_per_due_timer_ms"] = round(
        figures["tick_p50_ms"] / max(1.0, figures["due_per_run_mean"]), 3
    )
    due_mean, due_max = figures["due_per_run_mean"], figures["due_per_run_max"]
    print(f"{TIMERS} dynamic timers, {RUNS} runs, {due_mean} due per run (max {due_max}), "
          f"{published} timer.due signals published")  # fmt: skip
    print(f"tick:     p50 {figures['tick_p50_ms']:.2f} ms  p99 {figures['tick_p99_ms']:.2f} ms")
    print(f"query:    p50 {figures['query_p50_ms']:.2f} ms  p99 {figures['query_p99_ms']:.2f} ms "
          "(plain indexed SELECT of the due rows)")  # fmt: skip
    print(f"idle:     p50 {figures['idle_tick_p50_ms']:.2f} ms  p99 "
          f"{figures['idle_tick_p99_ms']:.2f} ms (a tick with nothing due)")  # fmt: skip
    print(f"tick SQL: p50 {figures['tick_sql_p50_ms']:.2f} ms  "
          f"p99 {figures['tick_sql_p99_ms']:.2f} ms "
          f"({figures['tick_statements_max']} statements at most; the write alone p50 "
          f"{figures['write_p50_ms']:.2f} ms = "
          f"{figures['write_vs_query_p50']}x the query)")  # fmt: skip
    print(f"floor:    the tick's SQL alone is p50 {figures['tick_sql_vs_query_p50']}x, "
          f"p99 {figures['tick_sql_vs_query_p99']}x the query")  # fmt: skip
    print(f"process:  the tick over its own SQL: p50 {figures['tick_vs_sql_floor_p50']}x, "
          f"p99 {figures['tick_vs_sql_floor_p99']}x (target <= 1.5); the process's own share "
          f"p50 {figures['tick_process_p50_ms']:.2f} ms")  # fmt: skip
    print(f"ratio:    p50 {figures['tick_vs_query_p50']}x  p99 {figures['tick_vs_query_p99']}x; "
          f"{figures['tick_per_due_timer_ms']} ms per due timer")  # fmt: skip
    harness.emit(figures)


if __name__ == "__main__":
    main()
