"""Benchmark of the conversation API (issue 23), in one run on the same stores:

  (a) turn accept: ``POST /v1/delegates/D/conversation/turns`` (person token, Idempotency-Key,
      journal insert, wake) one after another on a kept-alive connection; baseline: a bare
      FastAPI route on the same uvicorn that inserts one row with one statement; the two
      alternate over ten rounds (each side's samples pooled), so machine noise hits both alike;
  (b) delta relay: a reply delta published as the lane publishes it (``ReplyStream``) until an
      SSE client of the API reads it; baseline: a bare Redis pub/sub round trip; alternating
      over ten rounds as (a) does;
  (c) streams held: 1,000 concurrent SSE clients on one API process, every one receiving each
      delta; the relay p99 across all of them, and the API process's RSS growth.

The SSE clients of (b) and (c) are :class:`SseClient`, a lean reader on a bare connection: the
figure is the API's relay, and a heavier client in the same process (httpx: some hundred
microseconds an event) made the 1,000-stream figure the client's own backlog.

Prints medians and p99; the last line is one JSON object with ``turn_accept_p99_ms``,
``turn_accept_vs_bare_p99`` (target <= 2), ``delta_relay_p99_ms``,
``delta_relay_vs_pubsub_p99`` (target <= 3) and ``streams_held`` (with
``streams_relay_p99_ms`` <= 100 and ``streams_rss_growth_mb`` <= 150).

    .venv/bin/python -m bench.chat [--quick]
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

from bench import harness
from bench.harness import QUICK, ROOT, ratio, summary, verdict
from inner_plane.config import build_settings
from inner_plane.lane.reply_stream import ReplyStream
from inner_plane.people import directory
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.services.embedded import free_port
from inner_plane.signals.kinds import KindRegistry
from inner_plane.sources import person_auth
from tests.support.stores import Stores, truncate_all

TURNS = 300 if QUICK else 2_000
# Turn accept and bare insert, and the delta relay and pub/sub, alternate this many times.
ACCEPT_ROUNDS = 3 if QUICK else 10
DELTAS = 200 if QUICK else 1_000
STREAMS = 1_000
HELD_DELTAS = 20 if QUICK else 50
DELEGATE = "bench"
PATH = f"/v1/delegates/{DELEGATE}/conversation"


def serve(stores: Stores, app: str, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """One uvicorn process serving ``app`` (an ASGI factory), without a concurrency cap;
    ``extra``: more environment (settings)."""
    port = free_port()
    env = stores.env(
        **extra,
        INNER_PLANE_CHAT_TURNS_PER_MINUTE="100000000",
        # Room for the 1,000 streams of (c) (the defaults keep a process to 150, 10 per token).
        INNER_PLANE_API_STREAMS=str(STREAMS + 50),
        INNER_PLANE_API_STREAMS_PER_CREDENTIAL=str(STREAMS + 50),
    )
    log = (stores.data_dir / f"{app.split(':')[0]}.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", app, "--factory", "--port", str(port),
            "--log-level", "warning", "--no-access-log",
        ],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{app} did not start (see {log.name})")
        time.sleep(0.1)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def turn_accept(url: str, token: str, turns: int = TURNS) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for n in range(turns + 20):
            started = time.perf_counter()
            answer = client.post(
                f"{PATH}/turns",
                json={"text": f"turn {n}"},
                headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
            )
            elapsed = (time.perf_counter() - started) * 1000
            assert answer.status_code == 202, answer.text
            if n >= 20:  # warm-up
                times.append(elapsed)
    return times


def bare_insert(url: str, turns: int = TURNS) -> list[float]:
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for n in range(turns + 20):
            started = time.perf_counter()
            answer = client.post("/bare", json={"text": f"turn {n}"})
            elapsed = (time.perf_counter() - started) * 1000
            assert answer.status_code == 202, answer.text
            if n >= 20:
                times.append(elapsed)
    return times


class SseClient:
    """A lean server-sent-events client on a bare asyncio connection (HTTP/1.1, chunked), so
    that 1,000 of them in this one process read at the pace the API writes: httpx spends some
    hundred microseconds per event, which at 1,000 streams is the client's backlog, not the
    relay's. Calls ``on_event(kind, data)`` for each event."""

    def __init__(self, url: str, path: str, headers: dict[str, str]) -> None:
        address = url.removeprefix("http://")
        self.host, _, port = address.partition(":")
        self.port = int(port)
        self.request = (
            f"GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            + "\r\n"
        ).encode()

    async def run(self, on_event: Callable[[str, str], bool]) -> None:
        """Until ``on_event`` returns True or the stream ends."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(self.request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            assert status == 200, head[:200]
            assert b"transfer-encoding: chunked" in head.lower(), head[:400]
            pending = b""
            while True:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    return
                pending += (await reader.readexactly(size + 2))[:-2]
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    kind, data = "message", ""
                    for line in event.decode().split("\n"):
                        if line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: "):
                            data = line[6:]
                    if data and on_event(kind, data):
                        return
        finally:
            writer.close()


async def _hold(
    url: str, token: str, clients: int, deltas: int, runtime: Runtime
) -> tuple[list[float], int]:
    """``clients`` SSE streams; ``deltas`` deltas published one at a time, each stamped: the
    relay time of every delta at every client, and how many clients received every one."""
    received: list[float] = []
    ready = asyncio.Event()
    opened = 0
    done = asyncio.Event()
    counts = [0] * clients
    client = SseClient(url, f"{PATH}/stream", {"Authorization": f"Bearer {token}"})

    def reader(index: int) -> Callable[[str, str], bool]:
        def on_event(kind: str, data: str) -> bool:
            nonlocal opened
            if kind == "status" and counts[index] == 0:
                counts[index] = -1
                opened += 1
                if opened == clients:
                    ready.set()
            elif kind == "delta":
                sent = float(json.loads(data)["text"])
                received.append((time.time() - sent) * 1000)
                counts[index] -= 1
                if len(received) >= clients * deltas:
                    done.set()
                    return True
                if counts[index] <= -(deltas + 1):
                    return True
            return False

        return on_event

    tasks = [asyncio.create_task(client.run(reader(i))) for i in range(clients)]
    await asyncio.wait_for(ready.wait(), 300)
    stream = ReplyStream(runtime.redis, DELEGATE, uuid.uuid4(), uuid.uuid4())
    for _ in range(deltas):
        stream.text(1, repr(time.time()))
        # A model writes tens of deltas a second to one reply; 1,000 readers of one delegate
        # get them at a pace a person reads (the relay, not a backlog, is measured).
        await asyncio.sleep(0.25 if clients > 1 else 0.005)
    try:
        await asyncio.wait_for(done.wait(), 120)
    except TimeoutError:
        pass  # reported: the clients that got every delta are counted below
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return received, sum(1 for count in counts if count <= -(deltas + 1))


def pubsub_round_trip(redis_url: str, deltas: int = DELTAS) -> list[float]:
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("bench:pubsub")
    times: list[float] = []
    got = threading.Event()

    def read() -> None:
        # redis-py leaves PubSub.listen unannotated (a generator of message dicts).
        for message in pubsub.listen():  # type: ignore[no-untyped-call]
            times.append((time.time() - float(message["data"])) * 1000)
            got.set()
            if len(times) >= deltas:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.2)
    for _ in range(deltas):
        got.clear()
        client.publish("bench:pubsub", repr(time.time()))
        got.wait(5)
        time.sleep(0.005)
    reader.join(10)
    pubsub.close()
    return times


def main() -> None:
    with harness.stores("chat") as stores:
        truncate_all(stores.database_url)
        runtime = build_runtime(
            build_settings(
                database_url=stores.database_url,
                redis_url=stores.redis_url,
                data_dir=stores.data_dir,
            ),
            registry=KindRegistry(),
        )
        directory.add(runtime, DELEGATE, display_name="Bench")
        _record, token = person_auth.issue_token(runtime, DELEGATE, "bench")
        api, api_url = serve(stores, "inner_plane.asgi:create_app")
        bare, bare_url = serve(stores, "bench.chat_baseline:create_app")
        try:
            # Rounds alternate the two (which goes first too), each side's samples pooled: a
            # quiet or a noisy stretch of the shared machine then falls on both alike.
            accept: list[float] = []
            baseline: list[float] = []
            for round_no in range(ACCEPT_ROUNDS):
                sides: list[Callable[[], None]] = [
                    lambda: accept.extend(turn_accept(api_url, token, TURNS // ACCEPT_ROUNDS)),
                    lambda: baseline.extend(bare_insert(bare_url, TURNS // ACCEPT_ROUNDS)),
                ]
                for side in sides if round_no % 2 == 0 else reversed(sides):
                    side()
            # The relay and its baseline alternate too, each side's samples pooled.
            relay: list[float] = []
            pubsub: list[float] = []
            for round_no in range(ACCEPT_ROUNDS):
                measures: list[Callable[[], None]] = [
                    lambda: relay.extend(
                        asyncio.run(_hold(api_url, token, 1, DELTAS // ACCEPT_ROUNDS, runtime))[0]
                    ),
                    lambda: pubsub.extend(
                        pubsub_round_trip(stores.redis_url or "", DELTAS // ACCEPT_ROUNDS)
                    ),
                ]
                for measure in measures if round_no % 2 == 0 else reversed(measures):
                    measure()
            before = rss_mb(api.pid)
            held, complete = asyncio.run(_hold(api_url, token, STREAMS, HELD_DELTAS, runtime))
            after = rss_mb(api.pid)
        finally:
            for process in (api, bare):
                process.terminate()
                process.wait(20)
            runtime.engine.dispose()
    figures: dict[str, Any] = {
        "turn_accept": summary(accept),
        "bare_insert": summary(baseline),
        "delta_relay": summary(relay),
        "pubsub": summary(pubsub),
        "streams": summary(held),
    }
    accept_ratio = ratio(figures["turn_accept"]["p99"], figures["bare_insert"]["p99"])
    relay_ratio = ratio(figures["delta_relay"]["p99"], figures["pubsub"]["p99"])
    growth = round(after - before, 1)
    print(f"turn accept     ms {figures['turn_accept']}")
    print(f"bare insert     ms {figures['bare_insert']}")
    print(f"  ratio p99 {accept_ratio} {verdict(accept_ratio, 2.0, higher_is_better=False)}")
    print(f"delta relay     ms {figures['delta_relay']}")
    print(f"redis pub/sub   ms {figures['pubsub']}")
    print(f"  ratio p99 {relay_ratio} {verdict(relay_ratio, 3.0, higher_is_better=False)}")
    print(f"{STREAMS} streams relay ms {figures['streams']}; {complete} got every delta")
    print(f"  API RSS {before:.0f} -> {after:.0f} MB")
    streams_p99 = figures["streams"]["p99"]
    print(f"  relay p99 {verdict(streams_p99, 100.0, higher_is_better=False)}")
    print(f"  RSS growth {growth} MB {verdict(growth, 150.0, higher_is_better=False)}")
    harness.emit(
        {
            **figures,
            "turn_accept_p99_ms": figures["turn_accept"]["p99"],
            "turn_accept_vs_bare_p99": accept_ratio,
            "delta_relay_p99_ms": figures["delta_relay"]["p99"],
            "delta_relay_vs_pubsub_p99": relay_ratio,
            # Clients of the 1,000 that received every delta.
            "streams_held": complete,
            "streams_relay_p99_ms": streams_p99,
            "streams_rss_growth_mb": growth,
        }
    )


if __name__ == "__main__":
    main()
