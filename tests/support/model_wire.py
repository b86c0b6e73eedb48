"""What the strict local model servers share: an HTTP server in a thread, scripted faults
(429 with Retry-After, 500, a stream that stalls or trickles), SSE writing that notices the
moment a client closes its stream, and a record of every request and refusal.

A subclass says which path it serves, how it validates a request (raising :class:`WireError`
with the status and error body the real API answers) and which events it streams.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WireError(Exception):
    """A refusal with the status code and ``{"error": {...}}`` body the real API sends."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass
class Fault:
    """One scripted misbehaviour, consumed by the next request.

    ``status`` 429 or 5xx answers that status (with ``retry_after`` as the Retry-After header
    when given); ``stall_s`` sends the headers then nothing for that long before streaming;
    ``event_delay_s`` trickles the stream's events that far apart."""

    status: int | None = None
    retry_after: str | None = None
    stall_s: float = 0.0
    event_delay_s: float = 0.0
    # Answer 200 with a refusal instead of the work asked for (a subclass says how).
    refuse: bool = False


def rate_limited(retry_after: str = "1") -> Fault:
    return Fault(status=429, retry_after=retry_after)


def server_error() -> Fault:
    return Fault(status=500)


def slow(event_delay_s: float = 0.0, stall_s: float = 0.0) -> Fault:
    return Fault(event_delay_s=event_delay_s, stall_s=stall_s)


def refusal() -> Fault:
    return Fault(refuse=True)


@dataclass
class Served:
    """One request as received, and what became of it."""

    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float  # time.monotonic()
    status: int = 200
    error: str | None = None
    path: str = ""
    closed_by_client_at: float | None = None  # the client closed the stream before its end
    completed: bool = False  # every event was written
    reply: Any = None  # the scripted reply it was answered with, if any
    # The connection of a stream being written (or stalled on): None once the stream ended.
    streaming_on: socket.socket | None = field(default=None, repr=False, compare=False)


