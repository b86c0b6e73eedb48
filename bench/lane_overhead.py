"""Activation overhead (issue 15, point 3): one activation's cost excluding the model, on a
journal of 100k and of 1M signal rows (``--quick``: 20k).

Each activation is a whole ``Lane.run`` in this process with an instant agent: Redis lock,
lease take, due window, claim, activation row, compose (the deployed composer), safe point,
settle, ThoughtFlow and conversation records, lease release, the check after the release. One
wake signal is journaled before each run (not timed). Printed per size: p50/p99 of the runs,
and what one activation costs in figures a busy machine does not move: the SQL statements it
sends (counted on the engine), the WAL flushes its commits wait for (``pg_stat_wal``), and the
CPU it takes in this process and in the database server's processes (Linux ``/proc``). The
target is p99 <= 20 ms at each size. ``bench.lane`` measures the same (``overhead_p99_ms``) on
its own journal.

    .venv/bin/python -m bench.lane_overhead [--quick] [--rows 100000,1000000] [--runs N]
        [--profile FILE]   (cProfile of the timed runs at the last size, for pstats)
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import event, text

from bench import harness, latency_proxy
from bench.harness import QUICK, ratio, summary
from inner_plane import logs, tracing
from inner_plane.activation import AgentResult, Disposition, Settlement
from inner_plane.config import build_settings
from inner_plane.lane.runner import Lane
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from inner_plane.wiring import load_composer, settle_heap
from tests.support.stores import truncate_all

DELEGATE = "overhead"
WARM_UP = 20  # enough for psycopg to have prepared every statement on every pooled connection
# One-way delays added between the plane and PostgreSQL and Redis (issue 30): a network.
DELAYS_MS = (0.0, 0.5, 1.0)


class InstantAgent:
    name = "instant"

    def run(self, context, guard):  # type: ignore[no-untyped-def]
        return AgentResult(
            settlements={i: Settlement(Disposition.ACTED) for i in context.rendered_signal_ids}
        )


def preload(rt: Runtime, rows: int) -> None:
    """Grow the journal to ``rows`` signals of 500 other delegates, a tenth of them pending."""
    with rt.engine.begin() as connection:
        have = int(connection.execute(text("SELECT count(*) FROM signals")).scalar_one())
        if have < rows:
            connection.execute(
                text(
                    """
                    INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data,
                                         trust, max_attempts, occurred_at, available_at, state)
                    SELECT gen_random_uuid(), 'hist' || (g % 500), 'task.completed', 'history',
                           'wake', 50, jsonb_build_object('n', g), 'trusted', 5, now(), now(),
                           CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'delivered' END
                      FROM generate_series(1, :n) g
                    """
                ),
                {"n": rows - have},
            )
    with rt.engine.connect() as connection:
        autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
        autocommit.execute(text("VACUUM ANALYZE"))  # signals, and what a run before wrote
        # Write out what the load dirtied now, so the checkpoint it would otherwise trigger
        # does not land among the timed runs (this measures activations, not the load).
        autocommit.execute(text("CHECKPOINT"))


def server_cpu_s(rt: Runtime) -> float | None:
    """CPU seconds used so far by every process of the database server (Linux only): the
    children of the postmaster that serves this engine."""
    try:
        with rt.engine.connect() as connection:
            backend = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        postmaster = Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1]
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == postmaster or stat.parent.name == postmaster:
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks
    except (OSError, IndexError, ValueError):
        return None


def wal_flushes(rt: Runtime) -> int:
    """WAL flushes made by client backends so far (PostgreSQL 18: ``pg_stat_io``). A backend
    reports its counts within a second of going idle: wait that out first."""
    time.sleep(1.5)
    with rt.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io "
                    "WHERE object = 'wal' AND backend_type = 'client backend'"
                )
            ).scalar_one()
        )


def journal_one(rt: Runtime, n: int, traceparent: str | None = None) -> None:
    """One wake signal for the next activation (not timed)."""
    with rt.engine.begin() as connection:
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data,
                                     trust, max_attempts, occurred_at, available_at, traceparent)
                VALUES (gen_random_uuid(), :delegate, 'task.completed', 'bench', 'wake',
                        50, CAST(:data AS jsonb), 'trusted', 5, now(), now(), :traceparent)
                """
            ),
            {"delegate": DELEGATE, "data": json.dumps({"n": n}), "traceparent": traceparent},
        )


