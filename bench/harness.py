"""What every benchmark shares: its own embedded stores, percentiles, ratios, what it ran on, and
the final line of JSON.

Benchmarks run as modules from the repository root (``python -m bench.lane [--quick]``), so the
library and ``tests.support`` import without any path setup and ``bench/http.py`` cannot shadow the
standard library's ``http``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.stores import Stores, start_stores

ROOT = Path(__file__).resolve().parents[1]
QUICK = "--quick" in sys.argv


def data_dir(name: str) -> Path:
    """Where benchmark ``name`` keeps its embedded servers: apart from the test runs and from the
    other benchmarks (the ``.inner-plane-test*`` names are covered by .gitignore)."""
    configured = os.environ.get("INNER_PLANE_BENCH_DATA_DIR")
    return Path(configured) if configured else ROOT / f".inner-plane-test-bench-{name}"


@contextmanager
def stores(name: str) -> Iterator[Stores]:
    """Migrated PostgreSQL and Redis for one benchmark: embedded under ``data_dir(name)`` unless
    INNER_PLANE_DATABASE_URL / INNER_PLANE_REDIS_URL name servers; stopped at the end."""
    started = start_stores(data_dir(name))
    try:
        yield started
    finally:
        if started.services is not None:
            started.services.stop()


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank: an observed value, never an interpolation."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p99(values: Sequence[float]) -> float:
    return pct(values, 0.99)


def summary(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Median, p99 and count of one series (the shape every benchmark reports latencies in)."""
    return {
        "p50": round(median(values), digits),
        "p99": round(p99(values), digits),
        "n": len(values),
    }


def ratio(measured: float, baseline: float, digits: int = 3) -> float:
    """``measured / baseline``, rounded; a zero baseline is a broken run, not infinity."""
    if baseline == 0:
        raise ValueError("baseline is zero")
    return round(measured / baseline, digits)


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    met = value >= target if higher_is_better else value <= target
    sign = ">=" if higher_is_better else "<="
    return f"(target {sign} {target}: " + ("met)" if met else "MISSED)")


def host_loop_ms() -> float:
    """The fastest of three runs of a fixed pure-Python loop (a million additions), in ms: how
    fast this host runs the interpreter, to weigh absolute milliseconds measured on different
    hosts (shared hosts here have differed by two to three times; ratios need no such help)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for n in range(1_000_000):
            total += n
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def machine() -> dict[str, Any]:
    """What the figures ran on, so a reader can weigh them."""
    load1, _, _ = os.getloadavg()
    return {
        "machine": f"{os.cpu_count()} cores, shared; {platform.machine()} {platform.system()}",
        "python": platform.python_version(),
        "loadavg_1m_at_end": round(load1, 2),
        "host_loop_ms": host_loop_ms(),
        "quick": QUICK,
    }


def emit(figures: Mapping[str, Any]) -> None:
    """The last line of every benchmark: one JSON object holding every figure, plus what it ran
    on (the benchmark's own keys win)."""
    print(json.dumps({**machine(), **figures}), flush=True)
