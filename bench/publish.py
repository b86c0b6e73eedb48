"""Benchmark of the publish path (issue 2), in one run on the same stores and the same worker:

  (a) ingest: journal ingestion rate through the Celery ``signals`` queue, one signal per message,
      one worker with 2 processes (the production `inner-plane worker signals` command line);
  (b) baseline: a plain Celery task doing one INSERT of the same row and one commit per message;
  (c) raw: a no-op Celery task receiving the same payload (Celery's own per-message cost);
  (d) bulk: many signals per Celery message (``inner_plane.publish_many``), and the direct
      in-process bulk publish (``inner_plane.publish.publish_many``), in signals/s;
  (e) a plain psycopg ``executemany`` of the same rows into the same table.

For (a) to (c) and the Celery half of (d), N messages are enqueued first while the worker is
paused (SIGSTOP); the clock starts when it continues (SIGCONT) and stops when the queue is
drained (nothing waiting, nothing unacknowledged) and, for the journaling tasks, every row is in
the journal. Each round runs every measurement once, interleaved, so machine noise hits
them alike; figures are medians over the rounds (and the slowest round). The journal is emptied
between measurements so every one inserts into the same table size.

Then (f): what tracing costs the publish path, ``otel_publish_ratio`` (an in-process batch of 100
signals, p50 with OpenTelemetry on over off; see ``tracing_cost``).

Prints the ratios a/c, d/c and d/e; the last line is one JSON object with every figure.

    .venv/bin/python -m bench.publish [--quick]
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from bench import harness
from bench.baseline_tasks import INSERT_SQL, row_params
from bench.harness import QUICK, median, p99, ratio
from inner_plane import celery_bridge, logs, tracing
from inner_plane.config import Settings, build_settings
from inner_plane.journal.plain import libpq_url
from inner_plane.publish import publish_many
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from inner_plane.services.processes import celery_command
from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.kinds import KindRegistry
from tests.support.processes import ChildProcess
from tests.support.stores import Stores, truncate_all

ROUNDS = 3 if QUICK else 5
MESSAGES = 300 if QUICK else 800  # per one-signal-per-message measurement
BULK_MESSAGES = 10 if QUICK else 20  # Celery messages of BULK_SIZE signals each
BULK_SIZE = 1_000
DIRECT_BATCHES = 10 if QUICK else 20  # in-process batches of BULK_SIZE
QUEUE = celery_bridge.SIGNALS_QUEUE
KIND = "external.bench.finished"  # next-turn: the wake scheduler stays out of the ingest figure


def signals(tag: str, count: int) -> list[dict[str, Any]]:
    """Distinct signals, each with a dedup key (so the Redis fast path runs) and the id derived
    from it (so the baseline inserts exactly the row the publish path would)."""
    out = []
    for n in range(count):
        key = f"{tag}-{n}"
        out.append(
            {
                "kind": KIND,
                "source": "bench",
                "delegate_id": "default",
                "mode": "next-turn",
                "priority": 50,
                "dedup_key": key,
                "id": str(derive_signal_id("default", "bench", key)),
                "data": {"build": n, "status": "passed", "url": f"https://ci.example/b/{n}"},
            }
        )
    return out


TASK_DONE = re.compile(r"Task (\S+?)\[[0-9a-f-]+\] succeeded in ([0-9.e-]+)s")


def task_runtimes(log: str) -> dict[str, list[float]]:
    """Milliseconds each one-signal task ran in a pool process, from the worker's own log."""
    found: dict[str, list[float]] = {}
    for task, seconds in TASK_DONE.findall(log):
        if task in (celery_bridge.PUBLISH_TASK, "bench.insert_one", "bench.noop"):
            found.setdefault(task, []).append(float(seconds) * 1000)
    return found


