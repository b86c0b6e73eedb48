"""The MCP adapter over streamable HTTP, as a route of the HTTP API (``/mcp``).

Every request is checked before the MCP machinery sees it, exactly like ``/v1/signals``: body
size (413), credentials (401), rate limit (429). The processor found is put in the ASGI scope
for the tools. Stateless JSON mode: no server-side session, so any API worker process can answer
any request (``inner-plane serve --workers N``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inner_plane import logs
from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime
from inner_plane.sources.errors import ApiError, unauthorized
from inner_plane.sources.intake import (
    authorized,
    bearer,
    client_of,
    path_of,
    read_body,
)
from inner_plane.sources.streams import process_slots

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

PATH = "/mcp"
SCOPE_KEY = "inner_plane.processor"


class _Authenticated:
    def __init__(
        self, inner: ASGIApp, runtime_factory: Callable[[], Runtime], max_body: int
    ) -> None:
        self.inner = inner
        self.runtime_factory = runtime_factory
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        request = Request(scope, receive)
        check = functools.partial(
            authorized,
            self.runtime_factory,
            request.method,
            path_of(request),
            request.headers,
        )
        try:
            if bearer(request):
                # A token does not cover the body: the caller is proven before it is read.
                _, processor = await run_in_threadpool(check, b"", client_of(request))
                body = await read_body(request, self.max_body)
            else:
                body = await read_body(request, self.max_body)
                _, processor = await run_in_threadpool(check, body, client_of(request))
        except ApiError as error:
            await error.response()(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            # The body was consumed for the checks: hand it to MCP once, then pass through.
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if request.method != "GET":
            await self.inner({**scope, SCOPE_KEY: processor}, replay, send)
            return
        # A GET opens a stream that lasts until the client leaves: it holds a slot.
        slots = process_slots()
        try:
            slots.acquire(f"processor:{processor.name}")
        except ApiError as error:
            await error.response()(scope, receive, send)
            return
        try:
            await self.inner({**scope, SCOPE_KEY: processor}, replay, send)
        finally:
            slots.release(f"processor:{processor.name}")


Built = tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]


class _OnFirstRequest:
    """The MCP server, built on the first authenticated ``/mcp`` request instead of at start:
    the MCP SDK is about half a second of CPU to import, in every API process (each `serve`
    worker, every `up`), and many never see an MCP request. Once built, its session manager
    runs until the app's lifespan ends: the lifespan holds a task that waits for the first
    request, builds the server (in a thread, off the event loop), and runs it."""

    def __init__(self, build: Callable[[], Built]) -> None:
        self.build = build
        self.inner: ASGIApp | None = None
        self.wanted: anyio.Event | None = None
        self.ready: anyio.Event | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self.wanted, self.ready = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._run_when_wanted, self.wanted, self.ready)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                self.inner = self.wanted = self.ready = None

    async def _run_when_wanted(self, wanted: anyio.Event, ready: anyio.Event) -> None:
        await wanted.wait()
        try:
            inner, run = await anyio.to_thread.run_sync(self.build)
            async with run():
                self.inner = inner
                ready.set()
                await anyio.sleep_forever()
        except Exception as error:
            # Not raised into the lifespan's task group, which would end the whole app: /mcp
            # answers 503 and the rest of the API goes on.
            self.inner = None
            logs.emit("mcp_unavailable", error=type(error).__name__, reason=str(error)[:200])
        finally:
            ready.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.inner is None:
            if self.wanted is None or self.ready is None:
                raise RuntimeError("/mcp is served only while the app's lifespan runs")
            self.wanted.set()
            await self.ready.wait()
        if self.inner is None:
            unavailable = ApiError(503, "unavailable", "the MCP server could not start")
            await unavailable.response()(scope, receive, send)
            return
        await self.inner(scope, receive, send)


def build_route(
    runtime_factory: Callable[[], Runtime], max_body: int
) -> tuple[Route, Callable[[], AbstractAsyncContextManager[None]]]:
    """The ``/mcp`` route and the lifespan the app must run it under."""

    def resolve(ctx: Context) -> tuple[Runtime, Processor]:
        request: Any = ctx.request_context.request
        processor = None if request is None else request.scope.get(SCOPE_KEY)
        if not isinstance(processor, Processor):
            raise unauthorized()
        return runtime_factory(), processor

    def build() -> Built:
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
        from mcp.server.transport_security import TransportSecuritySettings

        from inner_plane.mcp_adapter.tools import build_server

        server = build_server(resolve)
        # DNS-rebinding protection guards servers that trust ambient (browser) credentials;
        # every request here carries its own bearer token or signature, and the API may sit
        # behind any host name, so the Host check is off.
        server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            max_request_body_size=max_body,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return StreamableHTTPASGIApp(server.session_manager), server.session_manager.run

    served = _OnFirstRequest(build)
    asgi = _Authenticated(served, runtime_factory, max_body)
    route = Route(PATH, endpoint=asgi, include_in_schema=False)
    return route, served.lifespan
