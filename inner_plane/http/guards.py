"""The checks every request passes before any route sees it, as plain ASGI middleware (none
buffers or re-wraps a response, so the live feed's stream passes straight through):

- :class:`UnexpectedErrors`: any exception a route did not turn into an answer becomes one
  ``unexpected_error`` line (its traceback once per distinct error per minute, escaped onto the
  same line) and a bare 500; a client that went away mid-body is one ``client_disconnected``
  line, rate-limited the same way. Nothing reaches uvicorn's per-request traceback.
- :class:`HostGuard`: the ``Host`` a request names must be one the API answers to (DNS
  rebinding: a page whose name resolves to 127.0.0.1 must not read an open journal).
- :class:`RequestBounds`: a body larger than the limit is refused by its Content-Length before
  it is read and by its size while read; a body must arrive within a deadline; a NUL in a path
  or query parameter (which the journal cannot hold) is a 422 naming the parameter.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import anyio
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inner_plane import logs
from inner_plane.operators import is_loopback
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError, AsciiJSONResponse
from inner_plane.sources.intake import client_of, refuse_known_throttled

LOG_WINDOW_S = 60.0
# The distinct errors remembered for rate-limiting (an attacker cannot grow it without bound).
_MAX_REMEMBERED = 256
_EXCERPT = 200


@dataclass
class _Seen:
    window: int
    suppressed: int = 0


@dataclass
class RateLimitedLog:
    """At most one line per distinct error per minute; the next line says how many were left
    out. Process-local: each API process writes its own few lines."""

    window_s: float = LOG_WINDOW_S
    seen: dict[str, _Seen] = field(default_factory=dict)

    def admit(self, key: str, now: float | None = None) -> tuple[bool, int]:
        """(write a line now, how many were suppressed before it)."""
        window = int((time.monotonic() if now is None else now) // self.window_s)
        entry = self.seen.get(key)
        if entry is not None and entry.window == window:
            entry.suppressed += 1
            return False, 0
        suppressed = 0 if entry is None else entry.suppressed
        if entry is None and len(self.seen) >= _MAX_REMEMBERED:
            self.seen.pop(next(iter(self.seen)))
        self.seen[key] = _Seen(window)
        return True, suppressed


def _where(error: BaseException) -> str:
    """The innermost frame of the error: with its type, what makes two errors the same."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"


INTERNAL = ApiError(500, "internal", "an unexpected error; it has been logged")


class UnexpectedErrors:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log = RateLimitedLog()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except ClientDisconnect:
            admit, suppressed = self.log.admit("client_disconnected")
            if admit:
                logs.emit("client_disconnected", path=_bounded(scope["path"]), repeats=suppressed)
        except Exception as error:
            self._record(scope, error)
            if not started:
                await INTERNAL.response()(scope, receive, send)

    def _record(self, scope: Scope, error: Exception) -> None:
        kind = type(error).__name__
        where = _where(error)
        admit, suppressed = self.log.admit(f"{kind}@{where}")
        if not admit:
            return
        logs.emit(
            "unexpected_error",
            error=kind,
            at=where,
            method=scope.get("method"),
            path=_bounded(scope["path"]),
            reason=_bounded(str(error)),
            repeats=suppressed,
            # One line: the logfmt writer escapes the newlines.
            traceback=_ends("".join(traceback.format_exception(error))),
        )


def _ends(text: str, head: int = 1000, tail: int = 3000) -> str:
    """A long text's beginning and end (a traceback: where it started, where it broke)."""
    return text if len(text) <= head + tail else f"{text[:head]}\n...\n{text[-tail:]}"