class Bench:
    def __init__(self, settings: Settings, runtime: Runtime, worker: ChildProcess) -> None:
        self.settings = settings
        self.runtime = runtime
        self.worker = worker
        self.redis = runtime.redis
        self.url = libpq_url(runtime.database_url)

    # -- helpers ---------------------------------------------------------------------------------

    def reset(self) -> None:
        truncate_all(self.runtime.database_url)

    def drained(self) -> bool:
        # With acks_late a message is in "unacked" until its task finished.
        return self.redis.llen(QUEUE) == 0 and self.redis.hlen("unacked") == 0

    def timed_drain(self, done: Callable[[], bool], timeout: float = 300.0) -> float:
        """Let the paused worker go and time it until ``done``."""
        start = time.perf_counter()
        os.killpg(self.worker.pid, signal.SIGCONT)
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit("benchmark timed out:\n" + self.worker.output()[-3000:])
            time.sleep(0.005)
        return time.perf_counter() - start

    def enqueue(self, task: str, payloads: list[Any]) -> None:
        """Queue every message while the worker (main process and pool) is stopped, so the clock
        measures consuming only."""
        os.killpg(self.worker.pid, signal.SIGSTOP)
        for payload in payloads:
            celery_bridge.send(self.settings, task, QUEUE, args=(payload,))
        # The stopped worker may hold the first message in its socket buffer (a BRPOP answered
        # while it was stopped); everything else waits in the list.
        assert self.redis.llen(QUEUE) >= len(payloads) - 1

    def journaled(self, count: int) -> Callable[[], bool]:
        return lambda: self.drained() and self.runtime.signals.count() >= count

    # -- measurements (each returns signals per second) -----------------------------------------

    def celery_per_message(self, task: str, tag: str, journals: bool, count: int) -> float:
        self.reset()
        self.enqueue(task, signals(tag, count))
        done = self.journaled(count) if journals else self.drained
        elapsed = self.timed_drain(done)
        if journals and self.runtime.signals.count() != count:
            raise SystemExit(f"{task}: expected {count} rows")
        return count / elapsed

    def celery_bulk(self, tag: str) -> float:
        self.reset()
        batches = [signals(f"{tag}-{m}", BULK_SIZE) for m in range(BULK_MESSAGES)]
        self.enqueue(celery_bridge.PUBLISH_MANY_TASK, batches)
        total = BULK_MESSAGES * BULK_SIZE
        elapsed = self.timed_drain(self.journaled(total))
        if self.runtime.signals.count() != total:
            raise SystemExit("publish_many: rows missing")
        return total / elapsed

    def direct_bulk(self, tag: str, latencies: list[float]) -> float:
        self.reset()
        batches = [signals(f"{tag}-{m}", BULK_SIZE) for m in range(DIRECT_BATCHES)]
        start = time.perf_counter()
        for batch in batches:
            t0 = time.perf_counter()
            publish_many(batch, runtime=self.runtime, via="bench")
            latencies.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - start
        assert self.runtime.signals.count() == DIRECT_BATCHES * BULK_SIZE
        return DIRECT_BATCHES * BULK_SIZE / elapsed

    def executemany(self, tag: str, latencies: list[float]) -> float:
        self.reset()
        batches = [
            [row_params(s) for s in signals(f"{tag}-{m}", BULK_SIZE)] for m in range(DIRECT_BATCHES)
        ]
        with psycopg.connect(self.url) as conn:
            start = time.perf_counter()
            for rows in batches:
                t0 = time.perf_counter()
                with conn.cursor() as cursor:
                    cursor.executemany(INSERT_SQL, rows)
                conn.commit()
                latencies.append((time.perf_counter() - t0) * 1000)
            elapsed = time.perf_counter() - start
        assert self.runtime.signals.count() == DIRECT_BATCHES * BULK_SIZE
        return DIRECT_BATCHES * BULK_SIZE / elapsed


def main() -> None:
    with harness.stores("publish") as stores:
        benchmark(stores)


