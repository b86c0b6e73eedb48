"""Soak: a whole `inner-plane up` plane (embedded stores, every worker, beat, API, Flower) fed
50 signals/s across 100 delegates through the Celery `signals` queue, with the dry-run agent and
retention set to minutes.

    python -m bench.soak [--minutes 10] [--rate 50] [--delegates 100]

It prints each table's rows, the database size and every process's RSS at the baseline (after
the first retention period) and at the end, and ends with one line of JSON:
``soak_rss_growth_ratio`` (total RSS end / baseline, target <= 1.2) and ``soak_db_growth_ratio``
(database size end / baseline, target <= 1.5).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from sqlalchemy import create_engine, text

from bench import harness
from bench.harness import ratio, verdict
from inner_plane.journal.plain import sqlalchemy_url
from inner_plane.services.embedded import free_port
from inner_plane.services.plane import read_state

TABLES = (
    "signals", "signal_events", "activations", "thoughtflows", "conversation_events",
    "conversations", "user_turns", "leases", "live_events",
)  # fmt: skip


def rss_by_process(root: int) -> dict[str, float]:
    """RSS in MiB of `up` and every process under it, by name (pool children summed)."""
    found: dict[str, float] = {}
    try:
        parent = psutil.Process(root)
        processes = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return found
    for process in processes:
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(process.cmdline()[1:4]) or process.name()
            name = re.sub(r"\s+", " ", cmd)[:60]
            found[name] = found.get(name, 0.0) + process.memory_info().rss / 2**20
    return found


def journal_figures(database_url: str) -> dict[str, Any]:
    engine = create_engine(sqlalchemy_url(database_url))
    try:
        with engine.connect() as connection:
            rows = {
                table: int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())  # noqa: S608 (own constant names)
                for table in TABLES
            }
            size = int(
                connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
            pending = int(
                connection.execute(
                    text("SELECT count(*) FROM signals WHERE state IN ('pending', 'claimed')")
                ).scalar_one()
            )
    finally:
        engine.dispose()
    return {"rows": rows, "db_bytes": size, "pending_or_claimed": pending}


def show(label: str, figures: dict[str, Any], rss: dict[str, float]) -> None:
    print(f"--- {label}")
    for table, rows in figures["rows"].items():
        print(f"  {table:>20}: {rows:>9} rows")
    print(f"  {'database':>20}: {figures['db_bytes'] / 2**20:9.1f} MiB")
    for name, mib in sorted(rss.items()):
        print(f"  {mib:8.1f} MiB  {name}")
    print(f"  {sum(rss.values()):8.1f} MiB  total RSS", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="signals per second")
    parser.add_argument("--delegates", type=int, default=100)
    args = parser.parse_args()
    retention_s = 60.0
    # The baseline: after the first retention period (rows past the age started to go).
    baseline_at = min(args.minutes * 60 / 3, retention_s * 2 + 30)

    data_dir = Path(tempfile.mkdtemp(prefix="inner-plane-soak-")) / "plane"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    env.update(
        INNER_PLANE_DATA_DIR=str(data_dir),
        INNER_PLANE_API_PORT=str(free_port()),
        INNER_PLANE_FLOWER_PORT=str(free_port()),
        INNER_PLANE_AGENT="dry-run",
        INNER_PLANE_RETENTION_AGE_S=str(retention_s),
        INNER_PLANE_RETENTION_SIGNAL_EVENTS_S=str(retention_s),
        INNER_PLANE_RETENTION_ACTIVATIONS_S=str(retention_s),
        INNER_PLANE_RETENTION_THOUGHTFLOWS_S=str(retention_s),
        INNER_PLANE_RETENTION_CONVERSATION_EVENTS_S=str(retention_s),
        INNER_PLANE_RETENTION_USER_TURNS_S=str(retention_s),
        INNER_PLANE_RETENTION_KEEP_MESSAGES="10",
        INNER_PLANE_RETENTION_INTERVAL_S="20",
        INNER_PLANE_LIVE_RETENTION_S=str(retention_s),
        INNER_PLANE_WAKE_BUDGET_PER_HOUR="100000",
        PYTHONUNBUFFERED="1",
    )
    log = data_dir.parent / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "inner_plane", "up"],
            env=env, cwd=harness.ROOT, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while "; press Ctrl-C to stop" not in log.read_text(errors="replace"):
            if up.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"up did not become ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        state = read_state(data_dir)
        assert state is not None
        from inner_plane import celery_bridge
        from inner_plane.config import build_settings

        settings = build_settings(
            database_url=state.database_url,
            redis_url=state.redis_url,
            broker_url=state.broker_url,
            data_dir=data_dir,
        )
        started = time.monotonic()
        sent = 0
        baseline: tuple[dict[str, Any], dict[str, float]] | None = None
        first = (journal_figures(state.database_url), rss_by_process(up.pid))
        show("start (ready)", *first)
        end_at = started + args.minutes * 60
        while time.monotonic() < end_at:
            # Send what the rate owes by now, one message per signal, across the delegates.
            owed = int((time.monotonic() - started) * args.rate) - sent
            for _ in range(max(0, owed)):
                delegate = f"soak-{sent % args.delegates}"
                celery_bridge.send_publish(
                    settings,
                    {"kind": "task.completed", "source": "soak", "delegate_id": delegate,
                     "mode": "wake", "data": {"n": sent}},
                )  # fmt: skip
                sent += 1
            if baseline is None and time.monotonic() - started >= baseline_at:
                baseline = (journal_figures(state.database_url), rss_by_process(up.pid))
                show(f"baseline (after {baseline_at:.0f} s)", *baseline)
            time.sleep(0.05)
        end = (journal_figures(state.database_url), rss_by_process(up.pid))
        show(f"end (after {args.minutes:g} min, {sent} signals sent)", *end)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(up.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(120)
    assert baseline is not None
    rss_ratio = ratio(sum(end[1].values()), sum(baseline[1].values()), 3)
    db_ratio = ratio(end[0]["db_bytes"], baseline[0]["db_bytes"], 3)
    print(f"RSS end/baseline {rss_ratio} " + verdict(rss_ratio, 1.2, higher_is_better=False))
    print(f"DB size end/baseline {db_ratio} " + verdict(db_ratio, 1.5, higher_is_better=False))
    harness.emit(
        {
            "soak_rss_growth_ratio": rss_ratio,
            "soak_db_growth_ratio": db_ratio,
            "soak_minutes": args.minutes,
            "soak_rate_per_s": args.rate,
            "soak_delegates": args.delegates,
            "soak_signals_sent": sent,
            "soak_signals_sent_per_s": round(sent / (args.minutes * 60), 1),
            "soak_pending_or_claimed_at_end": end[0]["pending_or_claimed"],
            "soak_rows_at_end": end[0]["rows"],
            "soak_db_mib_baseline": round(baseline[0]["db_bytes"] / 2**20, 1),
            "soak_db_mib_end": round(end[0]["db_bytes"] / 2**20, 1),
            "soak_rss_mib_baseline": round(sum(baseline[1].values()), 1),
            "soak_rss_mib_end": round(sum(end[1].values()), 1),
        }
    )


if __name__ == "__main__":
    main()
