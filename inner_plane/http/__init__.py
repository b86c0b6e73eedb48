"""The HTTP API for external processors (FastAPI): publish and status routes, their schemas and
OpenAPI document. Sits on ``sources`` (credentials, grants, request checks, error shapes) and the
layers below; never imports ``mcp_adapter`` (``inner_plane.asgi`` mounts both)."""
