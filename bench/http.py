"""Benchmark of the HTTP API (issue 6), in one run on the same stores:

  (a) http: accepted signals/s through ``POST /v1/signals`` of `inner-plane serve --workers 2`
      (bearer auth, rate limit, validation, grant, publish path), one signal per request and
      batches of 100;
  (b) bare: a bare FastAPI endpoint under uvicorn with 2 workers doing the same journal insert
      (same statement, same row) with no auth and no validation.

The load comes from this machine over loopback: an asyncio client holding a few keep-alive
connections, a bounded number of requests per measurement (and a time cap). Each round runs every
measurement once, interleaved, so machine noise hits them alike; figures are medians over the
rounds, with p99 request latency. The signals table is emptied between rounds.

The machine is shared (2 cores, other engineers' tests): the server workers, PostgreSQL, Redis
and this client all compete for them, so absolute figures move between runs; the ratios less.

    .venv/bin/python -m bench.http [--quick]

The last line is one JSON object with every figure, including ``http_single_vs_bare`` and
``http_batch_vs_bare`` (target >= 0.7).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from bench import harness
from bench.harness import QUICK, ROOT, median, p99, ratio
from inner_plane.runtime import get_runtime
from tests.support.stores import Stores

ROUNDS = 2 if QUICK else 3
SINGLE_REQUESTS = 600 if QUICK else 1_500
BATCH_REQUESTS = 40 if QUICK else 150
BATCH_SIZE = 100
CONCURRENCY = 16
TIME_CAP_S = 10.0
KIND = "external.bench.finished"
SOURCE = "external.bench"


# --- the bare baseline server (imported by its uvicorn workers as bench.http) -------------------


def _bare_row(signal: dict[str, Any]) -> dict[str, Any]:
    # The same row the publish path writes for this signal, with its policy defaults filled in.
    return {
        "id": uuid.uuid4(),
        "delegate_id": "default",
        "kind": signal.get("kind", KIND),
        "source": SOURCE,
        "mode": "next-turn",
        "requested_mode": None,
        "priority": 50,
        "data": signal.get("data", {}),
        "trust": "untrusted",
        "dedup_key": None,
        "max_attempts": 5,
        "caused_by": None,
        "occurred_at": None,
        "available_at": None,
        "expires_at": None,
    }


def create_bare_app() -> FastAPI:
    app = FastAPI()

    @app.post("/bare/signals")
    async def bare(request: Request) -> JSONResponse:
        document = json.loads(await request.body())
        signals = document.get("signals", [document])
        rows = [_bare_row(s) for s in signals]
        ids = await run_in_threadpool(get_runtime().signals.insert, rows)
        items = [{"id": str(i), "deduplicated": False} for i in ids]
        return JSONResponse({"signals": items} if "signals" in document else items[0], 201)

    return app


# --- load client ---------------------------------------------------------------------------------


async def _load(
    port: int, path: str, body: bytes, headers: dict[str, str], requests: int
) -> tuple[int, int, float, list[float]]:
    """(ok requests, failed requests, elapsed s, latencies s) for a bounded run."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += "Content-Type: application/json\r\n" + f"Content-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    request = head.encode() + body
    remaining = requests
    ok = failed = 0
    latencies: list[float] = []
    deadline = time.monotonic() + TIME_CAP_S

    async def connection() -> None:
        nonlocal remaining, ok, failed
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                started = time.perf_counter()
                writer.write(request)
                status_and_headers = await reader.readuntil(b"\r\n\r\n")
                lines = status_and_headers.decode("latin-1").split("\r\n")
                status = int(lines[0].split()[1])
                length = next(
                    int(line.split(":", 1)[1])
                    for line in lines[1:]
                    if line.lower().startswith("content-length:")
                )
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                if status in (200, 201):
                    ok += 1
                else:
                    failed += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(CONCURRENCY)))
    return ok, failed, time.perf_counter() - started, latencies


def load(
    port: int, path: str, body: bytes, headers: dict[str, str], requests: int
) -> tuple[int, int, float, list[float]]:
    return asyncio.run(_load(port, path, body, headers, requests))


# --- the run -------------------------------------------------------------------------------------


def in_process_breakdown(runtime: Any, processor: Any) -> dict[str, float]:
    """Where the time of one 100-signal batch goes, without HTTP (best of 5 x 10 calls, ms):
    the grant check and validation, the shared publish path, and the bare insert."""
    from inner_plane import logs
    from inner_plane.publish import publish_drafts
    from inner_plane.sources import grants

    raws = [{"kind": KIND, "data": {"build": n}} for n in range(BATCH_SIZE)]
    drafts = grants.admit(runtime, processor, raws, None, True)

    def best(call: Any) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(10):
                call()
            times.append((time.perf_counter() - started) / 10 * 1000)
        return round(min(times), 3)

    with open(os.devnull, "w") as sink:
        logs.configure(stream=sink)
        try:
            return {
                "inproc_batch_admit_ms": best(
                    lambda: grants.admit(runtime, processor, raws, None, True)
                ),
                "inproc_batch_publish_drafts_ms": best(lambda: publish_drafts(drafts, runtime)),
                "inproc_batch_bare_insert_ms": best(
                    lambda: runtime.signals.insert([_bare_row(r) for r in raws])
                ),
            }
        finally:
            logs._stream = None


