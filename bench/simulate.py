"""Simulator benchmark (issue 26): how fast the policy simulator replays a journal, whether its
memory stays flat as the journal grows, and how soon running processes follow a new policy.

Journals of its own, COPY-loaded into migrated databases: 100k and 1M signals (``--quick``: 10k
and 100k) over 1,000 delegates, about 20 a second, each with the activation that delivered it,
and a user turn per hundred signals. Each size is replayed in a child process under a candidate
that batches ``task.*`` for a minute, split across as many processes as ``simulate --workers``
uses by default (the CPU count, at most 4); the child reports its wall time, the CPU seconds of
the replay's processes and threads, and the largest peak RSS among them (VmHWM, ru_maxrss).
Baseline, measured in the same child: reading the same streams without simulating (the
journal's own cost), so ``simulate_overhead_ratio`` is what the virtual lanes add.

Policy pickup: four child processes each follow the policy as a worker does (the LISTEN of
``attention.live``, with the poll on use as the fallback) and note when they first see each new
version; twenty versions are applied half a second apart. ``policy_pickup_p99_s`` is the p99 of
apply -> seen over every (version, process); the baseline is the poll alone (no LISTEN).

The last line is one JSON object: ``simulate_signals_per_s`` (largest size; target >= 50,000),
``simulate_signals_per_cpu_s`` (the same per CPU second: steadier on a shared machine),
``simulate_rss_mb`` (largest peak; <= 300), ``simulate_rss_growth_mb`` (largest - smallest:
flat), ``policy_pickup_p99_s`` (<= 5).

    .venv/bin/python -m bench.simulate [--quick]
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from bench.harness import QUICK, ROOT, emit, ratio, stores, summary, verdict
from inner_plane.journal import database
from inner_plane.journal.plain import libpq_url, sqlalchemy_url

DELEGATES = 1_000
KINDS = (
    ("task.completed", "wake", 50),
    ("memory.consolidated", "wake", 40),
    ("timer.due", "wake", 50),
    ("external.ci.finished", "next-turn", 50),
    ("memory.inserted", "ambient", 10),
)
CANDIDATE = '[[rules]]\nkind = "task.*"\nquiet_ms = 60000\nmax_age_ms = 120000\n'
START = datetime(2026, 1, 5, tzinfo=UTC)


def load(url: str, size: int) -> None:
    """``size`` signals, their activations and a user turn per hundred, by COPY."""
    rng = random.Random(size)
    with psycopg.connect(libpq_url(url)) as connection:
        already = connection.execute("SELECT count(*) FROM signals").fetchone()
        if already and already[0] == size:
            return
        connection.execute("TRUNCATE signals, activations, user_turns, signal_events")
        with (
            connection.cursor() as cursor,
            cursor.copy(
                "COPY signals (id, delegate_id, kind, source, mode, priority, data, trust, "
                "state, attempts, max_attempts, occurred_at, created_at, available_at, "
                "updated_at, claimed_by, disposition, settled_at) FROM STDIN"
            ) as copy,
        ):
            activations: list[tuple[Any, ...]] = []
            for n in range(size):
                at = START + timedelta(seconds=n * 0.05)
                kind, mode, priority = KINDS[rng.randrange(len(KINDS))]
                delegate = f"d{rng.randrange(DELEGATES)}"
                signal_id = uuid.uuid4()
                activation = None if mode == "ambient" else uuid.uuid4()
                state = "expired" if mode == "ambient" else "delivered"
                copy.write_row(
                    (signal_id, delegate, kind, "bench", mode, priority, "{}", "trusted", state,
                     1, 5, at, at, at, at, activation, None if activation is None else "acted",
                     at + timedelta(seconds=2))
                )  # fmt: skip
                if activation is not None:
                    started = at + timedelta(seconds=0.5)
                    activations.append(
                        (activation, delegate, "wake", "completed", started,
                         started + timedelta(seconds=1.5), [signal_id])
                    )  # fmt: skip
        with (
            connection.cursor() as cursor,
            cursor.copy(
                "COPY activations (id, delegate_id, trigger, epoch, holder, state, started_at, "
                "finished_at, signal_ids) FROM STDIN"
            ) as copy,
        ):
            for a_id, delegate, trigger, state, started, finished, ids in activations:
                copy.write_row((a_id, delegate, trigger, 1, "bench", state, started, finished, ids))
        with (
            connection.cursor() as cursor,
            cursor.copy(
                "COPY user_turns (id, delegate_id, channel, text, state, created_at) FROM STDIN"
            ) as copy,
        ):
            for n in range(size // 100):
                at = START + timedelta(seconds=n * 5.0 + 0.01)
                copy.write_row(
                    (uuid.uuid4(), f"d{rng.randrange(DELEGATES)}", "sms", "hi", "done", at)
                )
        connection.execute("ANALYZE signals")
        connection.execute("ANALYZE activations")
        connection.execute("ANALYZE user_turns")
        connection.commit()


def _cpu_s() -> float:
    """CPU seconds of this process and of its ended children."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def child(url: str) -> None:
    """Replay the whole journal at ``url``; print wall times and the peak RSS as JSON."""
    from inner_plane.attention.document import SettingsDefaults, parse_document
    from inner_plane.config import build_settings
    from inner_plane.journal import replay
    from inner_plane.journal.database import get_engine
    from inner_plane.signals.kinds import KindRegistry
    from inner_plane.simulator.replay import default_workers, simulate

    settings = build_settings(database_url=url, redis_url="redis://127.0.0.1:1/0")
    engine = get_engine(url)
    registry = KindRegistry()
    since, until = START - timedelta(seconds=1), START + timedelta(days=30)
    started = time.perf_counter()
    read = 0
    with replay.snapshot(engine) as snap:
        for _ in replay.signals(snap, since, until):
            read += 1
        for _ in replay.user_turns(snap, since, until):
            read += 1
        for _ in replay.activations(snap, since, until):
            read += 1
    baseline_s = time.perf_counter() - started
    document = parse_document(
        CANDIDATE, [k.kind for k in registry.kinds()], SettingsDefaults.of(settings)
    )
    workers = default_workers()
    started, cpu = time.perf_counter(), _cpu_s()
    report = simulate(engine, registry, settings, document, since, until, workers=workers)
    simulate_s = time.perf_counter() - started
    # CPU seconds of the whole replay (its read-ahead threads and its other processes too):
    # steadier than wall time on a shared machine; PostgreSQL's own work is in its processes,
    # overlapping.
    simulate_cpu_s = _cpu_s() - cpu
    with open("/proc/self/status") as status:
        hwm_kb = int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
    # The largest of the replay's processes (this one runs a share of its own).
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(
        json.dumps(
            {
                "signals": report["signals"]["replayed"] + report["signals"]["ambient"],
                "simulate_s": simulate_s,
                "simulate_cpu_s": simulate_cpu_s,
                "baseline_read_s": baseline_s,
                "rss_mb": max(hwm_kb, children_kb) / 1024,
                "fidelity": report["fidelity"],
                "workers": workers,
            }
        )
    )


