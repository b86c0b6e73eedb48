"""`inner-plane thoughtflow show|list`."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer

from inner_plane.cli.common import fail, print_json, runtime
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow, list_thoughtflows

thoughtflow_app = typer.Typer(
    help="What each activation saw, decided and did.", no_args_is_help=True
)


def _show_text(record: dict[str, Any]) -> None:
    echo = typer.echo
    echo(f"activation  {record['activation_id']}  ({record['trigger']}, epoch {record['epoch']})")
    echo(f"delegate    {record['delegate_id']}   at {record['now']}")
    echo(f"agent       {record.get('agent') or '-'}   duration {record['duration_ms']:.1f} ms")
    if record.get("error"):
        echo(f"error       {record['error']}")
    if record.get("user_message"):
        echo(f"user        {record['user_message']['text']}")
    rendered = len(record["rendered_signal_ids"])
    echo(f"signals     {len(record['signals'])} claimed, {rendered} rendered")
    dispositions = record.get("dispositions") or {}
    for signal in record["signals"]:
        settled = dispositions.get(signal["id"], {})
        echo(
            f"  {signal['id']}  {signal['kind']:<22} p{signal['priority']:<3} "
            f"{settled.get('disposition', '-'):<11} {settled.get('reason', '')}"
        )
    echo(f"recalled    {len(record['recalled_memories'])}")
    for memory in record["recalled_memories"]:
        echo(f"  {memory['id']}  {memory['content']}")
    if record.get("cut"):
        echo(f"cut         {len(record['cut'])} item(s) for size")
    echo(f"decision    {record.get('decision') or '-'}")
    for action in record.get("tool_actions") or []:
        # An action as recorded, whatever it holds: a missing part is left out, not "None".
        name = action.get("name") or action.get("type") or "(unnamed action)"
        arguments = action.get("arguments")
        shown = "" if arguments is None else f" {json.dumps(arguments, default=str)[:80]}"
        outcome = action.get("error") or action.get("output")
        result = "" if outcome is None else f" -> {json.dumps(outcome, default=str)[:120]}"
        echo(f"  tool {name}{shown}{result}")
    if record.get("reply"):
        echo(f"reply       {record['reply']}")
    echo(f"usage       {json.dumps(record.get('usage') or {})}")
    echo("model input:")
    for item in record.get("model_input") or []:
        content = str(item.get("content") or json.dumps(item, default=str))
        echo(f"  [{item.get('role', item.get('type'))}] {content[:200].replace(chr(10), ' ')}")


@thoughtflow_app.command("show")
def show(
    activation_id: Annotated[str, typer.Argument(metavar="ACTIVATION_ID")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one activation's ThoughtFlow (model_input, decision, tools, dispositions, usage)."""
    try:
        parsed = uuid.UUID(activation_id)
    except ValueError:
        fail(f"not an activation id: {activation_id!r}")
    record = get_thoughtflow(runtime().engine, parsed)
    if record is None:
        fail(f"no thoughtflow for activation {activation_id}", 1)
    if as_json:
        print_json(record)
    else:
        _show_text(record)


@thoughtflow_app.command("list")
def list_command(
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    limit: Annotated[int, typer.Option("--limit", min=1, max=1_000)] = 20,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Recent ThoughtFlows of a delegate, newest first."""
    rows = list_thoughtflows(runtime().engine, delegate, limit)
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo(f"no thoughtflows of {delegate}")
    for row in rows:
        error = f"  error: {row['error']}" if row["error"] else ""
        typer.echo(
            f"{row['activation_id']}  {row['created_at'][:19]}  {row['trigger']:<9} "
            f"{row['duration_ms']:.0f} ms{error}"
        )
