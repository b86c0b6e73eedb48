"""MCP adapter: ``publish_signal`` and ``signal_status`` tools for external processors, over
streamable HTTP (inside the HTTP API, same credentials) and over stdio (a local processor).

Sits on ``sources`` (request checks, grants, error shapes) and the layers below; never imports
``http`` (``inner_plane.asgi`` mounts both)."""
