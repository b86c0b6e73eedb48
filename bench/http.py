"""Benchmark of the HTTP API (issue 6), in one run on the same stores:

  (a) http: accepted signals/s through ``POST /v1/signals`` of `inner-plane serve --workers 2`
      (bearer auth, rate limit, validation, grant, publish path), one signal per request and
      batches of 100;
  (b) bare: a bare FastAPI endpoint under uvicorn with 2 workers doing the same journal insert
      (same statement, same row) with no auth and no validation;
  (c) auth: what failed authentications cost. ``auth_unknown_vs_known_p50`` is the median
      latency of a bearer token naming no processor over that of a registered name with a wrong
      token (target 0.8 to 1.25: timing must not tell names apart); each request comes from its
      own loopback address (a socket bound to 127.x.y.z: the throttle is keyed on the peer, never
      on X-Forwarded-For) with its own token, so neither the throttle nor the negative cache
      answers it. ``auth_storm_p99_ratio`` is the p99 latency of one valid client publishing
      sequentially while 16 threads send bad tokens from another address, each with a new
      forged X-Forwarded-For, over its p99 without them (target <= 2), with the load average
      beside it (``auth_storm_loadavg_1m``, the highest of the storm phases). Quiet and storm
      phases alternate four times and each condition's samples are pooled; this runs before
      the throughput rounds, on a machine not still settling from them.

The load comes from this machine over loopback: an asyncio client holding a few keep-alive
connections, a bounded number of requests per measurement (and a time cap). Each round runs every
measurement once, each http measurement next to its bare one, http first in odd rounds and bare
first in even ones, so machine noise and whatever the previous measurement left behind (dirty
pages, autovacuum) hit both alike; rates are medians over the rounds, with p99 request latency,
and the two ratios are the medians of each round's own ratio (http against the bare endpoint
measured in the same seconds). The signals table is emptied between rounds.

The machine is shared (2 cores, other engineers' tests): the server workers, PostgreSQL, Redis
and this client all compete for them, so absolute figures move between runs; the ratios less.

The bare server's two workers share one listening socket (uvicorn's), and the first worker to
wake accepts every connection waiting: a measurement's 16 connections, opened at once, often all
go to one worker. `inner-plane serve --workers 2` gives each worker a socket of its own
(inner_plane/http/listeners.py); before it did, its connections all went to one worker in 5 of 6
measurements of a probe (14,000 to 17,000 signals/s against 22,000 when split 7 and 9). Each
measurement's split is printed and kept (``<name>_connections_by_worker``, per round, most
first): read a round's ratio with the splits of its two servers.

    .venv/bin/python -m bench.http [--quick]

The last line is one JSON object with every figure, including ``http_single_vs_bare`` and
``http_batch_vs_bare`` (target >= 0.7), ``auth_unknown_vs_known_p50`` and
``auth_storm_p99_ratio``, and (d): the p99 of /healthz and of an operator read while one
processor opens MCP streams at its full rate (``exhaustion_healthz_p99_ms``,
``exhaustion_read_p99_ms``, target <= 100; quiet figures beside them; 10 s with --quick, two
minutes without). ``--auth-only`` runs (c) and (d) alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from bench import harness
from bench.harness import QUICK, ROOT, median, p99, ratio
from inner_plane.journal.signals.store import NewSignal
from inner_plane.runtime import get_runtime
from tests.support.processes import children_of
from tests.support.sockets import ESTABLISHED, holders
from tests.support.stores import Stores

AUTH_ONLY = "--auth-only" in sys.argv
ROUNDS = 3 if QUICK else 5
SINGLE_REQUESTS = 600 if QUICK else 1_500
# About 0.7 s (quick) and 2 s of load per batch measurement: a shorter window is one stall of
# the shared machine away from a different ratio.
BATCH_REQUESTS = 100 if QUICK else 300
BATCH_SIZE = 100
CONCURRENCY = 16
TIME_CAP_S = 10.0
KIND = "external.bench.finished"
SOURCE = "external.bench"


# --- the bare baseline server (imported by its uvicorn workers as bench.http) -------------------


def _bare_row(signal: dict[str, Any]) -> NewSignal:
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
        "traceparent": None,
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


def connections_by_worker(server_pid: int, port: int) -> list[int]:
    """How many of the established connections to ``port`` each worker of the server at
    ``server_pid`` holds, most first (Linux's /proc; empty elsewhere). Recorded per
    measurement so a ratio can be read with its split (module docstring)."""
    return sorted(holders(children_of(server_pid), port, ESTABLISHED).values(), reverse=True)


def load_and_split(
    server_pid: int, port: int, path: str, body: bytes, headers: dict[str, str], requests: int
) -> tuple[tuple[int, int, float, list[float]], list[int]]:
    """:func:`load`, with the connections' split over the server's workers read once while the
    load runs (its connections open first and stay open to the end)."""
    split: list[int] = []

    def read_split() -> None:
        time.sleep(0.25)
        split.extend(connections_by_worker(server_pid, port))

    reader = threading.Thread(target=read_split, daemon=True)
    reader.start()
    result = load(port, path, body, headers, requests)
    reader.join()
    return result, split


# --- the run -------------------------------------------------------------------------------------


def in_process_breakdown(runtime: Any, processor: Any) -> dict[str, float]:
    """Where the time of one 100-signal batch goes, without HTTP (best of 5 x 10 calls, ms):
    the grant check and validation, the shared publish path, and the bare insert."""
    from inner_plane import logs
    from inner_plane.publish import publish_drafts
    from inner_plane.sources import grants

    raws = [{"kind": KIND, "data": {"build": n}} for n in range(BATCH_SIZE)]
    # Every publish call gets batches of its own, as requests do (a draft's random id is made at
    # admission: publishing the same drafts again would time the duplicate path).
    fresh = iter([grants.admit(runtime, processor, raws, None, True) for _ in range(50)])

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
                "inproc_batch_publish_drafts_ms": best(
                    lambda: publish_drafts(next(fresh), runtime)
                ),
                "inproc_batch_bare_insert_ms": best(
                    lambda: runtime.signals.insert([_bare_row(r) for r in raws])
                ),
            }
        finally:
            logs._stream = None


AUTH_SAMPLES = 40 if QUICK else 80
STORM_THREADS = 16
STORM_SAMPLES = 200 if QUICK else 400
STORM_PHASES = 4  # quiet and storm alternate this many times


def _address(n: int) -> str:
    """A loopback address of its own for ``n`` (all of 127.0.0.0/8 reaches this machine)."""
    return f"127.{(n >> 16) & 255}.{(n >> 8) & 255}.{max(1, n & 255)}"


# The storm: threads sending bad tokens from their own loopback address, each request with a
# new forged X-Forwarded-For, until a line arrives on stdin; then the statuses, as JSON.
ATTACKER = """
import json, secrets, sys, threading
import httpx
url, threads = sys.argv[1], int(sys.argv[2])
stop = threading.Event()
statuses = []
def attack():
    transport = httpx.HTTPTransport(local_address="127.66.0.1")
    with httpx.Client(timeout=30, transport=transport) as client:
        while not stop.is_set():
            n = secrets.randbelow(1 << 24)
            headers = {
                "Authorization": "Bearer ipt.bench." + secrets.token_urlsafe(32),
                "X-Forwarded-For": f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}",
            }
            statuses.append(client.post(url, json={"kind": "x"}, headers=headers).status_code)
