"""The MCP server and its two tools. Both apply exactly the HTTP API's rules (the same
``grants`` module); errors come back as tool errors whose text starts with the HTTP status the
API would have answered, then the field and the reason."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import SkipValidation

from inner_plane.journal.processors import Processor
from inner_plane.runtime import Runtime
from inner_plane.signals.model import SignalError
from inner_plane.sources import grants
from inner_plane.sources.errors import ApiError
from inner_plane.sources.intake import JOURNAL_DOWN

# Given the tool call's context, the runtime and the calling processor (or raise ApiError).
Resolver = Callable[[Context], tuple[Runtime, Processor]]

T = TypeVar("T")
# A tool argument documented with its type but passed through as sent: the MCP SDK validates
# arguments in pydantic's lax mode (priority "50" or true would become 50 or 1). The signal
# model then checks it strictly, with the same errors as the HTTP API.
Wire = Annotated[T, SkipValidation]

INSTRUCTIONS = (
    "Publish inner signals to a personal AI delegate as a registered external processor. "
    "Kinds must start with external.<processor>.; content from untrusted processors is labelled "
    "untrusted. signal_status returns the processing state of a signal you published."
)


def _tool_error(error: Exception) -> ToolError:
    if isinstance(error, SignalError):
        return ToolError(f"422 invalid_signal: {error.field}: {error.reason}")
    if isinstance(error, grants.GrantError):
        return ToolError(f"403 forbidden: {error.field}: {error.reason}")
    if isinstance(error, ApiError):
        return ToolError(f"{error.status} {error.body.error}: {error.body.message}")
    return ToolError("503 unavailable: the journal is unreachable; retry later")


def _publish(resolve: Resolver, ctx: Context, raw: dict[str, Any]) -> dict[str, Any]:
    try:
        runtime, processor = resolve(ctx)
        [(result, trust)] = grants.publish_for(runtime, processor, [raw])
    except (SignalError, grants.GrantError, ApiError, *JOURNAL_DOWN) as error:
        raise _tool_error(error) from None
    return grants.published_view(result, trust)


def _status(resolve: Resolver, ctx: Context, signal_id: str) -> dict[str, Any]:
    try:
        parsed = uuid.UUID(signal_id)
    except ValueError:
        raise ToolError("422 invalid_signal: signal_id: must be a UUID") from None
    try:
        runtime, processor = resolve(ctx)
        signal = grants.status_for(runtime, processor, parsed)
    except (ApiError, *JOURNAL_DOWN) as error:
        raise _tool_error(error) from None
    if signal is None:
        raise ToolError("404 not_found: no such signal from this processor")
    return signal.public()


def build_server(resolve: Resolver) -> MCPServer:
    server: MCPServer = MCPServer("inner-plane", instructions=INSTRUCTIONS, version="1")

    @server.tool(
        name="publish_signal",
        description=(
            "Publish one inner signal. kind: external.<processor>.<event>. data: JSON object "
            "(at most 64 KiB). mode: ambient|next-turn|wake|interrupt, at most your grant. "
            "dedup_key: repeats with the same key return the first signal's id. Timestamps are "
            "ISO 8601 with an offset."
        ),
    )
    async def publish_signal(
        kind: Wire[str],
        ctx: Context,
        data: Wire[dict[str, Any] | None] = None,
        delegate_id: Wire[str | None] = None,
        mode: Wire[str | None] = None,
        priority: Wire[int | None] = None,
        dedup_key: Wire[str | None] = None,
        trust: Wire[str | None] = None,
        occurred_at: Wire[str | None] = None,
        available_at: Wire[str | None] = None,
        expires_at: Wire[str | None] = None,
    ) -> dict[str, Any]:
        given = {
            "kind": kind,
            "data": data,
            "delegate_id": delegate_id,
            "mode": mode,
            "priority": priority,
            "dedup_key": dedup_key,
            "trust": trust,
            "occurred_at": occurred_at,
            "available_at": available_at,
            "expires_at": expires_at,
        }
        raw = {key: value for key, value in given.items() if value is not None}
        return await anyio.to_thread.run_sync(_publish, resolve, ctx, raw)

    @server.tool(
        name="signal_status",
        description="The journal record (state, attempts, mode ...) of a signal you published.",
    )
    async def signal_status(signal_id: str, ctx: Context) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(_status, resolve, ctx, signal_id)

    return server
