"""Benchmark of the operator's live view (issue 11), in one run on the same stores:

  (a) live: signals published at 100/s (the in-process publish path, one autocommit insert
      each); for each, the time from its commit to the event naming it at an SSE client of
      `inner-plane serve` (``/v1/events``: LISTEN thread, log read, fan-out, HTTP stream);
  (b) notify: in the same run, a bare psycopg LISTEN client on the same channel: commit to the
      notification (the floor any NOTIFY-driven feed sits on);
  (c) timeline page: ``GET /v1/delegates/D/timeline`` (latest page, and pages deep in the
      history) with 100,000 entries of that delegate behind it, and others' beside them;
  (d) publish cost of the live trigger: the same single publish with the statement trigger of
      ``signals`` enabled and disabled, interleaved, with no live reader running.

Prints medians and p99; the last line is one JSON object with every figure, including
``live_p99_ms``, ``live_vs_notify_p99`` (target <= 3) and ``timeline_page_p99_ms``
(target <= 50).

    .venv/bin/python -m bench.ui [--quick]
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import psycopg
from sqlalchemy import event, text

from bench import harness
from bench.harness import QUICK, ROOT, median, p99, ratio, summary, verdict
from inner_plane.config import build_settings
from inner_plane.journal.operator import live
from inner_plane.journal.plain import libpq_url
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.services.embedded import free_port
from inner_plane.signals.kinds import KindRegistry
from tests.support.stores import Stores, truncate_all

RATE = 100.0  # signals per second
LIVE_SIGNALS = 300 if QUICK else 1_000
TIMELINE_ENTRIES = 100_000
PAGE_REQUESTS = 100 if QUICK else 300
PUBLISH_ROUNDS = 3 if QUICK else 5
PUBLISH_PER_ROUND = 200 if QUICK else 500


def serve(stores: Stores) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = stores.env()
    process = subprocess.Popen(
        [sys.executable, "-m", "inner_plane", "serve", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("inner-plane serve did not start")
        time.sleep(0.2)


def measure_live(runtime: Runtime, base: str) -> dict[str, Any]:
    """Publish at RATE; commit -> SSE event, and commit -> bare NOTIFY, per signal."""
    committed: dict[str, float] = {}
    order: list[str] = []
    sse_at: dict[str, float] = {}
    notify_at: list[float] = []
    ready = threading.Barrier(3)
    done = threading.Event()

    def sse() -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(30, read=None)) as client,
            client.stream("GET", f"{base}/v1/events", params={"topic": "signals"}) as response,
        ):
            ready.wait()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    now = time.time()
                    for ident in json.loads(line[6:])["ids"]:
                        sse_at[ident] = now
                if done.is_set() and len(sse_at) >= len(order):
                    return

    def listen() -> None:
        with psycopg.connect(libpq_url(runtime.database_url), autocommit=True) as conn:
            conn.execute(f"LISTEN {live.CHANNEL}")
            ready.wait()
            while not (done.is_set() and len(notify_at) >= len(order)):
                for _note in conn.notifies(timeout=1.0, stop_after=1):
                    notify_at.append(time.time())

    # The moment each insert committed: it runs in autocommit, so its answer means committed.
    # publish() returns later, after its post-commit logging; timing its return would shift both
    # series by that work and shrink the NOTIFY floor (below zero at p50 on a slow host).
    commit_at = [0.0]

    def after_execute(*args: Any) -> None:  # conn, cursor, statement, parameters, context, many
        if args[2].startswith("INSERT INTO signals"):
            commit_at[0] = time.time()

    event.listen(runtime.engine, "after_cursor_execute", after_execute)
    threads = [threading.Thread(target=sse, daemon=True), threading.Thread(target=listen)]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.5)
    start = time.monotonic()
    for n in range(LIVE_SIGNALS):
        due = start + n / RATE
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        result = publish(
            kind="external.bench.tick", source="bench", mode="ambient", data={"n": n},
            runtime=runtime,
        )  # fmt: skip
        committed[str(result.id)] = commit_at[0]
        order.append(str(result.id))
    done.set()
    event.remove(runtime.engine, "after_cursor_execute", after_execute)
    for thread in threads:
        thread.join(30)
    live_ms = [(sse_at[i] - committed[i]) * 1000 for i in order if i in sse_at]
    notify_ms = [(at - committed[i]) * 1000 for i, at in zip(order, notify_at, strict=False)]
    return {
        "live": summary(live_ms),
        "notify": summary(notify_ms),
        "live_missing": len(order) - len(live_ms),
        "rate_achieved": round(len(order) / (time.monotonic() - start), 1),
    }


def fill_timeline(runtime: Runtime) -> tuple[str, int]:
    delegate = "bench-timeline"
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO conversations (id, delegate_id) VALUES (gen_random_uuid(), :d), "
                "(gen_random_uuid(), 'bench-other')"
            ),
            {"d": delegate},
        )
        connection.execute(
            text(
                """
                INSERT INTO conversation_events (id, delegate_id, conversation_id, type, payload)
                SELECT gen_random_uuid(), c.delegate_id, c.id,
                       (ARRAY['inner.activation.started', 'memory.retrieval', 'tool.call',
                              'tool.result', 'assistant.message',
                              'inner.activation.completed'])[1 + g % 6],
                       jsonb_build_object('reply', 'entry ' || g, 'duration_ms', g % 500,
                                          'status', 'miss', 'name', 'tool', 'trigger', 'wake')
                  FROM conversations c, generate_series(1, :n) g
                 WHERE c.delegate_id IN (:d, 'bench-other') AND c.ended_at IS NULL
                """
            ),
            {"n": TIMELINE_ENTRIES, "d": delegate},
        )
        connection.execute(text("ANALYZE conversation_events"))
        low, high = connection.execute(
            text("SELECT min(seq), max(seq) FROM conversation_events WHERE delegate_id = :d"),
            {"d": delegate},
        ).one()
    return delegate, (low + high) // 2


def measure_pages(base: str, delegate: str, middle: int) -> dict[str, Any]:
    latest: list[float] = []
    deep: list[float] = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(5):  # warm the connection and the server's caches
            client.get(f"/v1/delegates/{delegate}/timeline")
        for n in range(PAGE_REQUESTS):
            started = time.perf_counter()
            page = client.get(f"/v1/delegates/{delegate}/timeline", params={"limit": 100})
            latest.append((time.perf_counter() - started) * 1000)
            assert len(page.json()["entries"]) == 100
            started = time.perf_counter()
            page = client.get(
                f"/v1/delegates/{delegate}/timeline",
                params={"limit": 100, "before": middle - n * 97},
            )
            deep.append((time.perf_counter() - started) * 1000)
            assert len(page.json()["entries"]) == 100
    return {"latest": summary(latest), "deep": summary(deep), "all": latest + deep}


def measure_publish_triggers(runtime: Runtime) -> dict[str, Any]:
    """Single publishes with the live trigger of signals on, then off, round after round."""
    on: list[float] = []
    off: list[float] = []

    def batch(into: list[float]) -> None:
        for n in range(PUBLISH_PER_ROUND):
            started = time.perf_counter()
            publish(
                kind="external.bench.cost", source="bench", mode="ambient",
                data={"n": n, "r": uuid.uuid4().hex}, runtime=runtime,
            )  # fmt: skip
            into.append((time.perf_counter() - started) * 1000)

    def triggers(enabled: bool) -> None:
        verb = "ENABLE" if enabled else "DISABLE"
        with runtime.engine.begin() as connection:
            connection.execute(text(f"ALTER TABLE signals {verb} TRIGGER live_signals_insert"))

    try:
        for _ in range(PUBLISH_ROUNDS):
            triggers(True)
            batch(on)
            triggers(False)
            batch(off)
    finally:
        triggers(True)
    return {"with_trigger": summary(on), "without_trigger": summary(off)}


def main() -> None:
    with harness.stores("ui") as stores:
        truncate_all(stores.database_url)  # the stores persist between runs
        settings = build_settings(
            database_url=stores.database_url, redis_url=stores.redis_url, data_dir=stores.data_dir
        )
        runtime = build_runtime(settings, registry=KindRegistry())
        server, base = serve(stores)
        try:
            time.sleep(1.0)
            live_figures = measure_live(runtime, base)
            delegate, middle = fill_timeline(runtime)
            pages = measure_pages(base, delegate, middle)
        finally:
            server.terminate()
            server.wait(20)
        # With no reader running: what the trigger costs the writing transaction itself (a
        # listening API adds the reads it makes of each event, on the same two cores here).
        costs = measure_publish_triggers(runtime)
    live_p99 = live_figures["live"]["p99"]
    notify_p99 = live_figures["notify"]["p99"]
    page_p99 = round(p99(pages["all"]), 3)
    vs_notify = ratio(live_p99, notify_p99)
    trigger_cost = ratio(costs["with_trigger"]["p50"], costs["without_trigger"]["p50"])
    print(f"live (commit -> SSE event), {RATE:.0f} signals/s: {live_figures['live']} ms")
    print(f"bare LISTEN (commit -> NOTIFY): {live_figures['notify']} ms")
    print(f"live_vs_notify_p99 = {vs_notify} {verdict(vs_notify, 3.0, higher_is_better=False)}")
    print(f"timeline page, {TIMELINE_ENTRIES} entries behind it: latest {pages['latest']} ms, "
          f"deep {pages['deep']} ms; p99 {page_p99} ms "
          f"{verdict(page_p99, 50.0, higher_is_better=False)}")  # fmt: skip
    print(f"single publish with / without the live trigger: {costs['with_trigger']} / "
          f"{costs['without_trigger']} ms (p50 ratio {trigger_cost})")  # fmt: skip
    harness.emit(
        {
            "live_p50_ms": live_figures["live"]["p50"],
            "live_p99_ms": live_p99,
            "notify_p50_ms": live_figures["notify"]["p50"],
            "notify_p99_ms": notify_p99,
            "live_vs_notify_p99": vs_notify,
            "live_missing": live_figures["live_missing"],
            "live_rate_achieved": live_figures["rate_achieved"],
            "timeline_page_p50_ms": round(median(pages["all"]), 3),
            "timeline_page_p99_ms": page_p99,
            "timeline_entries": TIMELINE_ENTRIES,
            "publish_with_trigger_p50_ms": costs["with_trigger"]["p50"],
            "publish_without_trigger_p50_ms": costs["without_trigger"]["p50"],
            "publish_trigger_cost_ratio": trigger_cost,
        }
    )


if __name__ == "__main__":
    main()
