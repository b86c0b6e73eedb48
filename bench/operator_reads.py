"""What an operator's reads of the journal cost across a network (issue 30): `inner-plane
status`'s reads on its libpq connection and a /metrics scrape's on the engine's, each sent
together in one round trip (``journal.plain.Batch``), against the same reads sent one statement
per round trip, alternated in the same run. PostgreSQL is reached through bench/latency_proxy.py
with 0 and 1 ms added one way; the round trips are counted on the wire.

The journal holds the work of 200 delegates (1,000 due signals, a tenth of them waking, and
ambient ones), so each read finds rows.

    .venv/bin/python -m bench.operator_reads [--quick]

Figures: ``status_reads_round_trips`` and ``scrape_reads_round_trips`` (together), with
``..._one_by_one`` beside them; per delay, p50 and p99 of each mode in ms
(``status_reads_ms_rtt1`` ...), and the ratio of together over one by one at the p50
(``status_reads_vs_one_by_one_p50_rtt1``, ``scrape_reads_vs_one_by_one_p50_rtt1``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench import harness, latency_proxy
from bench.harness import QUICK, ratio, summary
from inner_plane import logs
from inner_plane.config import build_settings
from inner_plane.journal import plain
from inner_plane.journal.database import engine_rows, reading
from inner_plane.publish import publish_drafts
from inner_plane.runtime import build_runtime
from inner_plane.services.metrics import journal_reads
from inner_plane.services.status import journal_view
from inner_plane.signals.model import SignalDraft

DELAYS_MS = (0.0, 1.0)
ROUNDS = 40 if QUICK else 200
DELEGATES = 200


def one_by_one(rows: plain.Rows) -> plain.Rows:
    """``rows`` as plain Rows: a batch on it sends each read in a round trip of its own."""

    def each(sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Mapping[str, Any]]:
        return rows(sql, params)

    return each


def timed(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for name in names:  # warm: connections made, statements prepared
        for _ in range(6):
            calls[name]()
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            started = time.perf_counter()
            calls[name]()
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def measure(
    proxy: latency_proxy.Spawned,
    settings: Any,
    database_url: str,
    figures: dict[str, Any],
    count_trips: bool,
) -> dict[str, list[float]]:
    """Both readers through ``proxy``: their samples; with ``count_trips``, each way's round
    trips (one call each) into ``figures``."""
    url = proxy.url("pg", database_url)
    engine = build_runtime(settings.model_copy(update={"database_url": url})).engine
    try:
        with plain.connect(url, 5, "bench operator reads") as libpq, reading(engine) as connection:
            scrape = engine_rows(connection)
            calls: dict[str, Callable[[], object]] = {
                "status": lambda: journal_view(libpq, 10),
                "status_one_by_one": lambda: journal_view(one_by_one(libpq), 10),
                "scrape": lambda: journal_reads(scrape),
                "scrape_one_by_one": lambda: journal_reads(one_by_one(scrape)),
            }
            if count_trips:
                for name, call in calls.items():
                    proxy.reset()
                    call()
                    kind, _, way = name.partition("_")
                    key = f"{kind}_reads_round_trips" + (f"_{way}" if way else "")
                    figures[key] = proxy.stats()["pg"].round_trips
            return timed(calls, ROUNDS if count_trips else ROUNDS // 2)
    finally:
        engine.dispose()


def main() -> None:
    logs.configure(stream=open("/dev/null", "w"))  # noqa: SIM115 - silence per-signal lines
    figures: dict[str, Any] = {"rounds": ROUNDS}
    with harness.stores("operator_reads") as stores:
        settings = build_settings(
            database_url=stores.database_url, redis_url=stores.redis_url, data_dir=stores.data_dir
        )
        runtime = build_runtime(settings)
        drafts = [
            SignalDraft.parse(
                {
                    "kind": "task.completed",
                    "source": "bench",
                    "delegate_id": f"d{k % DELEGATES}",
                    "mode": "wake" if k % 10 == 0 else ("ambient" if k % 7 == 0 else "next-turn"),
                    "data": {"n": k},
                }
            )
            for k in range(1_000)
        ]
        publish_drafts(drafts, runtime=runtime)
        for delay in DELAYS_MS:
            label = f"rtt{delay:g}".replace(".", "_")
            with latency_proxy.spawn({"pg": stores.database_url}, delay) as proxy:
                samples = measure(proxy, settings, stores.database_url, figures, delay == 0)
            for kind in ("status", "scrape"):
                together, each = summary(samples[kind]), summary(samples[f"{kind}_one_by_one"])
                figures[f"{kind}_reads_ms_{label}"] = together
                figures[f"{kind}_reads_one_by_one_ms_{label}"] = each
                figures[f"{kind}_reads_vs_one_by_one_p50_{label}"] = ratio(
                    together["p50"], each["p50"]
                )
                print(
                    f"{delay:g} ms one way, {kind} reads: together p50 {together['p50']} "
                    f"p99 {together['p99']} ms; one by one p50 {each['p50']} p99 {each['p99']} "
                    f"ms; ratio {figures[f'{kind}_reads_vs_one_by_one_p50_{label}']}"
                )
    print(
        f"round trips: status reads {figures['status_reads_round_trips']} "
        f"(one by one {figures['status_reads_round_trips_one_by_one']}), scrape reads "
        f"{figures['scrape_reads_round_trips']} "
        f"(one by one {figures['scrape_reads_round_trips_one_by_one']})"
    )
    harness.emit(figures)


if __name__ == "__main__":
    main()
