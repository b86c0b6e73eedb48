"""The figures of the capacity model (docs/operations.md), measured on the production worker
command lines, in one run on the same stores:

  1. signals/s through ONE signals-worker process (`inner-plane worker signals`: prefork, 2
     children), one signal per Celery message; baseline: a no-op task with the same payload
     through the same worker (Celery's own per-message cost);
  2. activations/s through ONE activation-worker process (`inner-plane worker activation
     --concurrency 1`) excluding the model: a scripted agent that settles at once, one wake
     signal batch per delegate across many delegates; baseline: a no-op task through the same
     worker;
  3. journal bytes per 1,000 signals: every journal table and index (pg_total_relation_size)
     after those signals were journaled, activated and settled, and per activation.

For 1 and 2 the messages are enqueued while the worker is paused (SIGSTOP); the clock runs from
SIGCONT until the journal shows every signal journaled (1) or delivered (2). Rounds interleave
measurement and baseline so machine noise hits both; figures are medians over rounds.

    .venv/bin/python -m bench.capacity [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from bench import harness
from bench.harness import QUICK, median, ratio
from inner_plane import celery_bridge, logs
from inner_plane.config import Settings, build_settings
from inner_plane.publish import publish_many
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from inner_plane.services.processes import celery_command
from inner_plane.signals.ids import derive_signal_id
from tests.support.processes import ChildProcess
from tests.support.stores import Stores, truncate_all

ROUNDS = 2 if QUICK else 3
INGEST_MESSAGES = 300 if QUICK else 800
DELEGATES = 100 if QUICK else 200
SIGNALS_PER_DELEGATE = 5
# A representative payload: what a CI or task processor reports (about 250 bytes of JSON).
PAYLOAD = {
    "status": "passed",
    "pipeline": "build-and-test",
    "url": "https://ci.example/p/123456/jobs/7890",
    "summary": "412 tests passed, 3 skipped; coverage 87.2%; artifacts uploaded",
    "duration_s": 341,
}


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark timed out waiting for {what}")
        time.sleep(0.01)


def count(runtime: Runtime, sql: str) -> int:
    with runtime.engine.connect() as connection:
        return int(connection.execute(text(sql)).scalar_one())


def journal_bytes(runtime: Runtime) -> dict[str, int]:
    """Each journal table with its indexes and TOAST (Alembic's bookkeeping excluded)."""
    with runtime.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT tablename, pg_total_relation_size(quote_ident(tablename)) "
                "FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename <> 'alembic_version'"
            )
        )
        return {str(name): int(size) for name, size in rows}


def growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before.get(name, 0) for name in after}


def wire_signals(
    tag: str, n: int, kind: str, delegates: int = 1, prefix: str = "d"
) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        delegate = f"{prefix}{i % delegates:04d}"
        key = f"{tag}-{i}"
        out.append(
            {
                "kind": kind,
                "source": "bench",
                "delegate_id": delegate,
                "dedup_key": key,
                "id": str(derive_signal_id(delegate, "bench", key)),
                "data": {**PAYLOAD, "n": i},
            }
        )
    return out


