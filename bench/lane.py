"""Benchmark of the activation lane (issue 3).

Prints, in one run on the same stores:
  1. wake latency: publish -> agent start, minus the batching window (p50, p99), against the raw
     Celery enqueue -> task start latency of a no-op task on the same activation workers, the
     two probed in turn;
  2. plane overhead per activation excluding the agent (lock, lease, claim, compose, settle,
     record, release) p50/p99, with 100,000 signals already in the journal, and what one costs
     (statements, WAL flushes, CPU here and in the server), see bench/lane_overhead.py; then the
     same through bench/latency_proxy.py at 0, 0.5 and 1 ms added one way to PostgreSQL and
     Redis, with the round trips per activation counted on the wire;
  1c. the wake-latency ratio again with the plane and its workers behind that proxy at 0.5 and
     1 ms one way (``wake_added_p99_vs_celery_p99_rtt0_5``, ``..._rtt1``);
  3. activations per second across 1,000 delegates with 2 activation worker processes, and the
     overlap check from the journal;
  4. pre-emption inside a streaming model call: user turn sent -> in-flight call aborted
     (``preempt_p99_ms``, target <= 250), see bench/preempt.py;
  5. takeover after a crash: kill -9 of the holder's worker -> a user turn sent right after is
     answered (``takeover_after_kill_p99_s``, target <= 5), see bench/takeover.py;
  6. what tracing costs: the overhead p50 of 2. with OpenTelemetry on over off
     (``otel_overhead_ratio``, target <= 1.1), see bench/lane_overhead.py.
The last line is one JSON object with every figure.

    .venv/bin/python -m bench.lane [--quick]
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench import harness, lane_overhead, latency_proxy, preempt, takeover
from bench.harness import QUICK, ratio, summary
from inner_plane import logs
from inner_plane.config import Settings, build_settings
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from tests.support.processes import ChildProcess, celery_worker
from tests.support.stores import Stores, truncate_all

QUIET_MS = 50
# Pairs of probes (a raw Celery one, then a wake): 200 make a p99 that a single slow probe
# does not decide alone.
PROBES = 40 if QUICK else 200
OVERHEAD_RUNS = 100 if QUICK else 300
PRELOAD = 20_000 if QUICK else 100_000
DELEGATES = 300 if QUICK else 1_000


def wait_until(condition, timeout: float = 120.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark timed out waiting for {what}")
        time.sleep(0.002)


class RawProbe:
    """Raw Celery enqueue -> start of a no-op task on the activation workers, in ms, one probe
    at a time (the baseline of the wake's added latency)."""

    def __init__(self, settings: Settings, rt: Runtime) -> None:
        self.settings, self.rt = settings, rt
        self.key = f"bench:probe:{uuid.uuid4()}"
        self.times: list[float] = []

    def __call__(self) -> None:
        from inner_plane import celery_bridge

        rt, raw = self.rt, self.times
        celery_bridge.send(
            self.settings,
            "bench.lane_start_probe",
            celery_bridge.ACTIVATION_QUEUE,
            args=(time.time(), self.key),
        )
        wait_until(lambda: rt.redis.llen(self.key) > len(raw), 30, "probe")
        entry = rt.redis.lindex(self.key, len(raw))
        assert isinstance(entry, str)  # the runtime's client decodes responses
        sent, started = (float(x) for x in entry.split(":"))
        raw.append((started - sent) * 1000)


@dataclass
class WakeProbes:
    """Per probe, in ms: the wake's added latency (publish -> activation start, minus the quiet
    window), and its two parts: the publisher's (the signal's insert and commit, the wake window
    and the activate sent: until ``publish`` returned) and the rest (the activate's delivery by
    Celery after its countdown, the lane's run up to the activation row; minus the window). Both
    clocks are this machine's: the database's ``clock_timestamp()`` and ``time.time()``."""

    rt: Runtime
    delegate: str
    added: list[float] = field(default_factory=list)
    publisher: list[float] = field(default_factory=list)
    delivery_and_opening: list[float] = field(default_factory=list)

    def __call__(self) -> None:
        """One probe: publish -> activation start (the journal's clock), minus the window."""
        rt = self.rt
        result = publish(
            kind="task.completed",
            source="probe",
            delegate_id=self.delegate,
            data={"n": len(self.added)},
            runtime=rt,
        )
        returned = time.time()
        wait_until(
            lambda r=result: (
                (s := rt.signals.get(r.id)) is not None and s.state.value == "delivered"
            ),
            30,
        )
        with rt.engine.connect() as connection:
            created, started = connection.execute(
                text(
                    "SELECT extract(epoch FROM s.created_at), extract(epoch FROM a.started_at) "
                    "FROM signals s JOIN activations a ON a.id = s.claimed_by "
                    "WHERE s.id = :id"
                ),
                {"id": result.id},
            ).one()
        created_s, started_s = float(created), float(started)
        self.added.append((started_s - created_s) * 1000 - QUIET_MS)
        self.publisher.append((returned - created_s) * 1000)
        self.delivery_and_opening.append((started_s - returned) * 1000 - QUIET_MS)

    def figures(self, suffix: str = "") -> dict[str, Any]:
        publisher, rest = summary(self.publisher), summary(self.delivery_and_opening)
        return {
            f"wake_publisher_ms{suffix}": publisher,
            f"wake_delivery_and_opening_ms{suffix}": rest,
            # Flat, for `make bench`'s table beside raw Celery's p99 of the same run.
            f"wake_publisher_p99_ms{suffix}": publisher["p99"],
            f"wake_delivery_and_opening_p99_ms{suffix}": rest["p99"],
        }


def raw_and_wake(
    settings: Settings, rt: Runtime, delegate: str, probes: int = PROBES
) -> tuple[list[float], WakeProbes]:
    """The baseline and the wake, probed in turn (one of each, then again): both see the same
    moments of a shared, noisy machine, rather than one block each a minute apart."""
    raw, wake = RawProbe(settings, rt), WakeProbes(rt, delegate)
    for _ in range(probes):
        raw()
        time.sleep(0.01)
        wake()
        time.sleep(0.01)
    return raw.times, wake


def wake_over_network(
    stores: Stores, settings: Settings, env: dict[str, str], log_dir: Path
) -> dict[str, Any]:
    """The wake-latency ratio with the plane (this process and the activation workers) reaching
    PostgreSQL and Redis (the broker too) through :mod:`bench.latency_proxy`, at each added
    one-way delay: the raw Celery baseline pays the same network."""
    figures: dict[str, Any] = {}
    for delay in lane_overhead.DELAYS_MS:
        if delay == 0:
            continue  # measured without the proxy above
        targets = {"pg": stores.database_url, "redis": stores.redis_url}
        with latency_proxy.spawn(targets, delay) as proxy:
            db_url = proxy.url("pg", stores.database_url)
            redis_url = proxy.url("redis", stores.redis_url)
            proxied = settings.model_copy(update={"database_url": db_url, "redis_url": redis_url})
            rt = build_runtime(proxied)
            network = {
                **env,
                "INNER_PLANE_DATABASE_URL": db_url,
                "INNER_PLANE_REDIS_URL": redis_url,
            }
            if stores.broker.url is None:  # the broker is that Redis: through the proxy too
                network["INNER_PLANE_BROKER_URL"] = redis_url
            key = lane_overhead.delay_key(delay)
            workers = [
                celery_worker(
                    f"bench-{key}-{n}",
                    network,
                    log_dir,
                    queues="activation",
                    extra=("--include", "bench.lane_baseline"),
                ).start()
                for n in (1, 2)
            ]
            try:
                for worker in workers:
                    worker.wait_for(" ready.", 60)
                # Warm both workers' connections (through the proxy), as the run above does.
                raw_and_wake(proxied, rt, f"warm-{key}", probes=4)
                raw, probes = raw_and_wake(proxied, rt, f"lat-{key}")
            finally:
                for worker in workers:
                    worker.stop()
                rt.engine.dispose()
        raw_s, wake_s = summary(raw), summary(probes.added)
        figures.update(probes.figures(f"_{key}"))
        figures[f"raw_celery_start_ms_{key}"] = raw_s
        figures[f"raw_celery_p99_ms_{key}"] = raw_s["p99"]
        figures[f"wake_added_ms_{key}"] = wake_s
        figures[f"wake_added_p99_vs_celery_p99_{key}"] = ratio(wake_s["p99"], raw_s["p99"])
        print(
            f"{delay} ms added one way: raw Celery {raw_s}, wake added {wake_s}, ratio p99 "
            f"{figures[f'wake_added_p99_vs_celery_p99_{key}']}; the publisher's part "
            f"{figures[f'wake_publisher_ms_{key}']}, delivery and opening "
            f"{figures[f'wake_delivery_and_opening_ms_{key}']}"
        )
    return figures


def main() -> None:
    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - silence per-signal lines
    with harness.stores("lane") as stores:
        benchmark(stores)


def benchmark(stores: Stores) -> None:
    truncate_all(stores.database_url)
    settings = build_settings(
        database_url=stores.database_url,
        redis_url=stores.redis_url,
        data_dir=stores.data_dir,
        batch_quiet_ms=QUIET_MS,
        batch_max_age_ms=QUIET_MS * 4,
    )
    rt = build_runtime(settings)
    set_runtime(rt)
    rt.redis.flushdb()
    log_dir = stores.data_dir / "bench-logs"
    log_dir.mkdir(exist_ok=True)
    env = stores.env(
        INNER_PLANE_AGENT="scripted",
        INNER_PLANE_AGENT_SCRIPT=json.dumps({"steps": 0}),
        INNER_PLANE_BATCH_QUIET_MS=str(QUIET_MS),
        INNER_PLANE_BATCH_MAX_AGE_MS=str(QUIET_MS * 4),
        INNER_PLANE_LOG_LEVEL="WARNING",
        INNER_PLANE_WAKE_BUDGET_PER_HOUR="1000000",
    )
    workers: list[ChildProcess] = []
    try:
        for name in ("bench-act1", "bench-act2"):
            worker = celery_worker(
                name,
                env,
                log_dir,
                queues="activation",
                extra=("--include", "bench.lane_baseline"),
            ).start()
            workers.append(worker)
        for worker in workers:
            worker.wait_for(" ready.", 60)
        # Warm both workers' connections.
        publish(kind="task.completed", source="warm", delegate_id="warm")
        wait_until(lambda: rt.signals.list("warm", "delivered", limit=1) != [], 60, "warm-up")

        # 1. raw Celery enqueue -> start; 1b. wake latency: publish -> activation start.
        raw, probes = raw_and_wake(settings, rt, "lat")

        # 3. activations per second across many delegates, two worker processes.
        drafts = [
            {"kind": "task.completed", "source": "fanout", "delegate_id": f"d{i:04d}"}
            for i in range(DELEGATES)
        ]
        t0 = time.monotonic()
        publish_many(drafts)
        with rt.engine.connect() as connection:

            def fanout_done() -> bool:
                delivered: int = connection.execute(
                    text(
                        "SELECT count(*) FROM signals WHERE source = 'fanout' "
                        "AND state = 'delivered'"
                    )
                ).scalar_one()
                return delivered == DELEGATES

            wait_until(fanout_done, 600, "fan-out delivered")
        fanout_s = time.monotonic() - t0
        with rt.engine.connect() as connection:
            overlaps = connection.execute(
                text(
                    """
                    SELECT count(*) FROM activations a JOIN activations b
                      ON a.delegate_id = b.delegate_id AND a.id <> b.id
                     AND a.started_at < b.started_at AND b.started_at < a.finished_at
                    """
                )
            ).scalar_one()
            fanout_activations = connection.execute(
                text("SELECT count(*) FROM activations WHERE delegate_id LIKE 'd%'")
            ).scalar_one()
    finally:
        for worker in workers:
            worker.stop()

    # 2. overhead per activation with a large journal (in-process, instant agent), measured
    # as bench.lane_overhead does (which also runs it alone at 100k and 1M rows).
    lane_overhead.preload(rt, PRELOAD)
    overhead, costs = lane_overhead.measure(rt, OVERHEAD_RUNS)
    traced = lane_overhead.tracing_overhead(rt, OVERHEAD_RUNS)

    raw_s, wake_s, over_s = summary(raw), summary(probes.added), summary(overhead)
    figures = {
        "batch_quiet_ms": QUIET_MS,
        "raw_celery_start_ms": raw_s,
        "raw_celery_p99_ms": raw_s["p99"],
        "wake_added_ms": wake_s,
        "wake_added_p99_vs_celery_p99": ratio(wake_s["p99"], raw_s["p99"]),
        **probes.figures(),
        "journal_rows_for_overhead": PRELOAD + OVERHEAD_RUNS,
        "overhead_ms": over_s,
        "overhead_p99_ms": over_s["p99"],
        "overhead_per_activation": asdict(costs),
        "delegates": DELEGATES,
        "fanout_activations": int(fanout_activations),
        "activations_per_s": round(int(fanout_activations) / fanout_s, 1),
        "overlaps": int(overlaps),
        **traced,
    }
    print(f"raw Celery enqueue->start ms: {raw_s}")
    print(f"wake publish->agent start minus {QUIET_MS} ms window: {wake_s}")
    print(f"  ratio p99 added wake / raw Celery: {figures['wake_added_p99_vs_celery_p99']}")
    print(
        f"  of which the publisher's (insert, commit, wake window, activate sent): "
        f"{figures['wake_publisher_ms']}; the activate's delivery and the lane up to the "
        f"activation row, minus the window: {figures['wake_delivery_and_opening_ms']}"
    )
    print(f"overhead per activation (no agent), {PRELOAD} rows in journal: {over_s}; {costs}")
    print(f"tracing on / off, overhead p50: {traced['otel_overhead_ratio']} (target <= 1.1)")
    print(
        f"{DELEGATES} delegates, 2 activation workers: {figures['activations_per_s']} "
        f"activations/s, overlaps {overlaps}"
    )
    figures.update(lane_overhead.over_network(rt, stores, OVERHEAD_RUNS))
    figures.update(wake_over_network(stores, settings, env, log_dir))
    figures.update(preempt.measure(stores, settings, rt, log_dir))
    figures.update(takeover.measure(stores, settings, rt, log_dir))
    harness.emit(figures)


if __name__ == "__main__":
    main()