@dataclass
class _Exchange:
    served: Served
    fault: Fault | None
    stream: bool
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _closed_by_peer(connection: socket.socket) -> bool:
    """Whether the other end has closed ``connection`` (without waiting or reading)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class ModelServer:
    path = "/v1/"
    # Further paths a subclass answers (answer_at says how).
    other_paths: tuple[str, ...] = ()

    def __init__(self, *, max_input_chars: int | None = None) -> None:
        self.faults: list[Fault] = []
        # Asked for a fault when ``faults`` is empty: per-request misbehaviour by content.
        self.fault_for: Callable[[dict[str, Any]], Fault | None] | None = None
        # Events of every stream this far apart unless a fault says otherwise.
        self.event_delay_s = 0.0
        self.max_input_chars = max_input_chars
        self.served: list[Served] = []
        self.last_scripted: Any = None  # set by answer() when it took a reply from the script
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                server._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    # --- for tests ---------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Bodies of the requests that were answered 200."""
        return [s.body for s in self.served if s.status == 200]

    @property
    def headers(self) -> list[dict[str, str]]:
        return [s.headers for s in self.served if s.status == 200]

    @property
    def refusals(self) -> list[Served]:
        return [s for s in self.served if s.status != 200]

    def wait_for(self, condition: Callable[[], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.1))
        return True

    @contextmanager
    def running(self) -> Iterator[Any]:
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()

    # --- for subclasses ----------------------------------------------------------------------

    def answer(self, body: dict[str, Any], stream: bool) -> tuple[dict[str, Any], list[Any]]:
        """Validate ``body`` (raise WireError) and return (the JSON answer, its SSE events as
        (event name or "", data) pairs)."""
        raise NotImplementedError

    def answer_at(
        self, path: str, body: dict[str, Any], stream: bool, fault: Fault | None
    ) -> tuple[dict[str, Any], list[Any]]:
        """Answer a request to ``path`` (one of ``other_paths``); ``fault``: a scripted
        misbehaviour the subclass carries out (a refusal)."""
        raise NotImplementedError

    def fault_at(self, path: str) -> Fault | None:
        """A fault scripted for requests to ``path`` only (None: the common ones apply)."""
        return None

    def input_chars(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def context_too_long(self, chars: int) -> WireError:
        raise NotImplementedError

    def undelivered(self, reply: Any) -> None:
        """A scripted reply whose stream never completed: the model says it again next time."""
        script = getattr(self, "script", None)
        if reply is not None and script is not None:
            script.insert(0, reply)

    def done_marker(self) -> bytes | None:
        """What ends a stream after its last event (Chat Completions: ``data: [DONE]``)."""
        return None

    # --- plumbing ----------------------------------------------------------------------------

    def _note(self, served: Served) -> None:
        with self._changed:
            served.streaming_on = None
            self._changed.notify_all()

    def _await_abandoned_streams(self, timeout: float = 5.0) -> None:
        """Before this request takes a reply from the script: a stream whose client has already
        closed it is let end first, so the reply it did not deliver is back in the script. A
        client retries the moment it gives up, while the thread serving the stream it gave up
        on may not have noticed yet (under load, a retry then took the next reply instead)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while any(
                s.streaming_on is not None and _closed_by_peer(s.streaming_on) for s in self.served
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(min(left, 0.05))

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_unparsed": raw.decode(errors="replace")}
        path = handler.path.rstrip("/")
        served = Served(
            body=body,
            headers={k.lower(): v for k, v in handler.headers.items()},
            received_at=time.monotonic(),
            path=path,
        )
        with self._changed:
            self.served.append(served)
            fault = self.fault_at(path) if path in self.other_paths else None
            if fault is None:
                fault = self.faults.pop(0) if self.faults else None
            self._changed.notify_all()
        if fault is None and self.fault_for is not None:
            fault = self.fault_for(body)
        if path != self.path and path not in self.other_paths:
            self._refuse(handler, served, WireError(404, f"Invalid URL (POST {handler.path})"))
            return
        if fault is not None and fault.status is not None:
            self._refuse(
                handler,
                served,
                WireError(
                    fault.status,
                    "Rate limit reached; try again later."
                    if fault.status == 429
                    else "The server had an error while processing your request.",
                    type="rate_limit_error" if fault.status == 429 else "server_error",
                    code="rate_limit_exceeded" if fault.status == 429 else None,
                ),
                retry_after=fault.retry_after,
            )
            return
        stream = bool(body.get("stream"))
        try:
            if not isinstance(body, dict) or "_unparsed" in body:
                raise WireError(400, "We could not parse the JSON body of your request.")
            if self.max_input_chars is not None:
                chars = self.input_chars(body)
                if chars > self.max_input_chars:
                    raise self.context_too_long(chars)
            self._await_abandoned_streams()
            if path == self.path:
                answer, events = self.answer(body, stream)
            else:
                answer, events = self.answer_at(path, body, stream, fault)
            served.reply = self.last_scripted
        except WireError as error:
            self._refuse(handler, served, error)
            return
        if not stream:
            if (
                fault is not None
                and fault.stall_s
                and self._client_closed(handler.connection, fault.stall_s)
            ):
                served.closed_by_client_at = time.monotonic()
                self._note(served)
                return
            payload = json.dumps(answer).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            served.completed = True
            self._note(served)
            return
        self._stream(handler, served, events, fault)

    def _refuse(
        self,
        handler: BaseHTTPRequestHandler,
        served: Served,
        error: WireError,
        retry_after: str | None = None,
    ) -> None:
        served.status = error.status
        served.error = str(error)
        payload = json.dumps(error.body).encode()
        handler.send_response(error.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        if retry_after is not None:
            handler.send_header("Retry-After", retry_after)
        handler.end_headers()
        handler.wfile.write(payload)
        self._note(served)

    def _stream(
        self,
        handler: BaseHTTPRequestHandler,
        served: Served,
        events: list[tuple[str, dict[str, Any]]],
        fault: Fault | None,
    ) -> None:
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        connection: socket.socket = handler.connection
        with self._lock:
            served.streaming_on = connection
        delay = self.event_delay_s if fault is None else fault.event_delay_s
        stall = 0.0 if fault is None else fault.stall_s
        try:
            if stall and self._client_closed(connection, stall):
                raise ConnectionResetError
            for index, (name, data) in enumerate(events):
                if index and delay and self._client_closed(connection, delay):
                    raise ConnectionResetError
                prefix = f"event: {name}\n" if name else ""
                handler.wfile.write(f"{prefix}data: {json.dumps(data)}\n\n".encode())
                handler.wfile.flush()
            marker = self.done_marker()
            if marker is not None:
                handler.wfile.write(marker)
                handler.wfile.flush()
            served.completed = True
        except (ConnectionResetError, BrokenPipeError):
            served.closed_by_client_at = time.monotonic()
            self.undelivered(served.reply)
        self._note(served)

    @staticmethod
    def _client_closed(connection: socket.socket, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as the client closes its end."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([connection], [], [], left)
            if readable:
                try:
                    if connection.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except OSError:
                    return True
                time.sleep(min(left, 0.01))  # unexpected bytes: do not spin
        return False
