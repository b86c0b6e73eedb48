"""`inner-plane timeline --delegate D`: the conversation timeline replayed from stored events."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from inner_plane.cli.common import fail, print_json, runtime
from inner_plane.timeline import render_line, replay


def timeline(
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    conversation: Annotated[
        str | None, typer.Option("--conversation", help="One conversation id (default: all)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Replay a delegate's conversation timeline: messages, tool calls, memory retrieval,
    inner context and internal activity, in order."""
    conversation_id = None
    if conversation is not None:
        try:
            conversation_id = uuid.UUID(conversation)
        except ValueError:
            fail(f"--conversation: not a conversation id: {conversation!r}")
    entries = replay(runtime().engine, delegate, conversation_id)
    if as_json:
        print_json(entries)
        return
    if not entries:
        typer.echo(f"no conversation events for delegate {delegate}")
    for item in entries:
        typer.echo(render_line(item))
