"""The MCP adapter over stdio for a local processor: ``inner-plane mcp --processor NAME``.

Whoever can start this command already holds the deployment's database credentials, so the
processor is named rather than proven; its grant, trust level, revocation and rate limit still
apply to every call (looked up afresh each time).
"""

from __future__ import annotations

from mcp.server.mcpserver import Context

from inner_plane.journal.processors import Processor
from inner_plane.mcp_adapter.tools import Resolver, build_server
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.sources import errors, processors, ratelimit


def resolver(name: str) -> Resolver:
    def resolve(_ctx: Context) -> tuple[Runtime, Processor]:
        runtime = get_runtime()
        processor = processors.get(runtime, name)
        if processor is None or processor.revoked:
            raise errors.unauthorized()
        wait = ratelimit.retry_after(runtime, processor)
        if wait is not None:
            raise errors.rate_limited(wait)
        return runtime, processor

    return resolve


def run(name: str) -> None:
    server = build_server(resolver(name))
    server.run("stdio")
