"""The HTTP API for external processors (FastAPI): ``POST /v1/signals``, ``GET
/v1/signals/{id}``, ``/healthz``, and any mounted routes (the served app mounts the MCP adapter at
``/mcp``: ``inner_plane.asgi``).

Order of checks on a publication, cheapest refusal first: body size (413), credentials (401),
rate limit (429), JSON and signal validity (422), grant (403), journal (503). Every check runs
before anything is written, and a batch is one transaction, so no error stores anything.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute

from inner_plane.config import load_settings
from inner_plane.http import (
    chat_page,
    chat_session,
    conversation_api,
    guards,
    metrics,
    operator_api,
    sms_webhook,
    ui,
    validation,
)
from inner_plane.http.conversation_auth import AuthenticatePerson, ConversationGate
from inner_plane.http.conversation_stream import ConversationStreams
from inner_plane.http.json_body import NotJson, json_document
from inner_plane.http.live_feed import LiveFeed
from inner_plane.http.operator_auth import COOKIE, OperatorGate
from inner_plane.http.operator_calls import UuidPath
from inner_plane.http.schemas import (
    ExternalSignal,
    Health,
    PublishedBatch,
    PublishedSignal,
    SignalBatch,
)
from inner_plane.journal.processors import Processor
from inner_plane.operators import is_loopback
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.model import Signal, SignalError
from inner_plane.sources import auth, errors, grants, person_auth
from inner_plane.sources.errors import ApiError, AsciiJSONResponse
from inner_plane.sources.intake import (
    JOURNAL_DOWN,
    MAX_BODY_BYTES,
    authorized,
    bearer,
    client_of,
    path_of,
    read_body,
    token_verified,
)


def parse_request(body: bytes) -> tuple[list[Any], bool]:
    """(signals, is_batch) from a body holding one signal or {"signals": [...]}."""
    try:
        document = json_document(body)
    except NotJson as error:
        raise SignalError("body", f"not valid JSON: {error.reason}"[:300]) from None
    if not isinstance(document, dict):
        raise SignalError(
            "body", 'must be a signal object or {"signals": [...]}, not ' + type(document).__name__
        )
    if "signals" not in document:
        return [document], False
    extra = sorted(set(document) - {"signals"})
    if extra:
        raise SignalError(extra[0], "is not a batch field (a batch holds only 'signals')")
    signals = document["signals"]
    if not isinstance(signals, list):
        raise SignalError("signals", "must be a list of signal objects")
    return signals, True


def plain_text(body: bytes) -> bool:
    """True if no string parsed from this JSON body can hold a NUL or a lone surrogate: in
    UTF-8 both need a \\u escape or (json.loads decodes with surrogatepass) the lead byte 0xED;
    a UTF-16 or UTF-32 body (which json.loads also accepts) holds NUL bytes. Any of these
    anywhere only means the exact per-string check runs."""
    return b"\\u" not in body and b"\xed" not in body and b"\x00" not in body


def publish_request(
    runtime_factory: Callable[[], Runtime],
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    client: str | None = None,
    admitted: tuple[Runtime, Processor] | None = None,
) -> Response:
    """The whole publication in one worker thread: auth, limit, parse, admit, journal, and the
    answer encoded (off the event loop, which every connection of the process shares).
    ``admitted``: the processor, already authenticated (a bearer token, before the body)."""
    try:
        runtime, processor = admitted or authorized(
            runtime_factory, method, path, headers, body, client
        )
        raws, batch = parse_request(body)
        published = grants.publish_for(
            runtime, processor, raws, headers.get(auth.IDEMPOTENCY_HEADER), batch, plain_text(body)
        )
    except SignalError as error:
        raise errors.invalid(error.field, error.reason) from None
    except grants.GrantError as error:
        raise errors.forbidden(error.field, error.reason) from None
    except JOURNAL_DOWN:
        raise errors.unavailable() from None
    items = [grants.published_view(result, trust) for result, trust in published]
    status = 200 if all(item["deduplicated"] for item in items) else 201
    return AsciiJSONResponse({"signals": items} if batch else items[0], status_code=status)


def status_request(
    runtime_factory: Callable[[], Runtime],
    path: str,
    headers: Mapping[str, str],
    signal_id: str,
    client: str | None = None,
) -> dict[str, Any]:
    try:
        runtime, processor = authorized(runtime_factory, "GET", path, headers, b"", client)
        try:
            parsed = uuid.UUID(signal_id)
        except ValueError:
            raise errors.invalid("signal_id", "must be a UUID") from None
        signal = grants.status_for(runtime, processor, parsed)
    except JOURNAL_DOWN:
        raise errors.unavailable() from None
    if signal is None:
        raise ApiError(404, "not_found", "no such signal from this processor")
    return signal.public()


PUBLISH_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"$ref": "#/components/schemas/ExternalSignal"},
                    {"$ref": "#/components/schemas/SignalBatch"},
                ]
            }
        }
    },
}
IDEMPOTENCY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Becomes the dedup key (batch: '<key>#<index>'); a retry returns the first id",
    "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
}


# A route served beside the API and the lifespan it must run under (the MCP adapter's).
Mount = tuple[BaseRoute, Callable[[], AbstractAsyncContextManager[None]]]


def create_app(
    runtime_factory: Callable[[], Runtime] = get_runtime,
    max_body_bytes: int = MAX_BODY_BYTES,
    mounts: Sequence[Mount] = (),
    bind_host: str | None = None,
    authenticate_person: AuthenticatePerson = person_auth.authenticate_person,
) -> FastAPI:
    """The API. ``bind_host`` is where the server listens (default: INNER_PLANE_API_HOST):
    off loopback, even reads need an operator credential. ``authenticate_person`` proves a
    person token (the conversation API and the chat page; tests may give another)."""
    settings = load_settings()
    gate = OperatorGate(runtime_factory, bind_host or settings.api_host)
    feeds: list[LiveFeed] = []
    limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
        weakref.WeakKeyDictionary()
    )

    def publish_threads() -> anyio.CapacityLimiter:
        """The worker threads publications may use at once (INNER_PLANE_API_PUBLISH_THREADS):
        one limiter per event loop, made inside it, where anyio needs it."""
        loop = asyncio.get_running_loop()
        limiter = limiters.get(loop)
        if limiter is None:
            limiter = limiters[loop] = anyio.CapacityLimiter(settings.api_publish_threads)
        return limiter

    hashing_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Lock] = (
        weakref.WeakKeyDictionary()
    )

    def hashing_turn() -> anyio.Lock:
        """One authentication that may hash (a token this process has not verified) at a time
        per event loop, awaited here rather than in a worker thread: a storm of bad tokens then
        waits on the loop, one hash at a time (credentials hash one at a time anyway), and
        never holds the publish threads that valid clients need."""
        loop = asyncio.get_running_loop()
        lock = hashing_turns.get(loop)
        if lock is None:
            lock = hashing_turns[loop] = anyio.Lock()
        return lock

    def feed() -> LiveFeed:
        if not feeds:
            runtime = runtime_factory()
            feeds.append(LiveFeed(runtime.database_url, runtime.engine))
        return feeds[0]

    streams = ConversationStreams(runtime_factory, feed)
    conversation_gate = ConversationGate(runtime_factory, authenticate_person)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                for _, mounted_lifespan in mounts:
                    await stack.enter_async_context(mounted_lifespan())
                yield
        finally:
            await streams.close()
            for started in feeds:
                await run_in_threadpool(started.stop)

    app = FastAPI(
        title="inner-plane signals API",
        version="1",
        description=(
            "External processors publish inner signals to a delegate. Authenticate with "
            "`Authorization: Bearer <token>` or HMAC-SHA256 request signing "
            "(X-Inner-Plane-Processor, X-Inner-Plane-Timestamp, X-Inner-Plane-Signature). "
            "See docs/sources.md. A person talks to their delegate under "
            "/v1/delegates/{id}/conversation (docs/conversation.md)."
        ),
        lifespan=lifespan,
        # The interactive docs load their assets from a CDN: off unless asked for.
        docs_url="/docs" if settings.api_docs else None,
        redoc_url="/redoc" if settings.api_docs else None,
    )
    # A redirect to the slashed (or unslashed) path would be built from the request's Host.
    app.router.redirect_slashes = False
    app.add_exception_handler(ApiError, errors.handle_api_error)
    # The live feeds this app started: the served app ends their streams at shutdown (asgi.py).
    app.state.live_feeds = feeds
    # Refused parameters: the declared error body (guards), after the credential check on the
    # operator API (http/validation).
    refused = validation.handler(gate, guards.handle_validation_error)
    app.add_exception_handler(RequestValidationError, refused)
    app.add_exception_handler(HTTPException, validation.undecodable_body(refused))

    @app.get("/livez", include_in_schema=False)
    def livez() -> Response:
        """Liveness of this process alone (it serves requests); never asks a store, so a store
        outage does not get every API pod restarted (readiness is /healthz)."""
        return JSONResponse({"status": "ok"})

    @app.get("/healthz", response_model=Health, responses={503: {"model": Health}})
    def healthz() -> Response:
        """Liveness and journal reachability (no credentials needed)."""
        try:
            runtime_factory().signals.now()
        except JOURNAL_DOWN:
            return JSONResponse({"status": "degraded", "journal": "unreachable"}, 503)
        return JSONResponse({"status": "ok", "journal": "ok"})

    @app.post(
        "/v1/signals",
        status_code=201,
        summary="Publish one signal or a batch",
        responses={
            201: {"model": PublishedSignal | PublishedBatch, "description": "Journaled"},
            200: {
                "model": PublishedSignal | PublishedBatch,
                "description": "Every signal was a duplicate; the first ids are returned",
            },
            **errors.PUBLISH_ERRORS,
        },
        response_model=None,
        openapi_extra={"requestBody": PUBLISH_BODY, "parameters": [IDEMPOTENCY_PARAMETER]},
    )
    async def post_signals(request: Request) -> Response:
        client = client_of(request)
        admitted = None
        if bearer(request):
            # A token does not cover the body: the caller is proven before it is read.
            admit = functools.partial(
                authorized, runtime_factory, "POST", path_of(request), request.headers, b"", client
            )
            if token_verified(request):
                admitted = await anyio.to_thread.run_sync(admit, limiter=publish_threads())
            else:
                async with hashing_turn():
                    admitted = await anyio.to_thread.run_sync(admit, limiter=publish_threads())
        body = await read_body(request, max_body_bytes)
        publish = functools.partial(
            publish_request,
            runtime_factory,
            "POST",
            path_of(request),
            request.headers,
            body,
            client,
            admitted,
        )
        return await anyio.to_thread.run_sync(publish, limiter=publish_threads())

    @app.get(
        "/v1/signals/{signal_id}",
        summary="A signal this processor published, with its processing state",
        response_model=Signal,
        responses=errors.STATUS_ERRORS,
    )
    async def get_signal(signal_id: UuidPath, request: Request) -> Response:
        payload = await run_in_threadpool(
            status_request,
            runtime_factory,
            path_of(request),
            request.headers,
            signal_id,
            client_of(request),
        )
        return AsciiJSONResponse(payload)

    # After the processors' routes: a request is matched against the routes in order, and a
    # publication should not first be tried against every operator and UI route.
    app.include_router(conversation_api.build_router(runtime_factory, conversation_gate, streams))
    app.include_router(operator_api.build_router(runtime_factory, gate, feed))
    app.include_router(chat_page.build_router(runtime_factory, authenticate_person))
    app.include_router(ui.build_router(runtime_factory, gate))
    app.include_router(metrics.build_router(runtime_factory))
    app.include_router(sms_webhook.build_router(runtime_factory))
    app.mount("/static", StaticFiles(directory=ui.STATIC_DIR), name="static")

    # Outermost last: unexpected errors around everything, then the strict headers on every
    # answer (the guards' refusals too), the Host check, the bounds of bodies and parameters.
    app.add_middleware(
        guards.RequestBounds,
        routes=app.router.routes,
        max_body=max_body_bytes,
        body_timeout_s=settings.api_body_timeout_s,
    )
    bind = bind_host or settings.api_host
    app.add_middleware(
        guards.HostGuard,
        public_hosts=settings.public_hosts.split(","),
        any_host=not is_loopback(bind),
    )
    app.add_middleware(ui.SecurityHeaders)
    app.add_middleware(
        guards.ThrottledShortcut,
        session_cookies=(COOKIE, chat_session.COOKIE),
        tarpit_s=settings.api_throttled_delay_s,
    )
    app.add_middleware(guards.UnexpectedErrors)

    for route, _ in mounts:
        app.router.routes.append(route)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (ExternalSignal, SignalBatch):
                document = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(document.pop("$defs", {}))
                components[model.__name__] = document
            schema["components"]["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"},
                "hmac": {"type": "apiKey", "in": "header", "name": "X-Inner-Plane-Signature"},
                "operator": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An operator token (`inner-plane operators add`), or the "
                    "UI's session cookie; never a processor's credential",
                },
                "person": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A person token of the delegate (`inner-plane delegates "
                    "token NAME`), or the chat page's session cookie",
                },
                "twilio": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Twilio-Signature",
                    "description": "Twilio's webhook signature (HMAC-SHA1 of the public URL and "
                    "the sorted form parameters, keyed by the auth token); docs/channels.md",
                },
            }
            too_large = {
                "description": f"Body over the limit ({max_body_bytes} bytes for any request; "
                "less where the route says)",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
                },
            }
            for path, operations in schema["paths"].items():
                for method, operation in operations.items():
                    # The body guard (guards.py) refuses any request's body over the limit.
                    if method in ("post", "put", "patch"):
                        operation.setdefault("responses", {}).setdefault("413", too_large)
                if path.startswith("/v1/"):
                    for operation in operations.values():
                        if "channels" in operation.get("tags", []):
                            operation["security"] = [{"twilio": []}]
                        elif "conversation" in operation.get("tags", []):
                            operation["security"] = [{"person": []}, {"operator": []}]
                        elif "operator" in operation.get("tags", []):
                            operation["security"] = [{"operator": []}]
                        else:
                            operation["security"] = [{"bearer": []}, {"hmac": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