class Worker:
    """One production worker process, paused while its queue is filled."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], stores: Stores) -> None:
        log_dir = stores.data_dir / "bench-logs"
        log_dir.mkdir(exist_ok=True)
        extra = ["--include", "bench.baseline_tasks", "--without-mingle", "--without-gossip"]
        self.process = ChildProcess(name, [*command, *extra], env, log_dir).start()
        try:
            self.process.wait_for(" ready.", 90)
        except AssertionError:
            self.process.kill()  # never leave a worker behind
            raise

    def pause(self) -> None:
        os.killpg(self.process.pid, signal.SIGSTOP)

    def timed(self, done: Callable[[], bool]) -> float:
        start = time.perf_counter()
        os.killpg(self.process.pid, signal.SIGCONT)
        wait_until(done, self.process.name)
        return time.perf_counter() - start

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGCONT)
        self.process.stop()


def drained(runtime: Runtime, queue: str) -> Callable[[], bool]:
    # acks_late: a message stays in "unacked" until its task finished.
    return lambda: runtime.redis.llen(queue) == 0 and runtime.redis.hlen("unacked") == 0


def noop_rate(settings: Settings, runtime: Runtime, worker: Worker, queue: str, n: int) -> float:
    worker.pause()
    for payload in wire_signals(uuid.uuid4().hex[:8], n, "external.bench.noop"):
        celery_bridge.send(settings, "bench.noop", queue, args=(payload,))
    return n / worker.timed(drained(runtime, queue))


def ingest_rate(settings: Settings, runtime: Runtime, worker: Worker) -> float:
    before = runtime.signals.count()
    worker.pause()
    # next-turn: the wake scheduler stays out of the ingest figure.
    # A delegate of its own: its next-turn signals never ride along with the lane's activations.
    tag = uuid.uuid4().hex[:8]
    for payload in wire_signals(tag, INGEST_MESSAGES, "external.bench.done", prefix="ingest"):
        celery_bridge.send_publish(settings, {**payload, "mode": "next-turn"})
    elapsed = worker.timed(lambda: runtime.signals.count() >= before + INGEST_MESSAGES)
    return INGEST_MESSAGES / elapsed


DELIVERED = "SELECT count(*) FROM signals WHERE state = 'delivered' AND kind = 'task.completed'"
COMPLETED = "SELECT count(*) FROM activations WHERE state = 'completed'"


def activation_round(runtime: Runtime, worker: Worker) -> dict[str, float]:
    # The journal keeps what earlier rounds wrote, so the bytes are the marginal growth of a
    # journal in use (not the first pages of empty tables and indexes).
    size, delivered, completed = (
        journal_bytes(runtime),
        count(runtime, DELIVERED),
        count(runtime, COMPLETED),
    )
    total = DELEGATES * SIGNALS_PER_DELEGATE
    batch = wire_signals(uuid.uuid4().hex[:8], total, "task.completed", DELEGATES)
    worker.pause()
    publish_many([{**s, "mode": "wake"} for s in batch], runtime=runtime, via="bench")
    elapsed = worker.timed(lambda: count(runtime, DELIVERED) >= delivered + total)
    activations = count(runtime, COMPLETED) - completed
    by_table = growth(size, journal_bytes(runtime))
    grown = sum(by_table.values())
    largest = sorted(by_table.items(), key=lambda item: -item[1])[:4]
    print("  journal growth by table: " + ", ".join(f"{n} {b // 1024} KiB" for n, b in largest))
    return {
        "activations": activations,
        "activations_per_s": activations / elapsed,
        "bytes_per_1000_signals": grown / total * 1000,
        "bytes_per_activation": grown / activations,
    }


def benchmark(stores: Stores) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        "batch_quiet_ms": 0,
        "batch_max_age_ms": 0,
        "wake_budget_per_hour": 10**9,
    }
    settings = build_settings(
        database_url=stores.database_url,
        redis_url=stores.redis_url,
        data_dir=stores.data_dir,
        **overrides,
    )
    runtime = build_runtime(settings)
    set_runtime(runtime)
    truncate_all(runtime.database_url)
    runtime.redis.flushdb()
    env = stores.env(
        PYTHONPATH=str(harness.ROOT),
        INNER_PLANE_AGENT="scripted",
        INNER_PLANE_AGENT_SCRIPT=json.dumps({"steps": 0}),
        INNER_PLANE_BATCH_QUIET_MS="0",
        INNER_PLANE_BATCH_MAX_AGE_MS="0",
        INNER_PLANE_WAKE_BUDGET_PER_HOUR=str(10**9),
    )
    series: dict[str, list[float]] = {
        k: []
        for k in (
            "ingest",
            "ingest_noop",
            "activations",
            "activation_noop",
            "bytes_per_1000",
            "bytes_per_activation",
        )
    }
    signals_worker = Worker("capacity-signals", celery_command("signals", settings), env, stores)
    try:
        activation_worker = Worker(
            "capacity-activation", celery_command("activation", settings), env, stores
        )
    except BaseException:
        signals_worker.stop()
        raise
    activations_per_round = 0.0
    try:
        for round_no in range(ROUNDS + 1):  # round 0 warms connections and caches
            ingest = ingest_rate(settings, runtime, signals_worker)
            ingest_noop = noop_rate(
                settings, runtime, signals_worker, celery_bridge.SIGNALS_QUEUE, INGEST_MESSAGES
            )
            lane = activation_round(runtime, activation_worker)
            lane_noop = noop_rate(
                settings, runtime, activation_worker, celery_bridge.ACTIVATION_QUEUE, DELEGATES
            )
            print(
                f"round {round_no}: ingest {ingest:.0f}/s (no-op {ingest_noop:.0f}/s); "
                f"{lane['activations']:.0f} activations at {lane['activations_per_s']:.1f}/s "
                f"(no-op {lane_noop:.0f}/s); {lane['bytes_per_1000_signals'] / 1e6:.2f} MB "
                "per 1,000 signals",
                flush=True,
            )
            if round_no == 0:
                continue
            series["ingest"].append(ingest)
            series["ingest_noop"].append(ingest_noop)
            series["activations"].append(lane["activations_per_s"])
            series["activation_noop"].append(lane_noop)
            series["bytes_per_1000"].append(lane["bytes_per_1000_signals"])
            series["bytes_per_activation"].append(lane["bytes_per_activation"])
            activations_per_round = lane["activations"]
    finally:
        signals_worker.stop()
        activation_worker.stop()
    m = {name: median(values) for name, values in series.items()}
    return {
        "benchmark": "capacity",
        "rounds": ROUNDS,
        "signals_per_s_per_signals_worker": round(m["ingest"], 1),
        "noop_tasks_per_s_per_signals_worker": round(m["ingest_noop"], 1),
        "ingest_vs_noop": ratio(m["ingest"], m["ingest_noop"]),
        "activations_per_s_per_activation_worker": round(m["activations"], 1),
        "plane_ms_per_activation": round(1000 / m["activations"], 1),
        "noop_tasks_per_s_per_activation_worker": round(m["activation_noop"], 1),
        "activations_vs_noop": ratio(m["activations"], m["activation_noop"]),
        "signals_per_activation": round(
            DELEGATES * SIGNALS_PER_DELEGATE / activations_per_round, 2
        ),
        "journal_bytes_per_1000_signals": round(m["bytes_per_1000"]),
        "journal_bytes_per_activation": round(m["bytes_per_activation"]),
        "payload_bytes": len(json.dumps(PAYLOAD)),
        "signals_worker_concurrency": 2,
        "activation_worker_concurrency": 1,
    }


def main() -> None:
    logs.configure(stream=open(os.devnull, "w"))  # noqa: SIM115 - silence per-signal lines
    with harness.stores("capacity") as stores:
        figures = benchmark(stores)
    harness.emit(figures)


if __name__ == "__main__":
    main()