workers = [threading.Thread(target=attack) for _ in range(threads)]
for worker in workers:
    worker.start()
sys.stdin.readline()
stop.set()
for worker in workers:
    worker.join()
print(json.dumps(statuses))
"""


def auth_figures(port: int, token: str) -> dict[str, Any]:
    """(c): failed-authentication cost by name, and a bad-token storm's effect on a valid client."""
    import secrets

    import httpx

    url = f"http://127.0.0.1:{port}/v1/signals"
    one = {"kind": KIND, "data": {"build": 1}}
    unknown: list[float] = []
    known: list[float] = []
    with httpx.Client(timeout=30) as client:
        for n in range(2 * AUTH_SAMPLES + 4):
            # Alternate, so machine noise hits both alike; fresh token and address every time.
            name = "nobody-here" if n % 2 else "bench"
            headers = {"Authorization": f"Bearer ipt.{name}.{secrets.token_urlsafe(32)}"}
            transport = httpx.HTTPTransport(local_address=_address(1_000 + n))
            with httpx.Client(timeout=30, transport=transport) as own:
                own.get(f"http://127.0.0.1:{port}/healthz")  # connected before the clock
                started = time.perf_counter()
                status = own.post(url, json=one, headers=headers).status_code
                elapsed = time.perf_counter() - started
            if status != 401:
                raise SystemExit(f"auth: a bad token answered {status}, not 401")
            if n >= 4:  # the first few warm both workers' paths
                (unknown if n % 2 else known).append(elapsed)

        valid = {"Authorization": f"Bearer {token}"}

        def valid_latencies(samples: int) -> list[float]:
            latencies = []
            for _ in range(samples):
                started = time.perf_counter()
                status = client.post(url, json=one, headers=valid).status_code
                latencies.append(time.perf_counter() - started)
                if status != 201:
                    raise SystemExit(f"auth storm: a valid request answered {status}")
            return latencies

        valid_latencies(STORM_SAMPLES)  # warm: the token's one scrypt check in each worker
        # Quiet and storm phases alternate, each condition's samples pooled: a drift of the
        # shared machine (another process, a checkpoint) then lands on both alike, not on
        # whichever phase happened to run during it.
        quiet: list[float] = []
        storm: list[float] = []
        refused: list[int] = []
        loads: list[float] = []
        for _ in range(STORM_PHASES):
            quiet.extend(valid_latencies(STORM_SAMPLES // STORM_PHASES))
            # The attackers run in a process of their own: in this one they would take the
            # GIL from the valid client's timing, which is not what the server does to it.
            attackers = subprocess.Popen(
                [sys.executable, "-c", ATTACKER, url, str(STORM_THREADS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=ROOT,
            )
            time.sleep(1.0)
            try:
                storm.extend(valid_latencies(STORM_SAMPLES // STORM_PHASES))
                loads.append(os.getloadavg()[0])
            finally:
                output, _ = attackers.communicate(b"stop\n", timeout=120)
            refused.extend(int(status) for status in json.loads(output))
        load_during_storm = max(loads)
    if any(status not in (401, 429) for status in refused):
        raise SystemExit("auth storm: a bad token was not refused")
    return {
        "auth_unknown_p50_ms": round(median(unknown) * 1000, 2),
        "auth_known_wrong_p50_ms": round(median(known) * 1000, 2),
        "auth_unknown_vs_known_p50": ratio(median(unknown), median(known)),
        "auth_valid_p99_quiet_ms": round(p99(quiet) * 1000, 2),
        "auth_valid_p99_storm_ms": round(p99(storm) * 1000, 2),
        "auth_storm_p99_ratio": ratio(p99(storm), p99(quiet)),
        "auth_storm_loadavg_1m": round(load_during_storm, 2),
        "auth_storm_requests": len(refused),
        "auth_storm_throttled": sum(1 for status in refused if status == 429),
    }


EXHAUSTION_S = 10.0 if QUICK else 120.0
EXHAUSTION_OPENERS = 4


def _status(sock: Any) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            return 0
        head += chunk
    return int(head.split(b" ", 2)[1])


def exhaustion_figures(port: int, processor_token: str, operator_token: str) -> dict[str, Any]:
    """(d): one processor opening MCP streams at its full rate (threads that open a stream,
    keep it if it is accepted and open the next at once) while one client reads /healthz and
    an operator read in turn: their p99 during the attempt and without it."""
    import socket
    import threading

    import httpx

    head = (
        f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {processor_token}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    operator = {"Authorization": f"Bearer {operator_token}"}

    def probe(seconds: float) -> tuple[list[float], list[float]]:
        health: list[float] = []
        read: list[float] = []
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            client.get("/v1/delegates", headers=operator)  # the token's one scrypt check
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for path, headers, into in (
                    ("/healthz", {}, health), ("/v1/delegates", operator, read),
                ):  # fmt: skip
                    started = time.perf_counter()
                    status = client.get(path, headers=headers).status_code
                    into.append(time.perf_counter() - started)
                    if status != 200:
                        raise SystemExit(f"exhaustion: {path} answered {status}")
        return health, read

    quiet_health, quiet_read = probe(EXHAUSTION_S / 4)
    stop = threading.Event()
    accepted: list[int] = []
    refused: list[int] = []

    def opener() -> None:
        held = []
        try:
            while not stop.is_set():
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(head)
                status = _status(sock)
                if status == 200:
                    held.append(sock)
                    accepted.append(status)
                else:
                    refused.append(status)
                    sock.close()
        finally:
            for sock in held:
                sock.close()

    threads = [threading.Thread(target=opener) for _ in range(EXHAUSTION_OPENERS)]
    for thread in threads:
        thread.start()
    try:
        health, read = probe(EXHAUSTION_S)
        load_during = os.getloadavg()[0]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return {
        "exhaustion_healthz_p99_quiet_ms": round(p99(quiet_health) * 1000, 2),
        "exhaustion_healthz_p99_ms": round(p99(health) * 1000, 2),
        "exhaustion_read_p99_quiet_ms": round(p99(quiet_read) * 1000, 2),
        "exhaustion_read_p99_ms": round(p99(read) * 1000, 2),
        "exhaustion_streams_accepted": len(accepted),
        "exhaustion_streams_refused": len(refused),
        "exhaustion_loadavg_1m": round(load_during, 2),
    }


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

    from inner_plane import operators
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
    _, operator_token = operators.add(runtime, "bench")
    # The deployed default of the throttled tarpit (the test suite's stores turn it off).
    env = stores.env(INNER_PLANE_LOG_LEVEL="WARNING", INNER_PLANE_API_THROTTLED_DELAY_S="1")
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
    if AUTH_ONLY:
        del commands["bare"]
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
        if AUTH_ONLY:
            auth_only = auth_figures(servers["http"][0], token)
            auth_only.update(exhaustion_figures(servers["http"][0], token, operator_token))
            print(json.dumps(auth_only, indent=1))
            harness.emit(auth_only)
            return

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
        # The storm first: after the throughput rounds the machine is still settling (the
        # load average, PostgreSQL writing out what they inserted), which is not the storm's.
        breakdown = auth_figures(servers["http"][0], token)
        # Warm both workers of each server (connections, runtime, the token's scrypt check).
        for server, path, body, headers, _, _ in targets.values():
            load(servers[server][0], path, body, headers, 200)

        rates: dict[str, list[float]] = {name: [] for name in targets}
        lat: dict[str, list[float]] = {name: [] for name in targets}
        splits: dict[str, list[list[int]]] = {name: [] for name in targets}
        for round_no in range(ROUNDS):
            with runtime.engine.begin() as connection:
                connection.execute(text("TRUNCATE signals"))
            order = ["http_single", "bare_single", "http_batch", "bare_batch"]
            if round_no % 2:
                order = ["bare_single", "http_single", "bare_batch", "http_batch"]
            for name in order:
                server, path, body, headers, requests, size = targets[name]
                port, child = servers[server]
                (ok, failed, elapsed, latencies), split = load_and_split(
                    child.pid, port, path, body, headers, requests
                )
                if failed:
                    raise SystemExit(f"{name}: {failed} requests failed")
                rates[name].append(ok * size / elapsed)
                lat[name].extend(latencies)
                splits[name].append(split)
                print(
                    f"round {round_no + 1} {name:12s} {ok * size / elapsed:9.0f} signals/s "
                    f"({ok} requests in {elapsed:.2f}s; connections by worker {split})",
                    flush=True,
                )
            stored = runtime.signals.count()
            print(f"round {round_no + 1}: {stored} signals in the journal", flush=True)
        breakdown.update(in_process_breakdown(runtime, processor))
        breakdown.update(exhaustion_figures(servers["http"][0], token, operator_token))
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
        figures[f"{name}_connections_by_worker"] = splits[name]
    for shape in ("single", "batch"):
        per_round = [
            h / b for h, b in zip(rates[f"http_{shape}"], rates[f"bare_{shape}"], strict=True)
        ]
        figures[f"http_{shape}_vs_bare"] = round(median(per_round), 3)
        figures[f"http_{shape}_vs_bare_rounds"] = [round(r, 3) for r in per_round]
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
        "auth: unknown/known p50 {auth_unknown_vs_known_p50} (target 0.8 to 1.25); valid p99 "
        "{auth_valid_p99_quiet_ms} ms quiet, {auth_valid_p99_storm_ms} ms in a bad-token storm, "
        "ratio {auth_storm_p99_ratio} (target <= 2) at load average {auth_storm_loadavg_1m}".format(
            **breakdown
        )
    )
    print(
        "stream exhaustion ({exhaustion_streams_accepted} accepted, "
        "{exhaustion_streams_refused} refused): /healthz p99 {exhaustion_healthz_p99_ms} ms "
        "(quiet {exhaustion_healthz_p99_quiet_ms}), operator read p99 {exhaustion_read_p99_ms} ms "
        "(quiet {exhaustion_read_p99_quiet_ms}), load average {exhaustion_loadavg_1m}".format(
            **breakdown
        )
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
