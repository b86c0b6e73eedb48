"""MCP adapter: ``publish_signal`` and ``signal_status`` tools for external processors, over
streamable HTTP (inside the HTTP API, same credentials) and over stdio (a local processor)."""
