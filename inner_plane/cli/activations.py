"""`inner-plane activations ...` and `inner-plane say`."""

from __future__ import annotations

import time
import uuid
from typing import Annotated

import typer

from inner_plane.cli.common import fail, print_json, require_plane, runtime
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.user_turns import user_turn
from inner_plane.signals.model import SignalError

activations_app = typer.Typer(help="Activations of the base agent.", no_args_is_help=True)


def _journal() -> ActivationJournal:
    return ActivationJournal(runtime().engine)


@activations_app.command("list")
def list_activations(
    delegate: Annotated[str | None, typer.Option("--delegate")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 50,
    before: Annotated[
        int | None,
        typer.Option("--before", min=1, help="Page cursor printed after the previous page."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List activations, newest first (keyset-paged: --before continues a page)."""
    rows, cursor = _journal().page(delegate, limit, before)
    if cursor is not None:
        # On stderr, so the listing (text or JSON) on stdout keeps its shape.
        typer.echo(f"more: --before {cursor}", err=True)
    if as_json:
        print_json([row.public() for row in rows])
        return
    if not rows:
        typer.echo("no activations" + (f" of {delegate}" if delegate else ""))
    for row in rows:
        finished = "-" if row.finished_at is None else f"{row.finished_at:%H:%M:%S.%f}"[:-3]
        typer.echo(
            f"{row.id}  {row.delegate_id:<12} {row.trigger:<9} {row.state:<11} epoch {row.epoch:<4}"
            f" {row.started_at:%Y-%m-%d %H:%M:%S} -> {finished}  {len(row.signal_ids)} signal(s)"
        )


@activations_app.command("show")
def show_activation(
    activation_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one activation: trigger, why it started, epoch, state, times, attempts, error and
    the claimed signal ids."""
    try:
        key = uuid.UUID(activation_id)
    except ValueError:
        fail(f"not an activation id: {activation_id!r}")
    row = _journal().get(key)
    if row is None:
        fail(f"no activation {activation_id}", 1)
    record = row.public()
    if as_json:
        print_json(record)
        return
    for name, value in record.items():
        if value is None or value == "":
            continue  # a field this activation does not have (no turn, no error, no reply)
        if name == "signal_ids":
            value = ", ".join(value) or "-"
        typer.echo(f"{name:>12}: {value}")


def say(
    text: Annotated[str, typer.Argument(metavar="TEXT")],
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    channel: Annotated[str, typer.Option("--channel")] = "text",
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the reply")] = False,
    timeout: Annotated[float, typer.Option("--timeout")] = 60.0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Send a user turn to a delegate through the activation lane."""
    require_plane()  # the turn is answered by the plane's activation worker
    try:
        turn_id = user_turn(delegate, text, channel, runtime())
    except SignalError as error:
        fail(str(error))
    output: dict[str, object] = {"turn_id": str(turn_id)}
    said = f"sent turn {turn_id} to {delegate}"
    if wait:
        journal = _journal()
        deadline = time.monotonic() + timeout
        while True:
            turn = journal.user_turn(turn_id)
            if turn is not None and turn.state in ("done", "failed"):
                output.update(state=turn.state, reply=turn.reply)
                break
            if time.monotonic() > deadline:
                fail(f"no reply within {timeout} s: is an activation worker running?", 1)
            time.sleep(0.05)
        agent = runtime().settings.agent
        if turn.reply:
            said = f"turn {turn_id} {turn.state}: {turn.reply}"
        elif agent == "dry-run":
            said = f"turn {turn_id} {turn.state}: no reply (dry run: no model configured)"
        else:
            said = f"turn {turn_id} {turn.state}: no reply"
    if as_json:
        print_json(output)
    else:
        typer.echo(said)
