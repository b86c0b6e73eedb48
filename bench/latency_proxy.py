"""A loopback TCP proxy that adds a fixed delay to each direction: a network between the plane
and PostgreSQL or Redis, for the benchmarks (issue 30, point 2), and the wire's own count of
client-server round trips (what ``round_trips_per_activation`` reads).

Each byte read from one side is written to the other ``delay`` seconds after it was read, in
order; nothing else about the stream changes (no throttling, so a pipelined burst pays the delay
once). A round trip is counted per connection each time the client sends after the server's
last answer reached it: the number of times a client had to wait for the server, which is what
an added delay multiplies. A pipelined burst of statements is one round trip however many
statements it holds.

Threads, not asyncio: the selector of an event loop sleeps in whole milliseconds (epoll), which
would turn 0.5 ms into 1 ms; ``time.sleep`` keeps the delay within a few tens of microseconds.
Benchmarks run it in a process of its own (:func:`spawn`), so its threads never take the
measured process's GIL; a test may run it in-process (:class:`LatencyProxy`).

    .venv/bin/python -m bench.latency_proxy --delay-ms 1 pg=127.0.0.1:5432 redis=127.0.0.1:6379
      prints {"pg": <port>, "redis": <port>} and then answers "stats" / "reset" lines on stdin
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

CHUNK = 65536
# Where a proxy forwards to: (host, port), or the path of a unix socket (the embedded servers').
Target = tuple[str, int] | str


def connect(target: Target) -> socket.socket:
    if isinstance(target, str):
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.settimeout(10)
        server.connect(target)
    else:
        server = socket.create_connection(target, timeout=10)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server.settimeout(None)
    return server


@dataclass
class Counts:
    """What went through one named target since the last reset.

    ``round_trips``: PostgreSQL's own count where the target speaks its protocol (each simple
    Query and each Sync the client sends ends in one ReadyForQuery it waits for, however many
    statements a pipeline put before it); otherwise ``turns``. ``turns``: how many times the
    client sent after the server's last answer reached it (exact for a client that waits for
    each answer; a pipelining client that writes its pipeline in several pieces may be counted
    once per piece without a delay: with one, the pieces all arrive before any answer could)."""

    connections: int = 0
    round_trips: int = 0
    turns: int = 0
    client_bytes: int = 0
    server_bytes: int = 0


# PostgreSQL's untyped first messages: SSLRequest and GSSENCRequest are followed by another.
_NEGOTIATIONS = {80877103, 80877104}


class PostgresSyncs:
    """Counts the client's Query ('Q') and Sync ('S') messages in its byte stream: the points
    where it waits for ReadyForQuery."""

    def __init__(self) -> None:
        self.buffer = b""
        self.started = False

    def feed(self, data: bytes) -> int:
        self.buffer += data
        found = 0
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return found
                length = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) < length:
                    return found
                code = int.from_bytes(self.buffer[4:8], "big")
                self.buffer = self.buffer[length:]
                self.started = code not in _NEGOTIATIONS
                continue
            if len(self.buffer) < 5:
                return found
            length = int.from_bytes(self.buffer[1:5], "big")
            if len(self.buffer) < 1 + length:
                return found
            if self.buffer[:1] in (b"Q", b"S"):
                found += 1
            self.buffer = self.buffer[1 + length :]


@dataclass
class _Link:
    """One client connection's state: whether the server has answered since the client's last
    round trip began."""

    counts: Counts
    lock: threading.Lock
    answered: bool = True  # the first thing a client sends starts a round trip


class _Pipe:
    """One direction of one connection: a reader stamps what it reads, a writer delivers each
    chunk ``delay`` after its stamp."""

    def __init__(self, source: socket.socket, sink: socket.socket, delay: float) -> None:
        self.source, self.sink, self.delay = source, sink, delay
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.ready = threading.Condition()
        self.closed = False

    def read(self, on_chunk: Callable[[bytes], None]) -> None:
        try:
            while data := self.source.recv(CHUNK):
                stamp = time.perf_counter()
                on_chunk(data)
                if self.delay <= 0:
                    self._deliver(data)
                    continue
                with self.ready:
                    self.queue.append((stamp + self.delay, data))
                    self.ready.notify()
        except OSError:
            pass
        finally:
            with self.ready:
                self.closed = True
                self.ready.notify()
            if self.delay <= 0:
                self._shut()

    def write(self) -> None:
        """Only with a delay: deliver queued chunks when due, then shut the sink's side."""
        while True:
            with self.ready:
                while not self.queue and not self.closed:
                    self.ready.wait()
                if not self.queue:
                    break
                due, data = self.queue.popleft()
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not self._deliver(data):
                break
        self._shut()

    on_deliver: Callable[[], None] | None = None

    def _deliver(self, data: bytes) -> bool:
        if self.on_deliver is not None:
            self.on_deliver()
        try:
            self.sink.sendall(data)
        except OSError:
            return False
        return True

    def _shut(self) -> None:
        with contextlib.suppress(OSError):
            self.sink.shutdown(socket.SHUT_WR)


