"""`inner-plane memory add|list|recall`."""

from __future__ import annotations

from typing import Annotated

import typer

from inner_plane.cli.common import fail, print_json, runtime
from inner_plane.memory import MemoryInputError, MemoryKind, list_memories, recall, remember

memory_app = typer.Typer(help="The delegate's memories: add, list, recall.", no_args_is_help=True)


@memory_app.command("add")
def add(
    content: Annotated[str, typer.Argument(metavar="TEXT")],
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    standing: Annotated[bool, typer.Option("--standing", help="Always in context")] = False,
    relation: Annotated[
        str, typer.Option("--relation", help="new|consolidated|conflict|override")
    ] = "new",
    related: Annotated[
        list[str] | None, typer.Option("--related", help="Related memory id (repeatable)")
    ] = None,
    source: Annotated[str, typer.Option("--source")] = "memory",
    outcome_key: Annotated[str | None, typer.Option("--outcome-key")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Store a memory; its relation decides the signal published (new never wakes)."""
    try:
        write = remember(
            content,
            delegate_id=delegate,
            kind=MemoryKind.STANDING if standing else MemoryKind.LEARNED,
            relation=relation,
            related_ids=related or [],
            source=source,
            outcome_key=outcome_key,
            runtime=runtime(),
        )
    except MemoryInputError as error:
        fail(str(error))
    record = {
        **write.memory.public(),
        "created": write.created,
        "signal": {
            "id": str(write.signal.id),
            "kind": write.signal.kind,
            "mode": write.signal.mode.value,
            "deduplicated": write.signal.deduplicated,
        },
    }
    if as_json:
        print_json(record)
        return
    state = "stored" if write.created else "already stored"
    typer.echo(
        f"{state} {write.memory.id} ({write.memory.kind.value}, {write.memory.relation.value}); "
        f"signal {write.signal.id} {write.signal.kind} mode {write.signal.mode.value}"
        + (" (deduplicated)" if write.signal.deduplicated else "")
    )


@memory_app.command("list")
def list_command(
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    kind: Annotated[str | None, typer.Option("--kind", help="standing|learned")] = None,
    include_superseded: Annotated[bool, typer.Option("--all", help="Include superseded")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List memories, newest first."""
    if kind is not None and kind not in {k.value for k in MemoryKind}:
        fail(f"--kind: {kind!r} is not one of standing, learned")
    rows = list_memories(
        delegate, kind=kind, include_superseded=include_superseded, limit=limit, runtime=runtime()
    )
    if as_json:
        print_json([m.public() for m in rows])
        return
    if not rows:
        typer.echo(f"no memories of {delegate}")
    for m in rows:
        flag = " superseded" if m.superseded_by else ""
        typer.echo(
            f"{m.id}  {m.created_at:%Y-%m-%d %H:%M:%S}  {m.kind.value:<8} {m.relation.value:<12}"
            f"{flag} {m.content}"
        )


@memory_app.command("recall")
def recall_command(
    cue: Annotated[str, typer.Argument(metavar="CUE")],
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    limit: Annotated[int, typer.Option("--limit", min=1, max=100)] = 8,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Learned memories matching any word of CUE, best first."""
    if not cue.strip():
        fail("CUE: must be non-empty text")
    rows = recall(cue, delegate, limit=limit, runtime=runtime())
    if as_json:
        print_json([m.public() for m in rows])
        return
    if not rows:
        typer.echo("no memory matches")
    for m in rows:
        typer.echo(f"{m.rank or 0:.3f}  {m.id}  {m.content}")