def benchmark(stores: Stores) -> None:
    settings = build_settings(
        database_url=stores.database_url, redis_url=stores.redis_url, data_dir=stores.data_dir
    )
    runtime = build_runtime(settings, registry=KindRegistry())
    set_runtime(runtime)
    runtime.redis.flushdb()
    log_dir = stores.data_dir / "bench-logs"
    log_dir.mkdir(exist_ok=True)
    # The in-process publishes print their [inner-context] lines to a file, like the worker's.
    context_lines = (log_dir / "direct-context.log").open("w")
    logs.configure(log_format="logfmt", stream=context_lines)

    # The production worker command line (`inner-plane worker signals -c 2`) plus the bench-only
    # tasks.
    command = celery_command("signals", settings, concurrency=2)
    command += ["--include", "bench.baseline_tasks", "--without-mingle", "--without-gossip"]
    env = stores.env(PYTHONPATH=str(harness.ROOT))
    worker = ChildProcess("bench-worker", command, env, log_dir).start()
    try:
        worker.wait_for(" ready.", 60)
        run(Bench(settings, runtime, worker))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGCONT)  # a stopped worker cannot shut down
        worker.stop()
        context_lines.close()


TRACED_BATCH = 100
TRACED_BATCHES = 20 if QUICK else 60


