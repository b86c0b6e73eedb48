"""`inner-plane serve` (the HTTP API for external processors, with the MCP adapter at /mcp) and
`inner-plane mcp --processor NAME` (the MCP adapter over stdio for a local processor)."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from sqlalchemy.exc import OperationalError

from inner_plane.cli.common import FAILURE, fail, runtime, settings
from inner_plane.services.embedded import export_environment

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
    """Serve the HTTP API: POST /v1/signals, GET /v1/signals/{id}, /healthz, /mcp."""
    import uvicorn

    configured = settings()
    # Connect (starting embedded stores if no URLs are set) and check the schema here, once,
    # then hand the resolved URLs to every server process through the environment.
    try:
        rt = runtime()
    except OperationalError as error:
        fail(f"the journal is unreachable: {str(error.orig or error).strip()[:300]}", FAILURE)
    os.environ.update(export_environment(rt.settings))
    uvicorn.run(
        APP_FACTORY,
        factory=True,
        host=host or configured.api_host,
        port=port or configured.api_port,
        workers=workers,
        log_level=configured.log_level.lower(),
        # The API speaks for itself through [inner-context] lines; access logs stay off.
        access_log=False,
        # Requests queued beyond this get 503 from uvicorn rather than piling up.
        limit_concurrency=1000,
    )


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
