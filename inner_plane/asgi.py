"""The served ASGI app (``inner-plane serve``): the HTTP API with the MCP adapter mounted at
``/mcp``. A face of its own, so that ``http`` and ``mcp_adapter`` both sit on ``sources`` and
neither imports the other."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from inner_plane.startup import collector_held

# What each server process loads (FastAPI, the API, the MCP adapter, the journal) with the
# collector held, as a worker loads its app.
with collector_held():
    from fastapi import FastAPI

    from inner_plane import tracing
    from inner_plane.http import app as http_app
    from inner_plane.http.server import bound_server_logs
    from inner_plane.mcp_adapter.http import build_route
    from inner_plane.runtime import get_runtime
    from inner_plane.sources.intake import MAX_BODY_BYTES


def create_app() -> FastAPI:
    """The app each `inner-plane serve` worker process builds (a uvicorn factory)."""
    bound_server_logs()
    app = http_app.create_app(
        get_runtime, MAX_BODY_BYTES, mounts=[build_route(get_runtime, MAX_BODY_BYTES)]
    )
    end_streams_on_exit(app)
    trace_requests(app)
    return app


# Probes and scrapes would be most of the spans and tell nothing.
UNTRACED_PATHS = "/healthz,/livez,/readyz,/metrics"


def trace_requests(app: FastAPI) -> None:
    """Traces, when the OTEL_* variables ask for them: FastAPI's official instrumentation, a
    server span per request (a caller's traceparent is honoured as its parent), without the
    per-message receive/send spans."""
    if tracing.setup("inner-plane-api"):
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app, excluded_urls=UNTRACED_PATHS, exclude_spans=["receive", "send"]
        )


def end_streams_on_exit(app: FastAPI) -> None:
    """On Ctrl-C or SIGTERM, end the live-feed streams first, then let the server's own
    handler begin its graceful shutdown. Without this the server waits for streams that never
    end, gives up after its timeout and cancels them: a CancelledError traceback and "timeout
    graceful shutdown exceeded" on every stop with a browser open.

    The server installs its handlers before it builds the app (this factory), so the ones found
    here are the server's, chained after ours. Only the main thread can set handlers; elsewhere
    (a server run in a thread, as some tests do) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return
    feeds: list[Any] = app.state.live_feeds
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)

        def handler(
            sig: int, frame: FrameType | None, previous: Callable[..., Any] | Any = previous
        ) -> None:
            for feed in list(feeds):
                feed.end_streams()
            if callable(previous):
                previous(sig, frame)
            elif previous is not None:  # the default action (or ignoring it), as before
                signal.signal(sig, previous)
                signal.raise_signal(sig)

        signal.signal(signum, handler)
