"""The served ASGI app (``inner-plane serve``): the HTTP API with the MCP adapter mounted at
``/mcp``. A face of its own, so that ``http`` and ``mcp_adapter`` both sit on ``sources`` and
neither imports the other."""

from __future__ import annotations

from fastapi import FastAPI

from inner_plane.http import app as http_app
from inner_plane.http.server import bound_server_logs
from inner_plane.mcp_adapter.http import build_route
from inner_plane.runtime import get_runtime
from inner_plane.sources.intake import MAX_BODY_BYTES


def create_app() -> FastAPI:
    """The app each `inner-plane serve` worker process builds (a uvicorn factory)."""
    bound_server_logs()
    return http_app.create_app(
        get_runtime, MAX_BODY_BYTES, mounts=[build_route(get_runtime, MAX_BODY_BYTES)]
    )