def bench_lane(rt: Runtime) -> Lane:
    quick = replace(
        rt,
        settings=rt.settings.model_copy(
            update={
                "batch_quiet_ms": 0,
                "batch_max_age_ms": 0,
                "wake_budget_per_hour": 10**9,
                # The heartbeat renews by time, not per activation: none among the timed runs.
                "heartbeat_s": 600.0,
                "lease_ttl_s": 1200,
            }
        ),
    )
    lane = Lane(quick, InstantAgent(), load_composer(quick), holder="bench")
    settle_heap()  # as a worker does once its lane is built (inner_plane.wiring.run_lane)
    return lane


# A publish span's context, as a traced publication leaves it on the signal's row.
PUBLISHED = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def tracing_overhead(rt: Runtime, runs: int) -> dict[str, Any]:
    """``otel_overhead_ratio``: the activation overhead p50 with tracing on (the SDK exporting
    over OTLP/HTTP to a receiver in another process, every activation sampled, its signal
    linked) over the same with tracing off, in one process, in alternating blocks of ten runs
    so that machine noise falls on both alike; ``otel_cpu_ratio``: the same for this process's
    CPU time per activation."""
    with harness.traced("bench-lane") as exported:
        lane = bench_lane(rt)
        times: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for n in range(2 * runs + 10):
            traced = (n // 10) % 2 == 1
            tracing.switch(traced)
            journal_one(rt, n, PUBLISHED if traced else None)
            c0, t0 = time.process_time(), time.perf_counter()
            outcome = lane.run(DELEGATE)
            elapsed = (time.perf_counter() - t0) * 1000
            used = (time.process_time() - c0) * 1000
            assert len(outcome.activations) == 1, outcome
            if n >= 10:  # the first block warms up
                times[traced].append(elapsed)
                cpu[traced].append(used)
    off, on = summary(times[False]), summary(times[True])
    cpu_off, cpu_on = summary(cpu[False]), summary(cpu[True])
    return {
        "otel_off_overhead_ms": off,
        "otel_on_overhead_ms": on,
        "otel_overhead_ratio": ratio(on["p50"], off["p50"]),
        # The ratio's baseline as one figure, for make bench's table.
        "otel_off_overhead_p50_ms": off["p50"],
        # This process's CPU per activation (the exporter's thread included): what a loaded
        # machine moves far less than elapsed time.
        "otel_off_cpu_ms": cpu_off,
        "otel_on_cpu_ms": cpu_on,
        "otel_cpu_ratio": ratio(cpu_on["p50"], cpu_off["p50"]),
        "otel_spans_exported": exported["spans"],
        "otel_exports_refused": exported["refused"],
    }


@dataclass
class Costs:
    """Per activation: SQL statements, WAL flushes, CPU ms here and in the server."""

    statements: float
    wal_flushes: float
    client_cpu_ms: float
    server_cpu_ms: float | None
    # Counted on the wire by bench.latency_proxy (PostgreSQL: Query and Sync messages, each
    # waited for), when the run went through it.
    round_trips: float | None = None
    redis_round_trips: float | None = None


def measure(
    rt: Runtime,
    runs: int,
    profile: cProfile.Profile | None = None,
    proxy: latency_proxy.Spawned | None = None,
    feed: Runtime | None = None,
) -> tuple[list[float], Costs]:
    """``runs`` timed activations of one delegate (after a few untimed warm-ups); returns the
    milliseconds of each and what one costs (the untimed journaling of its signal included in
    the WAL flushes and server CPU: one flush, a fraction of a millisecond).

    With ``proxy`` (``rt`` reaching its stores through it), the round trips it counted during
    the timed runs, per activation; ``feed`` journals each run's signal (not through it)."""
    feed = feed or rt
    lane = bench_lane(rt)
    statements = 0

    def count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    overhead: list[float] = []
    counted = 0
    trips: dict[str, latency_proxy.Counts] = {}
    for n in range(runs + WARM_UP):
        journal_one(feed, n)
        timed = n >= WARM_UP
        if timed and n == WARM_UP:
            flushes = wal_flushes(feed)
            server, client = server_cpu_s(feed), time.process_time()
            event.listen(rt.engine, "before_cursor_execute", count)
            if proxy is not None:
                proxy.reset()
        if profile is not None and timed:
            profile.enable()
        t0 = time.perf_counter()
        outcome = lane.run(DELEGATE)
        elapsed = (time.perf_counter() - t0) * 1000
        if profile is not None and timed:
            profile.disable()
        assert len(outcome.activations) == 1, outcome
        if timed:
            overhead.append(elapsed)
            counted += 1
    if proxy is not None:
        trips = proxy.stats()
    event.remove(rt.engine, "before_cursor_execute", count)
    client = time.process_time() - client
    server_after = server_cpu_s(feed)
    flushes = wal_flushes(feed) - flushes
    return overhead, Costs(
        statements=round(statements / counted, 1),
        wal_flushes=round(flushes / counted, 2),
        client_cpu_ms=round(client * 1000 / counted, 2),
        server_cpu_ms=None
        if server is None or server_after is None
        else round((server_after - server) * 1000 / counted, 2),
        round_trips=None if "pg" not in trips else round(trips["pg"].round_trips / counted, 2),
        redis_round_trips=None
        if "redis" not in trips
        else round(trips["redis"].round_trips / counted, 2),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", default="20000" if QUICK else "100000,1000000")
    parser.add_argument("--runs", type=int, default=100 if QUICK else 300)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    gc.freeze()  # the libraries loaded and frozen, as a worker has them (inner_plane/startup.py)
    sizes = [int(r) for r in args.rows.split(",")]
    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - silence per-signal lines
    figures: dict[str, Any] = {"runs": args.runs}
    with harness.stores("lane-overhead") as stores:
        truncate_all(stores.database_url)
        settings = build_settings(
            database_url=stores.database_url,
            redis_url=stores.redis_url,
            data_dir=stores.data_dir,
        )
        rt = build_runtime(settings)
        set_runtime(rt)
        rt.redis.flushdb()
        worst = 0.0
        for size in sorted(sizes):
            preload(rt, size)
            gc.collect()
            profile = cProfile.Profile() if args.profile and size == max(sizes) else None
            overhead, costs = measure(rt, args.runs, profile)
            if profile is not None:
                profile.dump_stats(args.profile)
            over = summary(overhead)
            worst = max(worst, over["p99"])
            figures[f"overhead_ms_{size}"] = over
            figures[f"per_activation_{size}"] = asdict(costs)
            print(f"{size} rows: overhead per activation (no agent) {over}; each: {costs}")
        # At the last size, in the same process and journal.
        traced = tracing_overhead(rt, args.runs)
        network = over_network(rt, stores, args.runs)
    figures["overhead_p99_ms"] = worst
    print(f"worst p99 {worst} ms: {harness.verdict(worst, 20.0, higher_is_better=False)}")
    figures.update(network)
    figures.update(traced)
    print(
        f"tracing on / off, overhead p50: {traced['otel_overhead_ratio']} (target <= 1.1): "
        f"on {traced['otel_on_overhead_ms']}, off {traced['otel_off_overhead_ms']}; "
        f"CPU per activation {traced['otel_cpu_ratio']}"
    )
    harness.emit(figures)


def delay_key(delay_ms: float) -> str:
    """``rtt1`` for 1 ms added one way, ``rtt0_5`` for 0.5 ms, ``rtt0`` for the bare proxy."""
    return "rtt" + f"{delay_ms:g}".replace(".", "_")


def over_network(feed: Runtime, stores: Any, runs: int) -> dict[str, Any]:
    """The same activations with the plane reaching PostgreSQL and Redis through
    :mod:`bench.latency_proxy` at each of ``DELAYS_MS`` one way (0: the proxy's own cost), on
    the journal as it stands; the round trips per activation counted on the wire."""
    figures: dict[str, Any] = {}
    for delay in DELAYS_MS:
        targets = {"pg": stores.database_url, "redis": stores.redis_url}
        with latency_proxy.spawn(targets, delay) as proxy:
            settings = feed.settings.model_copy(
                update={
                    "database_url": proxy.url("pg", stores.database_url),
                    "redis_url": proxy.url("redis", stores.redis_url),
                }
            )
            rt = build_runtime(settings)
            try:
                overhead, costs = measure(rt, runs, proxy=proxy, feed=feed)
            finally:
                rt.engine.dispose()
        key = delay_key(delay)
        over = summary(overhead)
        figures[f"overhead_ms_{key}"] = over
        figures[f"overhead_p99_ms_{key}"] = over["p99"]
        figures[f"per_activation_{key}"] = asdict(costs)
        print(
            f"{delay} ms added one way: overhead {over}; round trips per activation "
            f"{costs.round_trips} (PostgreSQL), {costs.redis_round_trips} (Redis)"
        )
    figures["round_trips_per_activation"] = figures["per_activation_rtt0"]["round_trips"]
    figures["redis_round_trips_per_activation"] = figures["per_activation_rtt0"][
        "redis_round_trips"
    ]
    trips = figures["round_trips_per_activation"]
    print(
        f"round trips per activation {trips}: " + harness.verdict(trips, 6, higher_is_better=False)
    )
    rtt1 = figures["overhead_p99_ms_rtt1"]
    print(
        f"overhead p99 at 1 ms one way {rtt1} ms: "
        + harness.verdict(rtt1, 25.0, higher_is_better=False)
    )
    return figures


if __name__ == "__main__":
    main()
