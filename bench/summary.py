"""Run every benchmark and end with one table: each one's key figures next to their targets.

Each benchmark runs as its own process (``python -m bench.NAME``, the same flags), its output
passes through unchanged, and its last line (one JSON object, see bench/harness.py) is parsed.
A benchmark that fails, or prints no JSON, shows as such in the table; the exit status is that
of the first failure (a missed target is reported, not an error: figures move with the load of a
shared machine).

    .venv/bin/python -m bench.summary [--quick] [--only publish,lane]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from bench.harness import ROOT


@dataclass(frozen=True)
class Target:
    bench: str
    key: str
    target: float | None  # None: reported, no target set
    higher_is_better: bool = True
    # The figure of the same run the ratio is taken against, shown beside it.
    baseline: str | None = None

    def verdict(self, value: float) -> str:
        if self.target is None:
            return ""
        met = value >= self.target if self.higher_is_better else value <= self.target
        return "met" if met else "MISSED"

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return (">= " if self.higher_is_better else "<= ") + f"{self.target:g}"


# In the order the benchmarks run; the targets are the issues' (6 for the CLI, 11 for the UI,
# 25 for continuity, 15 for the rest).
BENCHES = (
    "publish",
    "lane",
    "lane_overhead",
    "compose",
    "continuity",
    "timers",
    "http",
    "ui",
    "cli",
    "growth",
    "operator_reads",
    "simulate",
    "capacity",
    "chaos",
    "chat",
    "channels",
    "make_test",
)
TARGETS = (
    Target("publish", "ingest_vs_raw", 0.95),
    Target("publish", "bulk_celery_vs_raw", 10.0),
    Target("publish", "bulk_direct_vs_executemany", 0.5),
    Target("lane", "overhead_p99_ms", 20.0, higher_is_better=False),
    # Issue 30: the wake's added latency over raw Celery's, also with the plane and its workers
    # behind bench/latency_proxy.py at 0.5 and 1 ms one way to PostgreSQL and Redis.
    Target("lane", "wake_added_p99_vs_celery_p99", 1.5, False, "raw_celery_p99_ms"),
    Target("lane", "wake_added_p99_vs_celery_p99_rtt0_5", 1.5, False, "raw_celery_p99_ms_rtt0_5"),
    Target("lane", "wake_added_p99_vs_celery_p99_rtt1", 1.5, False, "raw_celery_p99_ms_rtt1"),
    # The wake's two parts (docs/operations.md, "Where a wake's latency goes"): the publisher's
    # (until publish returns) and the rest (the activate's delivery, the lane up to its row).
    Target("lane", "wake_publisher_p99_ms", None, False, "raw_celery_p99_ms"),
    Target("lane", "wake_delivery_and_opening_p99_ms", None, False, "raw_celery_p99_ms"),
    Target("lane", "wake_publisher_p99_ms_rtt1", None, False, "raw_celery_p99_ms_rtt1"),
    Target("lane", "wake_delivery_and_opening_p99_ms_rtt1", None, False, "raw_celery_p99_ms_rtt1"),
    Target("lane", "round_trips_per_activation", 6.0, higher_is_better=False),
    Target("lane", "overhead_p99_ms_rtt1", 25.0, False, "overhead_p99_ms_rtt0"),
    Target("lane", "activations_per_s", None),
    Target("lane", "preempt_p99_ms", 250.0, higher_is_better=False),
    # The worst p99 of 100k and 1M journal rows (--quick: 20k).
    Target("lane_overhead", "overhead_p99_ms", 20.0, higher_is_better=False),
    # Issue 30: counted on the wire (PostgreSQL's Query and Sync messages, each waited for), and
    # the same activations with 0.5 and 1 ms added one way; the bare proxy (rtt0) is the baseline.
    Target("lane_overhead", "round_trips_per_activation", 6.0, higher_is_better=False),
    Target("lane_overhead", "redis_round_trips_per_activation", None),
    Target("lane_overhead", "overhead_p99_ms_rtt0_5", None, False, "overhead_p99_ms_rtt0"),
    Target("lane_overhead", "overhead_p99_ms_rtt1", 25.0, False, "overhead_p99_ms_rtt0"),
    # Issue 28: activation overhead p50 with tracing exporting over tracing off, same process.
    Target("lane_overhead", "otel_overhead_ratio", 1.1, False, "otel_off_overhead_p50_ms"),
    Target("lane_overhead", "otel_cpu_ratio", None),
    Target("compose", "compose_p99_ms", 25.0, higher_is_better=False),
    Target("compose", "compose_vs_fts_p99", 3.0, higher_is_better=False),
    Target("continuity", "compose_p99_ms", None),
    Target("continuity", "compose_history_growth_p99", 1.25, higher_is_better=False),
    Target("continuity", "compaction_overhead_p99_ms", None),
    Target("continuity", "tokens_per_activation_flatness", 1.2, higher_is_better=False),
    # Issue 15's target for it (<= 3) was under the tick's own SQL floor; issue 30 measures the
    # process's share against that floor instead (tick_vs_sql_floor_p99 below).
    Target("timers", "tick_vs_query_p99", None, higher_is_better=False),
    # The tick's own SQL alone (read and write, no Python) over the same query: the floor under
    # tick_vs_query_p99 (docs/timers.md).
    Target("timers", "tick_sql_vs_query_p50", None),
    Target("timers", "tick_sql_vs_query_p99", None),
    # Issue 30: the tick over its own SQL in the same run (the process's share on top).
    Target("timers", "tick_vs_sql_floor_p99", 1.5, False, "tick_sql_p99_ms"),
    Target("http", "http_single_vs_bare", None),
    Target("http", "http_batch_vs_bare", 0.7),
    # A valid client's p99 during a storm of bad credentials (rotating X-Forwarded-For
    # included) over its p99 without one; the load average is reported beside it.
    Target("http", "auth_storm_p99_ratio", 2.0, higher_is_better=False),
    Target("http", "auth_storm_loadavg_1m", None),
    # One processor opening streams at its full rate: /healthz and an operator read go on.
    Target("http", "exhaustion_healthz_p99_ms", 100.0, higher_is_better=False),
    Target("http", "exhaustion_read_p99_ms", 100.0, higher_is_better=False),
    Target("ui", "live_p99_ms", None),
    Target("ui", "live_vs_notify_p99", 3.0, higher_is_better=False),
    Target("ui", "timeline_page_p99_ms", 50.0, higher_is_better=False),
    Target("ui", "publish_trigger_cost_ratio", None),
    Target("cli", "cli_vs_python_start", 6.0, higher_is_better=False),
    # Beside each, its floor: a process that only imports the libraries the command cannot do
    # without (psycopg and pydantic-settings; redis-py too for status).
    Target(
        "cli",
        "cli_show_vs_python_start",
        6.0,
        higher_is_better=False,
        baseline="cli_floor_vs_python_start",
    ),
    Target(
        "cli",
        "cli_status_vs_python_start",
        6.0,
        higher_is_better=False,
        baseline="cli_status_floor_vs_python_start",
    ),
    # The same as CPU time (user + system): what the load of a shared machine moves least.
    Target("cli", "cli_show_cpu_vs_python", None, baseline="cli_floor_cpu_vs_python"),
    Target("cli", "cli_status_cpu_vs_python", None, baseline="cli_status_floor_cpu_vs_python"),
    Target("cli", "python_start_ms", None),
    # Bare python's start is a developer checkout's: about half of it is the editable install's
    # import finder, which a production (wheel) install does not load. The interpreter alone, and
    # `signals show` over it, say what the ratios are against such an install.
    Target("cli", "editable_finder_share", None, False, "python_start_ms"),
    Target("cli", "cli_show_vs_interpreter_start", None, False, "interpreter_start_ms"),
    # What each floor is made of: each library alone (no target; what the commands' targets sit on).
    Target("cli", "cli_psycopg_floor_vs_python_start", None, False, "python_start_ms"),
    Target("cli", "cli_settings_floor_vs_python_start", None, False, "python_start_ms"),
    Target("growth", "growth_max_ratio", 1.25, higher_is_better=False),
    Target("growth", "growth_max_p99_ratio", 1.5, higher_is_better=False),
    # Issue 30: 100k delegates over 1k (the baseline, the same operations in the same run).
    Target("growth", "delegate_growth_max_ratio", 1.25, higher_is_better=False),
    Target("growth", "delegate_growth_max_ratio_operation", None),
    Target("growth", "delegate_growth_max_p99_ratio", 1.5, higher_is_better=False),
    Target("growth", "delegate_growth_max_p99_ratio_operation", None),
    # Issue 30: `status`'s and a scrape's journal reads sent together, across 1 ms one way,
    # against the same reads one round trip each (counted on the wire).
    Target(
        "operator_reads",
        "status_reads_round_trips",
        1.0,
        False,
        "status_reads_round_trips_one_by_one",
    ),
    Target(
        "operator_reads",
        "scrape_reads_round_trips",
        1.0,
        False,
        "scrape_reads_round_trips_one_by_one",
    ),
    Target("operator_reads", "status_reads_vs_one_by_one_p50_rtt1", None, False),
    Target("operator_reads", "scrape_reads_vs_one_by_one_p50_rtt1", None, False),
    # The policy simulator (issue 26): replay speed and memory on 1M signals (--quick: 100k),
    # and how soon running processes follow a new policy version.
    Target("simulate", "simulate_signals_per_s", 50_000.0),
    # The replay's CPU (every process, reader threads included): what the load moves least.
    Target("simulate", "simulate_signals_per_cpu_s", None),
    Target("simulate", "simulate_rss_mb", 300.0, higher_is_better=False),
    Target("simulate", "simulate_rss_growth_mb", None),
    Target("simulate", "policy_pickup_p99_s", 5.0, higher_is_better=False),
    # The capacity model's figures (docs/operations.md): measured for sizing, no target.
    Target("capacity", "signals_per_s_per_signals_worker", None),
    Target("capacity", "activations_per_s_per_activation_worker", None),
    Target("capacity", "journal_bytes_per_1000_signals", None),
    # Issue 31: a killed holder's claims without new traffic; the plane after `pg_ctl restart`.
    Target("chaos", "claims_recovered_after_kill_p99_s", 10.0, higher_is_better=False),
    Target("chaos", "plane_back_after_pg_restart_s", 30.0, higher_is_better=False),
    Target("chaos", "lost_after_redis_kill", 0.0, higher_is_better=False),
    Target("chat", "turn_accept_p99_ms", None),
    Target("chat", "turn_accept_vs_bare_p99", 2.0, higher_is_better=False),
    Target("chat", "delta_relay_p99_ms", None),
    Target("chat", "delta_relay_vs_pubsub_p99", 3.0, higher_is_better=False),
    Target("chat", "streams_held", 1000.0),
    Target("chat", "streams_relay_p99_ms", 100.0, higher_is_better=False),
    Target("chat", "streams_rss_growth_mb", 150.0, higher_is_better=False),
    # Issue 24: a mail appended to the mailbox until its turn is journaled, under IDLE; a signed
    # text's webhook over a bare route that inserts one row.
    Target("channels", "mail_to_turn_p99_s", 2.0, higher_is_better=False),
    Target("channels", "mail_to_turn_vs_idle_p99", None),
    Target("channels", "sms_webhook_p99_ms", None),
    Target("channels", "sms_webhook_vs_bare_p99", 2.0, higher_is_better=False),
    # Issue 30: `make test` on a fresh clone, the install included (--quick: unit tests only),
    # and how many tests it ran (both legs; not fewer than before the suite was parallelised).
    Target("make_test", "make_test_s", 420.0, higher_is_better=False),
    Target("make_test", "tests_run", None),
)


def last_json(output: str) -> dict[str, Any] | None:
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                return None
            return parsed if isinstance(parsed, dict) else None
    return None


def run(name: str, flags: list[str]) -> tuple[int, dict[str, Any] | None]:
    """Run one benchmark, echoing its output as it comes; return its status and last JSON."""
    print(f"\n=== bench.{name} {' '.join(flags)}", flush=True)
    process = subprocess.Popen(
        [sys.executable, "-m", f"bench.{name}", *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        sys.stdout.write(line)
        lines.append(line)
    status = process.wait()
    return status, last_json("".join(lines))


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def table(results: dict[str, tuple[int, dict[str, Any] | None]]) -> list[str]:
    rows = [("benchmark", "figure", "value", "target", "", "baseline (same run)")]
    for target in TARGETS:
        if target.bench not in results:
            continue
        status, figures = results[target.bench]
        if figures is None or target.key not in figures:
            why = f"failed (exit {status})" if status else "not reported"
            rows.append((target.bench, target.key, "-", target.target_text(), why, ""))
            continue
        value = figures[target.key]
        verdict = target.verdict(value) if isinstance(value, int | float) else ""
        baseline = ""
        if target.baseline is not None:
            baseline = f"{target.baseline} {_shown(figures.get(target.baseline, '-'))}"
        rows.append(
            (target.bench, target.key, _shown(value), target.target_text(), verdict, baseline)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    out = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    # What each ran on, one line per figure: the load, and the host's speed (absolute
    # milliseconds scale with it; compare them between runs only at like speeds).
    for key, label in (
        ("loadavg_1m_at_end", f"load average (1 min) at the end of each, on {os.cpu_count()} "
                              "shared cores"),
        ("host_loop_ms", "host speed, a million Python additions in ms (lower is faster)"),
    ):  # fmt: skip
        each = [
            f"{name} {figures[key]}"
            for name, (_, figures) in results.items()
            if figures is not None and figures.get(key) is not None
        ]
        if each:
            out.append(f"{label}: " + ", ".join(each))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's --quick mode")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(BENCHES)
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {', '.join(unknown)}")
    flags = ["--quick"] if args.quick else []
    results: dict[str, tuple[int, dict[str, Any] | None]] = {}
    for name in names:
        if not (ROOT / "bench" / f"{name}.py").exists():
            print(f"\n=== bench.{name}: not in this tree, skipped", flush=True)
            continue
        results[name] = run(name, flags)
    print("\n" + "\n".join(table(results)))
    failed = [status for status, _ in results.values() if status]
    sys.exit(failed[0] if failed else 0)


if __name__ == "__main__":
    main()
