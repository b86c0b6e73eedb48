"""The MCP adapter over streamable HTTP, as a route of the HTTP API (``/mcp``).

Every request is checked before the MCP machinery sees it, exactly like ``/v1/signals``: body
size (413), credentials (401), rate limit (429). The processor found is put in the ASGI scope
for the tools. Stateless JSON mode: no server-side session, so any API worker process can answer
any request (``inner-plane serve --workers N``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inner_plane.journal.processors import Processor
from inner_plane.mcp_adapter.tools import build_server
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

    server = build_server(resolve)
    # DNS-rebinding protection guards servers that trust ambient (browser) credentials; every
    # request here carries its own bearer token or signature, and the API may sit behind any
    # host name, so the Host check is off.
    server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=max_body,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    asgi = _Authenticated(StreamableHTTPASGIApp(server.session_manager), runtime_factory, max_body)
    route = Route(PATH, endpoint=asgi, include_in_schema=False)
    return route, server.session_manager.run