def follower(url: str, listen: bool) -> None:
    """Follow the policy as a worker does; print (version, wall time) at each change."""
    from inner_plane.attention.live import policy_source
    from inner_plane.config import build_settings
    from inner_plane.journal.database import get_engine
    from inner_plane.runtime import Runtime
    from inner_plane.signals.kinds import KindRegistry

    settings = build_settings(database_url=url, redis_url="redis://127.0.0.1:1/0")
    source = policy_source(Runtime(settings, get_engine(url), KindRegistry()))
    if listen:
        source.listen()
    seen = source.current().version
    print(json.dumps({"ready": True}), flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        version = source.current().version
        if version != seen:
            seen = version
            print(json.dumps({"version": version, "at": time.time()}), flush=True)
        time.sleep(0.005)


def pickup(url: str, listen: bool, versions_n: int = 20, processes: int = 4) -> list[float]:
    from inner_plane.journal import policy as journal_policy
    from inner_plane.journal.database import get_engine

    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.simulate", "--follow", url, str(int(listen))],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for process in children:
        assert process.stdout is not None
        process.stdout.readline()  # ready
    engine = get_engine(url)
    applied: dict[int, float] = {}
    for n in range(versions_n):
        at = time.time()
        version = journal_policy.apply(engine, f"[defaults]\nquiet_ms = {n}\n", "bench")
        applied[version] = at
        time.sleep(0.5)
    time.sleep(2.0)
    delays = []
    for process in children:
        process.kill()
        out, _ = process.communicate()
        for line in out.splitlines():
            entry = json.loads(line)
            if entry.get("version") in applied:
                delays.append(entry["at"] - applied[entry["version"]])
    return delays


def main() -> None:
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1])
        return
    if "--follow" in sys.argv:
        at = sys.argv.index("--follow")
        follower(sys.argv[at + 1], sys.argv[at + 2] == "1")
        return
    sizes = [10_000, 100_000] if QUICK else [100_000, 1_000_000]
    figures: dict[str, Any] = {}
    with stores("simulate") as started:
        base = make_url(sqlalchemy_url(started.database_url))
        runs = {}
        for size in sizes:
            url = base.set(database=f"inner_plane_simulate_{size}").render_as_string(
                hide_password=False
            )
            database.ensure_database(url)
            database.upgrade(url)
            load(url, size)
            done = subprocess.run(
                [sys.executable, "-m", "bench.simulate", "--child", url],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[size] = json.loads(done.stdout.strip().splitlines()[-1])
            run = runs[size]
            print(
                f"{size:>9} signals: simulate {run['simulate_s']:.2f} s "
                f"({run['signals'] / run['simulate_s']:,.0f} signals/s, "
                f"{run['signals'] / run['simulate_cpu_s']:,.0f} per CPU second), read alone "
                f"{run['baseline_read_s']:.2f} s, peak RSS {run['rss_mb']:.0f} MB, "
                f"fidelity {run['fidelity']}, {run['workers']} processes"
            )
        pickup_url = base.set(database=f"inner_plane_simulate_{sizes[0]}").render_as_string(
            hide_password=False
        )
        listened = pickup(pickup_url, listen=True)
        polled = pickup(pickup_url, listen=False)
    largest, smallest = runs[sizes[-1]], runs[sizes[0]]
    rate = largest["signals"] / largest["simulate_s"]
    pickup_listen, pickup_poll = summary(listened), summary(polled)
    print(f"pickup with LISTEN: {pickup_listen}; poll alone (baseline): {pickup_poll}")
    figures = {
        "simulate_signals_per_s": round(rate),
        "simulate_signals_per_cpu_s": round(largest["signals"] / largest["simulate_cpu_s"]),
        "simulate_read_only_signals_per_s": round(largest["signals"] / largest["baseline_read_s"]),
        "simulate_overhead_ratio": ratio(largest["simulate_s"], largest["baseline_read_s"]),
        "simulate_rss_mb": round(largest["rss_mb"], 1),
        "simulate_rss_smallest_mb": round(smallest["rss_mb"], 1),
        "simulate_rss_growth_mb": round(largest["rss_mb"] - smallest["rss_mb"], 1),
        "simulate_sizes": sizes,
        "policy_pickup_p50_s": pickup_listen["p50"],
        "policy_pickup_p99_s": pickup_listen["p99"],
        "policy_pickup_poll_p99_s": pickup_poll["p99"],
    }
    print("simulate_signals_per_s", figures["simulate_signals_per_s"], verdict(rate, 50_000))
    print("simulate_rss_mb", figures["simulate_rss_mb"], verdict(largest["rss_mb"], 300, False))
    print(
        "policy_pickup_p99_s",
        figures["policy_pickup_p99_s"],
        verdict(pickup_listen["p99"], 5, False),
    )
    emit(figures)


if __name__ == "__main__":
    main()
