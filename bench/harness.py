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


@contextmanager
def traced(service: str) -> Iterator[dict[str, int]]:
    """Tracing on in this process (``inner_plane.tracing``, every span sampled), exporting over
    OTLP/HTTP to a receiver in a process of its own (a collector must not take the measured
    process's CPU). Yields a dict that holds, after the block, how many spans the receiver got
    and how many requests it refused. Inside, ``tracing.switch`` turns it off and on. Once per
    process: the SDK, once set up, keeps its first exporter."""
    import subprocess
    import sys

    from inner_plane import tracing

    receiver = subprocess.Popen(
        [sys.executable, "-m", "tests.support.otlp"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdout is not None
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.stdout.readline().strip(),
        "OTEL_SERVICE_NAME": service,
        "OTEL_TRACES_SAMPLER": "always_on",
    }
    saved = {key: os.environ.get(key) for key in environ}
    os.environ.update(environ)
    exported: dict[str, int] = {}
    try:
        assert tracing.setup(service), "tracing did not switch on"
        yield exported
        tracing.switch(True)
        tracing.flush()
    finally:
        tracing.switch(False)
        received, _ = receiver.communicate("", timeout=30)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    exported.update(json.loads(received.strip().splitlines()[-1]))
