"""`inner-plane serve` (the HTTP API for external processors, with the MCP adapter at /mcp) and
`inner-plane mcp --processor NAME` (the MCP adapter over stdio for a local processor)."""

from __future__ import annotations

import logging
import os
import socket
from typing import Annotated, Any, cast

import typer
from sqlalchemy.exc import OperationalError

from inner_plane import operators
from inner_plane.cli.common import FAILURE, fail, runtime, settings
from inner_plane.config import load_settings
from inner_plane.http import listeners
from inner_plane.services.embedded import export_environment
from inner_plane.startup import collector_held

APP_FACTORY = "inner_plane.asgi:create_app"


def serve(
    host: Annotated[
        str | None, typer.Option("--host", help="Default: INNER_PLANE_API_HOST")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="Default: INNER_PLANE_API_PORT")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Server processes")] = 1,
) -> None:
    """Serve the HTTP API (processors' intake, the operator API and live feed, the UI at /,
    /healthz, /mcp). Beyond loopback it refuses to start until an operator exists."""
    with collector_held():  # the server's libraries, as the app module loads its own
        import uvicorn

        from inner_plane.http.server import BoundedH11Protocol

    configured = settings()
    # Connect (starting embedded stores if no URLs are set) and check the schema here, once,
    # then hand the resolved URLs to every server process through the environment.
    try:
        rt = runtime()
    except OperationalError as error:
        fail(f"the journal is unreachable: {str(error.orig or error).strip()[:300]}", FAILURE)
    bind = host or configured.api_host
    if not operators.is_loopback(bind) and not operators.any_configured(rt):
        fail(
            f"refusing to serve on {bind}: beyond loopback the API needs an operator "
            "credential; add one with `inner-plane operators add NAME`, or bind to 127.0.0.1",
            FAILURE,
        )
    os.environ.update(export_environment(rt.settings))
    # The app reads where it listens from here (open reads only on loopback).
    os.environ["INNER_PLANE_API_HOST"] = bind
    load_settings.cache_clear()
    options: dict[str, Any] = dict(
        factory=True,
        host=bind,
        port=port or configured.api_port,
        workers=workers,
        log_level=configured.log_level.lower(),
        # The API speaks for itself through [inner-context] lines; access logs stay off.
        access_log=False,
        # Requests queued beyond this get 503 from uvicorn rather than piling up. Held streams
        # (at most INNER_PLANE_API_STREAMS, the app's own cap) come on top, so a process full of
        # streams still answers requests.
        limit_concurrency=configured.api_streams + 1000,
        # Live-feed streams never end on their own: give them a moment, then close them.
        timeout_graceful_shutdown=3,
        # The client is the socket's peer: uvicorn must not take it from X-Forwarded-For (by
        # default it believes 127.0.0.1). Trusted proxies are the app's setting
        # (INNER_PLANE_TRUSTED_PROXIES, inner_plane/sources/peers.py).
        proxy_headers=False,
        forwarded_allow_ips="",
        # An idle kept-alive connection is closed soon; a request's head is bounded in size.
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,
        # uvicorn's h11 protocol with a deadline on request heads (slow headers).
        http=BoundedH11Protocol,
    )
    if workers > 1 and listeners.spreads_connections():
        _serve_workers(uvicorn.Config(APP_FACTORY, **options), bind, options["port"])
    else:
        uvicorn.run(APP_FACTORY, **options)


def _serve_workers(config: Any, host: str, port: int) -> None:
    """uvicorn's supervisor over workers that each listen on a socket of their own
    (inner_plane.http.listeners): the kernel spreads connections over them."""
    from uvicorn.supervisors import Multiprocess

    try:
        held = listeners.reuse_port_socket(host, port)
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}", FAILURE)
    logging.getLogger("uvicorn.error").info(
        "Uvicorn running on http://%s:%d with a listening socket per worker (Press CTRL+C to quit)",
        host,
        port,
    )
    try:
        # Each worker unpickles the stand-in as a socket of its own (a restarted one too).
        own = cast(socket.socket, listeners.OwnListener(host, port))
        Multiprocess(config, sockets=[own]).run()
    finally:
        held.close()


def mcp(
    processor: Annotated[str, typer.Option("--processor", help="Registered processor name")],
) -> None:
    """Serve the MCP adapter over stdio for a local processor (its grant applies)."""
    from inner_plane.mcp_adapter import stdio
    from inner_plane.sources import processors

    found = processors.get(runtime(), processor)
    if found is None or found.revoked:
        fail(f"processor {processor!r}: not registered or revoked")
    stdio.run(processor)