def tracing_cost(runtime: Runtime) -> dict[str, Any]:
    """``otel_publish_ratio``: an in-process ``publish_many`` of TRACED_BATCH signals (a publish
    span each, exported over OTLP/HTTP to a receiver in another process), p50 with tracing on
    over off, alternating pairs of batches in one process."""
    times: dict[bool, list[float]] = {False: [], True: []}
    with harness.traced("bench-publish") as exported:
        for n in range(2 * TRACED_BATCHES + 2):
            traced = (n // 2) % 2 == 1
            tracing.switch(traced)
            batch = signals(f"otel{n}-{uuid.uuid4().hex[:6]}", TRACED_BATCH)
            started = time.perf_counter()
            publish_many(batch, runtime=runtime, via="bench")
            if n >= 2:  # the first pair warms up
                times[traced].append((time.perf_counter() - started) * 1000)
    return {
        "otel_publish_off_ms_p50": round(median(times[False]), 2),
        "otel_publish_on_ms_p50": round(median(times[True]), 2),
        "otel_publish_ratio": ratio(median(times[True]), median(times[False])),
        "otel_publish_spans_exported": exported["spans"],
    }


def run(bench: Bench) -> None:
    names = ["ingest", "baseline_insert", "raw_noop", "bulk_celery", "bulk_direct", "executemany"]
    rates: dict[str, list[float]] = {name: [] for name in names}
    direct_ms: list[float] = []
    executemany_ms: list[float] = []
    print(
        f"publish benchmark: {ROUNDS} rounds (+1 warm-up); {MESSAGES} messages per one-signal "
        f"measurement; bulk {BULK_MESSAGES}x{BULK_SIZE} via Celery, {DIRECT_BATCHES}x{BULK_SIZE} "
        "in-process; worker -c 2 (prefork)",
        flush=True,
    )
    for round_no in range(ROUNDS + 1):
        tag = uuid.uuid4().hex[:8]
        count = MESSAGES if round_no else MESSAGES // 4  # a short warm-up
        sample = {
            "raw_noop": bench.celery_per_message("bench.noop", f"{tag}r", False, count),
            "ingest": bench.celery_per_message(celery_bridge.PUBLISH_TASK, f"{tag}i", True, count),
            "baseline_insert": bench.celery_per_message("bench.insert_one", f"{tag}b", True, count),
            "bulk_celery": bench.celery_bulk(f"{tag}c"),
            "bulk_direct": bench.direct_bulk(f"{tag}d", direct_ms if round_no else []),
            "executemany": bench.executemany(f"{tag}e", executemany_ms if round_no else []),
        }
        if round_no == 0:
            measured_from = len(bench.worker.output())  # task runtimes: measured rounds only
        label = "warm-up" if round_no == 0 else f"round {round_no}"
        print(f"  {label:>8}: " + "  ".join(f"{k}={v:,.0f}/s" for k, v in sample.items()))
        if round_no:
            for name, value in sample.items():
                rates[name].append(value)

    medians = {name: median(values) for name, values in rates.items()}
    slowest = {name: min(values) for name, values in rates.items()}
    ratios = {
        "ingest_vs_raw": ratio(medians["ingest"], medians["raw_noop"]),
        "ingest_vs_baseline_insert": ratio(medians["ingest"], medians["baseline_insert"]),
        "baseline_insert_vs_raw": ratio(medians["baseline_insert"], medians["raw_noop"]),
        "bulk_celery_vs_raw": ratio(medians["bulk_celery"], medians["raw_noop"]),
        "bulk_direct_vs_executemany": ratio(medians["bulk_direct"], medians["executemany"]),
    }
    targets = {"ingest_vs_raw": 0.95, "bulk_celery_vs_raw": 10.0, "bulk_direct_vs_executemany": 0.5}

    print()
    print(f"{'figure':<34}{'median':>14}{'slowest round':>16}")
    labels = {
        "ingest": "(a) ingest, 1 signal/message",
        "baseline_insert": "(b) plain task, INSERT+commit",
        "raw_noop": "(c) raw no-op task",
        "bulk_celery": f"(d) bulk via Celery ({BULK_SIZE}/msg)",
        "bulk_direct": f"(d) bulk direct ({BULK_SIZE}/call)",
        "executemany": f"(e) psycopg executemany ({BULK_SIZE})",
    }
    for name in names:
        print(f"{labels[name]:<34}{medians[name]:>12,.0f}/s{slowest[name]:>14,.0f}/s")
    print(
        f"per {BULK_SIZE}-signal batch, in-process: publish_many p50 "
        f"{median(direct_ms):.1f} ms p99 {p99(direct_ms):.1f} ms; executemany "
        f"p50 {median(executemany_ms):.1f} ms p99 {p99(executemany_ms):.1f} ms"
    )
    runtimes = task_runtimes(bench.worker.output()[measured_from:])
    for task, values in runtimes.items():
        print(
            f"worker runtime of one {task} task: p50 {median(values):.2f} ms "
            f"p99 {p99(values):.2f} ms (n={len(values)})"
        )
    for key, value in ratios.items():
        target = targets.get(key)
        note = "" if target is None else "  " + harness.verdict(value, target)
        print(f"{key:<30} {value:6.2f}{note}")
    print(
        "note: 2 shared cores; the worker, PostgreSQL, Redis and this process compete for them, "
        "so absolute rates vary between runs more than the ratios do."
    )

    figures: dict[str, Any] = {
        "rounds": ROUNDS,
        "messages": MESSAGES,
        "bulk_size": BULK_SIZE,
        "worker_concurrency": 2,
    }
    for name in names:
        figures[f"{name}_per_s"] = round(medians[name], 1)
        figures[f"{name}_slowest_round_per_s"] = round(slowest[name], 1)
    figures["bulk_direct_batch_ms_p50"] = round(median(direct_ms), 2)
    figures["bulk_direct_batch_ms_p99"] = round(p99(direct_ms), 2)
    figures["executemany_batch_ms_p50"] = round(median(executemany_ms), 2)
    figures["executemany_batch_ms_p99"] = round(p99(executemany_ms), 2)
    for task, values in runtimes.items():
        short = task.rsplit(".", 1)[1]
        figures[f"task_{short}_ms_p50"] = round(median(values), 3)
        figures[f"task_{short}_ms_p99"] = round(p99(values), 3)
    figures.update(ratios)
    figures.update(tracing_cost(bench.runtime))
    print(
        f"tracing on / off, in-process publish_many of {TRACED_BATCH} signals p50: "
        f"{figures['otel_publish_ratio']}"
    )
    harness.emit(figures)


if __name__ == "__main__":
    main()