def _wait_healthy(port: int, path: str, child: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"server exited:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"server did not start:\n{log.read_text()[-3000:]}")


def main() -> None:
    with harness.stores("http") as stores:
        benchmark(stores)


def benchmark(stores: Stores) -> None:
    from sqlalchemy import text

    from inner_plane.config import build_settings
    from inner_plane.runtime import build_runtime
    from inner_plane.services.embedded import free_port
    from inner_plane.signals.kinds import KindRegistry
    from inner_plane.sources import processors
    from tests.support.stores import truncate_all

    truncate_all(stores.database_url)
    settings = build_settings(database_url=stores.database_url, redis_url=stores.redis_url)
    runtime = build_runtime(settings, registry=KindRegistry())
    runtime.redis.flushdb()
    processor, token = processors.add(runtime, "bench", rate_limit=10_000_000)
    env = stores.env(INNER_PLANE_LOG_LEVEL="WARNING")
    logs_dir = Path(stores.data_dir) / "bench-http-logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    # The API logs one [inner-context] line per publication; both servers write theirs to a file.
    servers: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    commands = {
        "http": [sys.executable, "-m", "inner_plane", "serve", "--workers", "2", "--port"],
        "bare": [
            sys.executable, "-m", "uvicorn", "bench.http:create_bare_app", "--factory",
            "--workers", "2", "--no-access-log", "--log-level", "warning", "--port",
        ],
    }  # fmt: skip
    try:
        for name, command in commands.items():
            port = free_port()
            log = logs_dir / f"{name}.log"
            child = subprocess.Popen(
                [*command, str(port)],
                cwd=ROOT,
                env=env,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            servers[name] = (port, child)
            _wait_healthy(port, "/healthz" if name == "http" else "/docs", child, log)

        auth = {"Authorization": f"Bearer {token}"}
        one = json.dumps({"kind": KIND, "data": {"build": 1, "status": "green"}}).encode()
        batch = json.dumps(
            {"signals": [{"kind": KIND, "data": {"build": n}} for n in range(BATCH_SIZE)]}
        ).encode()
        targets = {
            "http_single": ("http", "/v1/signals", one, auth, SINGLE_REQUESTS, 1),
            "bare_single": ("bare", "/bare/signals", one, {}, SINGLE_REQUESTS, 1),
            "http_batch": ("http", "/v1/signals", batch, auth, BATCH_REQUESTS, BATCH_SIZE),
            "bare_batch": ("bare", "/bare/signals", batch, {}, BATCH_REQUESTS, BATCH_SIZE),
        }
        # Warm both workers of each server (connections, runtime, the token's scrypt check).
        for server, path, body, headers, _, _ in targets.values():
            load(servers[server][0], path, body, headers, 200)

        rates: dict[str, list[float]] = {name: [] for name in targets}
        lat: dict[str, list[float]] = {name: [] for name in targets}
        for round_no in range(ROUNDS):
            with runtime.engine.begin() as connection:
                connection.execute(text("TRUNCATE signals"))
            for name, (server, path, body, headers, requests, size) in targets.items():
                ok, failed, elapsed, latencies = load(
                    servers[server][0], path, body, headers, requests
                )
                if failed:
                    raise SystemExit(f"{name}: {failed} requests failed")
                rates[name].append(ok * size / elapsed)
                lat[name].extend(latencies)
                print(
                    f"round {round_no + 1} {name:12s} {ok * size / elapsed:9.0f} signals/s "
                    f"({ok} requests in {elapsed:.2f}s)",
                    flush=True,
                )
            stored = runtime.signals.count()
            print(f"round {round_no + 1}: {stored} signals in the journal", flush=True)
        breakdown = in_process_breakdown(runtime, processor)
    finally:
        for _, child in servers.values():
            child.terminate()
        for _, child in servers.values():
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()

    figures: dict[str, Any] = {}
    for name in targets:
        figures[f"{name}_signals_per_s"] = round(median(rates[name]), 1)
        figures[f"{name}_signals_per_s_min"] = round(min(rates[name]), 1)
        figures[f"{name}_p50_ms"] = round(median(lat[name]) * 1000, 2)
        figures[f"{name}_p99_ms"] = round(p99(lat[name]) * 1000, 2)
    figures["http_single_vs_bare"] = ratio(
        figures["http_single_signals_per_s"], figures["bare_single_signals_per_s"]
    )
    figures["http_batch_vs_bare"] = ratio(
        figures["http_batch_signals_per_s"], figures["bare_batch_signals_per_s"]
    )
    figures.update(breakdown)
    figures.update(
        rounds=ROUNDS,
        server_workers=2,
        concurrency=CONCURRENCY,
        batch_size=BATCH_SIZE,
        single_requests=SINGLE_REQUESTS,
        batch_requests=BATCH_REQUESTS,
    )
    for name in targets:
        print(
            f"{name:12s} median {figures[f'{name}_signals_per_s']:9.0f} signals/s  "
            f"p50 {figures[f'{name}_p50_ms']:7.2f} ms  p99 {figures[f'{name}_p99_ms']:7.2f} ms"
        )
    print(
        f"http/bare: single {figures['http_single_vs_bare']:.3f}, "
        f"batch {figures['http_batch_vs_bare']:.3f} (target >= 0.7)"
    )
    print(
        "in process, one batch of 100: admit {inproc_batch_admit_ms} ms, publish path "
        "{inproc_batch_publish_drafts_ms} ms, bare insert {inproc_batch_bare_insert_ms} ms".format(
            **breakdown
        )
    )
    harness.emit(figures)


if __name__ == "__main__":
    main()