def _bounded(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


# --- throttled addresses ---------------------------------------------------------------------


# How many refusals one throttled address may have held at once in a process; past that it is
# refused at once and its connection closed.
TARPIT_PER_ADDRESS = 16


class ThrottledShortcut:
    """Refuse (429) a request from an address this process knows is over its failure limit,
    before routing, validation or a worker thread. Not for reading ``/healthz`` or a sign-in
    form, a live session (proven in Redis, by the route) or a token this process verified
    before (a client sharing the address with an attacker keeps working).

    The refusal is held for ``tarpit_s`` (``INNER_PLANE_API_THROTTLED_DELAY_S``, 1 s) before it
    is sent (a tarpit): a client that waits
    for each answer, as a credential-guessing loop does, then sends one request a second per
    connection instead of hundreds, and the storm stops taking the event loop from everyone
    else. Holding costs a timer, not CPU; at most :data:`TARPIT_PER_ADDRESS` are held per
    address, and past that the refusal is immediate and closes the connection, so an address
    cannot fill the server's connection slots with held refusals either."""

    def __init__(
        self,
        app: ASGIApp,
        session_cookies: Iterable[str],
        # The sign-in forms stay readable (their POSTs meet the throttle in Redis, and say so).
        open_paths: Iterable[str] = ("/healthz", "/login", "/chat"),
        tarpit_s: float = 1.0,
    ) -> None:
        self.app = app
        self.session_cookies = tuple(session_cookies)
        self.open_paths = frozenset(open_paths)
        self.tarpit_s = tarpit_s
        self.held: dict[str, int] = {}  # refusals held per address (one event loop per process)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not (
            scope["method"] == "GET" and scope["path"] in self.open_paths
        ):
            request = Request(scope)
            if not any(name in request.cookies for name in self.session_cookies):
                client = client_of(request)
                try:
                    refuse_known_throttled(request, client)
                except ApiError as refusal:
                    await self._refuse(refusal, client or "", scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _refuse(
        self, refusal: ApiError, client: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        held = self.held.get(client, 0)
        if not self.tarpit_s:
            await refusal.response()(scope, receive, send)
            return
        if held >= TARPIT_PER_ADDRESS:
            refusal.headers["Connection"] = "close"
            await refusal.response()(scope, receive, send)
            return
        self.held[client] = held + 1
        try:
            await anyio.sleep(self.tarpit_s)
        finally:
            left = self.held[client] - 1
            if left:
                self.held[client] = left
            else:
                del self.held[client]
        await refusal.response()(scope, receive, send)


# --- Host --------------------------------------------------------------------------------------


def _host_name(host: str) -> str:
    """The name of a Host header, without its port, lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def is_loopback_host(host: str) -> bool:
    name = _host_name(host)
    return name in ("localhost", "localhost.") or name.endswith(".localhost") or is_loopback(name)


class HostGuard:
    """Refuse (421) a Host that is neither a loopback name nor one of the public names. With no
    public name configured, an API listening beyond loopback takes any Host (every read there
    needs a credential, which a rebinding page does not hold); one on loopback takes loopback
    names only. Open reads additionally need a loopback Host (``OperatorGate``)."""

    def __init__(self, app: ASGIApp, public_hosts: Iterable[str], any_host: bool) -> None:
        self.app = app
        self.public = frozenset(_host_name(h) for h in public_hosts if h.strip())
        self.any_host = any_host and not self.public

    def allowed(self, host: str) -> bool:
        return self.any_host or is_loopback_host(host) or _host_name(host) in self.public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any_host:
            await self.app(scope, receive, send)
            return
        host = next((v for k, v in scope["headers"] if k == b"host"), b"").decode("latin-1")
        if not self.allowed(host):
            refusal = ApiError(
                421,
                "misdirected",
                "host: not a name this API answers to (see INNER_PLANE_PUBLIC_HOSTS)",
                field="host",
            )
            await refusal.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


# --- bodies and parameters ---------------------------------------------------------------------


class _BodyRefused(Exception):
    def __init__(self, error: ApiError) -> None:
        self.error = error


class RequestBounds:
    def __init__(
        self, app: ASGIApp, routes: Sequence[BaseRoute], max_body: int, body_timeout_s: float
    ) -> None:
        self.app = app
        self.routes = routes
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._parameter_refusal(scope) or self._declared_too_large(scope)
        if refusal is not None:
            await refusal.response()(scope, receive, send)
            return
        deadline = time.monotonic() + self.body_timeout_s
        size = 0
        done = False

        async def bounded() -> Message:
            # Only the body has a deadline: after it, receive() waits for the disconnect of a
            # streaming response, which may rightly take hours.
            nonlocal size, done
            if done:
                return await receive()
            remaining = deadline - time.monotonic()
            try:
                with anyio.fail_after(max(remaining, 0.001)):
                    message = await receive()
            except TimeoutError:
                raise _BodyRefused(
                    ApiError(408, "timeout", "the request body did not arrive in time")
                ) from None
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > self.max_body:
                    raise _BodyRefused(errors.too_large(self.max_body))
                done = not message.get("more_body", False)
            else:
                done = True
            return message

        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded, tracking)
        except _BodyRefused as refused:
            if not started:
                await refused.error.response()(scope, receive, send)

    def _declared_too_large(self, scope: Scope) -> ApiError | None:
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is None:
            return None
        if not declared.isdigit() or len(declared) > 18:
            return ApiError(400, "invalid", "content-length: not a number", field="content-length")
        return errors.too_large(self.max_body) if int(declared) > self.max_body else None

    def _parameter_refusal(self, scope: Scope) -> ApiError | None:
        """A 422 naming the first parameter holding a NUL, or None. Cheap when there is none."""
        query: bytes = scope.get("query_string", b"")
        if b"%00" in query or b"\x00" in query:
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
                if "\x00" in name:
                    return _nul("query")
                if "\x00" in value:
                    return _nul(_bounded(name))
        path: str = scope.get("path", "")
        if "\x00" in path:
            for route in flat_routes(self.routes):
                match, child = route.matches(scope)
                if match == Match.FULL:
                    for name, value in child.get("path_params", {}).items():
                        if "\x00" in str(value):
                            return _nul(name)
            return _nul("path")
        return None


def flat_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route, those of included routers too (FastAPI keeps an included router whole)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from flat_routes(included.routes)
        else:
            yield route


def _nul(name: str) -> ApiError:
    return ApiError(
        422, "invalid", f"{name}: must not hold a NUL character", field=name,
        reason="must not hold a NUL character",
    )  # fmt: skip


# --- request validation ------------------------------------------------------------------------


async def handle_validation_error(_request: Request, error: Exception) -> AsciiJSONResponse:
    """FastAPI's 422 in the API's one error shape, naming the first offending field and why,
    never echoing its input (FastAPI's default body repeats it)."""
    assert isinstance(error, RequestValidationError)
    problems = error.errors()
    first = problems[0] if problems else {}
    location = [str(part) for part in first.get("loc", ()) if not isinstance(part, int)]
    # ("query", "after") -> "after"; ("body", "token") -> "token"
    name = _bounded(".".join(location[1:]) or (location[0] if location else "request"))
    reason = _bounded(str(first.get("msg", "invalid")))
    return ApiError(422, "invalid", f"{name}: {reason}", field=name, reason=reason).response()


# --- streams ---------------------------------------------------------------------------------
class HeldStream(StreamingResponse):
    """A stream holding one of the process's stream slots until it ends, however it ends."""

    def __init__(self, content: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()