class LatencyProxy:
    """Listens on 127.0.0.1 (one port per target) and forwards to each target with ``delay_s``
    added one way (so ``2 * delay_s`` per round trip)."""

    def __init__(
        self, targets: Mapping[str, Target], delay_s: float, postgres: set[str] | None = None
    ) -> None:
        self.delay_s = delay_s
        # The targets that speak PostgreSQL's protocol (their round trips are counted by it).
        self.postgres = set(postgres if postgres is not None else {"pg"})
        self.targets = dict(targets)
        self._lock = threading.Lock()
        self._counts = {name: Counts() for name in self.targets}
        self._listeners: dict[str, socket.socket] = {}
        self.ports: dict[str, int] = {}
        self._stopped = threading.Event()

    def start(self) -> LatencyProxy:
        for name, target in self.targets.items():
            listener = socket.create_server(("127.0.0.1", 0))
            self._listeners[name] = listener
            self.ports[name] = listener.getsockname()[1]
            threading.Thread(
                target=self._accept, args=(name, listener, target), daemon=True
            ).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        for listener in self._listeners.values():
            with contextlib.suppress(OSError):
                listener.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stats(self) -> dict[str, Counts]:
        with self._lock:
            return {name: Counts(**vars(c)) for name, c in self._counts.items()}

    def reset(self) -> None:
        with self._lock:
            for counts in self._counts.values():
                counts.connections = counts.round_trips = counts.turns = 0
                counts.client_bytes = counts.server_bytes = 0

    def _accept(self, name: str, listener: socket.socket, target: Target) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = connect(target)
            except OSError:
                client.close()
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._counts[name].connections += 1
            self._serve(name, client, server)

    def _serve(self, name: str, client: socket.socket, server: socket.socket) -> None:
        link = _Link(self._counts[name], self._lock)
        syncs = PostgresSyncs() if name in self.postgres else None
        up = _Pipe(client, server, self.delay_s)
        down = _Pipe(server, client, self.delay_s)

        def client_sent(data: bytes) -> None:
            waits = None if syncs is None else syncs.feed(data)
            with link.lock:
                link.counts.client_bytes += len(data)
                if link.answered:
                    link.counts.turns += 1
                    link.answered = False
                    if waits is None:  # no protocol read: the turns are the round trips
                        link.counts.round_trips += 1
                if waits is not None:
                    link.counts.round_trips += waits

        def server_sent(data: bytes) -> None:
            with link.lock:
                link.counts.server_bytes += len(data)

        def answer_delivered() -> None:
            # Marked before the bytes leave, so the client's reply cannot be read first.
            with link.lock:
                link.answered = True

        down.on_deliver = answer_delivered
        threads = [
            threading.Thread(target=up.read, args=(client_sent,), daemon=True),
            threading.Thread(target=down.read, args=(server_sent,), daemon=True),
        ]
        if self.delay_s > 0:
            threads += [
                threading.Thread(target=up.write, daemon=True),
                threading.Thread(target=down.write, daemon=True),
            ]

        def close_when_done() -> None:
            for thread in threads:
                thread.join()
            for sock in (client, server):
                sock.close()

        for thread in threads:
            thread.start()
        threading.Thread(target=close_when_done, daemon=True).start()


