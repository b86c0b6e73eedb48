"""`inner-plane timers ...`: add, list (with next due times), cancel, check the file, tick once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from inner_plane.cli.common import fail, print_json, runtime, settings
from inner_plane.timers import (
    TimerError,
    TimerInfo,
    add_timer,
    cancel_timer,
    list_timers,
    load_static_timers,
    tick,
    timers_file,
)

timers_app = typer.Typer(help="Timers: scheduled moments published as timer.due signals.",
                         no_args_is_help=True)  # fmt: skip


@timers_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Identity of the timer (letters, digits, ._:-)")],
    purpose: Annotated[str, typer.Option("--purpose", help="What the moment is for")],
    cron: Annotated[str | None, typer.Option("--cron", help="Five-field cron expression")] = None,
    every: Annotated[float | None, typer.Option("--every", help="Interval in seconds")] = None,
    at: Annotated[str | None, typer.Option("--at", help="One moment, ISO 8601")] = None,
    timezone: Annotated[str, typer.Option("--timezone", help="IANA time zone")] = "UTC",
    start: Annotated[str | None, typer.Option("--start", help="First moment of --every")] = None,
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    mode: Annotated[str, typer.Option("--mode", help="ambient|next-turn|wake|interrupt")] = "wake",
    priority: Annotated[int | None, typer.Option("--priority", help="0..100")] = None,
    missed: Annotated[str, typer.Option("--missed", help="latest|skip")] = "latest",
    catch_up: Annotated[float | None, typer.Option("--catch-up", help="Seconds")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Add a dynamic timer (stored in PostgreSQL)."""
    raw: dict[str, Any] = {
        "name": name,
        "purpose": purpose,
        "timezone": timezone,
        "delegate_id": delegate,
        "mode": mode,
        "missed": missed,
    }
    for key, value in (
        ("cron", cron),
        ("every_s", every),
        ("at", at),
        ("start", start),
        ("priority", priority),
        ("catch_up_s", catch_up),
    ):
        if value is not None:
            raw[key] = value
    try:
        info = add_timer(raw, runtime=runtime(), created_by="cli")
    except TimerError as error:
        fail(str(error))
    if as_json:
        print_json(info.public())
    else:
        typer.echo(f"added {info.id} {info.name} ({info.recurrence}); next due {_when(info)}")


def _when(info: TimerInfo) -> str:
    return "-" if info.next_due is None else info.next_due.isoformat()


@timers_app.command("list")
def list_command(
    delegate: Annotated[str | None, typer.Option("--delegate")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Include done and cancelled")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List static and dynamic timers with the next due time of each."""
    try:
        timers = list_timers(runtime=runtime(), delegate_id=delegate, include_finished=show_all)
    except TimerError as error:
        fail(str(error))
    if as_json:
        print_json([t.public() for t in timers])
        return
    if not timers:
        typer.echo("no timers" + ("" if show_all else " active (--all: also done and cancelled)"))
    for t in timers:
        typer.echo(
            f"{_when(t):<32} {t.state:<9} {t.origin:<7} {t.delegate_id:<12} {t.name:<24} "
            f"{t.recurrence}  {json.dumps(t.purpose[:60], ensure_ascii=False)}"
        )


@timers_app.command("cancel")
def cancel(
    ref: Annotated[str, typer.Argument(metavar="NAME_OR_ID")],
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Cancel a dynamic timer by name (within --delegate) or id."""
    try:
        info = cancel_timer(ref, delegate_id=delegate, runtime=runtime())
    except TimerError as error:
        fail(str(error))
    if as_json:
        print_json(info.public())
    else:
        typer.echo(f"cancelled {info.id} {info.name}")


@timers_app.command("check")
def check(
    path: Annotated[Path | None, typer.Argument(help="Default: the configured timers file")] = None,
) -> None:
    """Validate a static timers file (what beat checks at start)."""
    target = path or timers_file(settings())
    try:
        specs = load_static_timers(target)
    except TimerError as error:
        fail(str(error))
    typer.echo(f"{target}: {len(specs)} valid timer(s)")


@timers_app.command("tick")
def tick_command() -> None:
    """Run one tick in this process (what beat schedules every INNER_PLANE_TIMERS_TICK_S)."""
    print_json(tick(runtime()).public())