# --- in a process of its own ------------------------------------------------------------------


@dataclass
class Spawned:
    """A proxy running in a child process: its ports, and its counts on request."""

    process: subprocess.Popen[str]
    ports: dict[str, int]
    delay_ms: float
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _ask(self, command: str) -> str:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        with self._lock:
            stdin.write(command + "\n")
            stdin.flush()
            return stdout.readline()

    def stats(self) -> dict[str, Counts]:
        return {name: Counts(**c) for name, c in json.loads(self._ask("stats")).items()}

    def reset(self) -> None:
        self._ask("reset")

    def url(self, name: str, url: str) -> str:
        """``url`` (a database or Redis URL) pointed at this proxy's port for ``name``."""
        return via(url, self.ports[name])

    def stop(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def target_of(url: str) -> Target:
    """Where a PostgreSQL or Redis URL points: a unix socket's path or (host, port)."""
    parts = urlsplit(url)
    if parts.scheme in ("unix", "redis+socket"):
        return parts.path
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    if socket_dir.startswith("/"):  # libpq's spelling of a unix socket directory
        return f"{socket_dir}/.s.PGSQL.{parts.port or 5432}"
    assert parts.hostname is not None, url
    default = 5432 if parts.scheme.startswith("postgres") else 6379
    return parts.hostname, parts.port or default


def via(url: str, port: int) -> str:
    """``url`` (PostgreSQL, Redis, or kombu's Redis broker) reaching its server through
    127.0.0.1:``port`` over TCP, with its user, database and other options kept."""
    parts = urlsplit(url)
    query = {k: v for k, v in parse_qs(parts.query).items() if k != "host"}
    if parts.scheme in ("unix", "redis+socket"):
        db = query.pop("db", ["0"])[0]
        return urlunsplit(("redis", f"127.0.0.1:{port}", f"/{db}", urlencode(query, True), ""))
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
    if parts.scheme.startswith("postgres"):
        query.setdefault("sslmode", ["disable"])  # no SSLRequest round trip at connect
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, True)))


@contextlib.contextmanager
def spawn(targets: Mapping[str, str], delay_ms: float) -> Iterator[Spawned]:
    """A proxy process in front of each named URL (``{"pg": database_url, ...}``), ``delay_ms``
    added one way; stopped on exit."""
    args = []
    for name, url in targets.items():
        target = target_of(url)
        where = target if isinstance(target, str) else f"{target[0]}:{target[1]}"
        args.append(f"{name}={where}")
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.latency_proxy", "--delay-ms", str(delay_ms), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    ports = json.loads(process.stdout.readline())
    spawned = Spawned(process, ports, delay_ms)
    try:
        yield spawned
    finally:
        spawned.stop()


def _serve_stdin(proxy: LatencyProxy, stdin: IO[str], stdout: IO[str]) -> None:
    print(json.dumps(proxy.ports), file=stdout, flush=True)
    for line in stdin:
        command = line.strip()
        if command == "stats":
            print(json.dumps({n: vars(c) for n, c in proxy.stats().items()}), file=stdout)
        elif command == "reset":
            proxy.reset()
            print("{}", file=stdout)
        else:
            print(json.dumps({"error": f"unknown command {command!r}"}), file=stdout)
        stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added one way, per side")
    parser.add_argument("targets", nargs="+", help="name=host:port")
    args = parser.parse_args()
    targets: dict[str, Target] = {}
    for spec in args.targets:
        name, _, where = spec.partition("=")
        host, _, port = where.rpartition(":")
        targets[name] = where if where.startswith("/") else (host, int(port))
    with LatencyProxy(targets, args.delay_ms / 1000) as proxy:
        _serve_stdin(proxy, sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
