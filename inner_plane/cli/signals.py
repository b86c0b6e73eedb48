"""`inner-plane publish` and `inner-plane signals ...`: for developers enqueuing test signals and
operators reading the journal."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from inner_plane.cli.common import fail, journal_rows, print_json, require_plane, runtime
from inner_plane.signals.model import Mode, SignalError, State, Trust

# Celery, the publish path and the lane load only in the commands that use them, so reading the
# journal (`signals show`, `signals list`) starts fast.

signals_app = typer.Typer(help="Read and act on the signal journal.", no_args_is_help=True)


def _load_data(data: str | None, data_file: Path | None) -> dict[str, Any]:
    if data is not None and data_file is not None:
        fail("give --data or --data-file, not both")
    text = data
    origin = "--data"
    if data_file is not None:
        origin = f"--data-file {data_file}"
        try:
            text = data_file.read_text()
        except OSError as error:
            fail(f"{origin}: cannot read: {error.strerror}")
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        fail(f"{origin}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}")
    if not isinstance(value, dict):
        fail(f"{origin}: must be a JSON object, not {type(value).__name__}")
    return value


def publish_command(
    kind: Annotated[str, typer.Option("--kind", help="Namespaced kind, e.g. task.completed")],
    source: Annotated[str, typer.Option("--source", help="Publishing component")],
    mode: Annotated[
        str | None, typer.Option("--mode", help="ambient|next-turn|wake|interrupt")
    ] = None,
    priority: Annotated[int | None, typer.Option("--priority", help="0..100")] = None,
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    dedup_key: Annotated[str | None, typer.Option("--dedup-key")] = None,
    data: Annotated[str | None, typer.Option("--data", help="JSON object")] = None,
    data_file: Annotated[
        Path | None, typer.Option("--data-file", help="File with a JSON object")
    ] = None,
    trust: Annotated[str, typer.Option("--trust", help="trusted|untrusted")] = "trusted",
    occurred_at: Annotated[
        str | None, typer.Option("--occurred-at", help="ISO 8601 with an offset")
    ] = None,
    available_at: Annotated[
        str | None, typer.Option("--available-at", help="Not before (ISO 8601 with an offset)")
    ] = None,
    expires_at: Annotated[
        str | None, typer.Option("--expires-at", help="Drop after (ISO 8601 with an offset)")
    ] = None,
    direct: Annotated[
        bool, typer.Option("--direct", help="Write in-process, not via Celery")
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until a worker journaled it")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Publish one inner signal (through the Celery `signals` queue unless --direct)."""
    from opentelemetry.trace import SpanKind

    from inner_plane import celery_bridge, tracing
    from inner_plane.publish import (
        publish_drafts,
        publish_span_attributes,
        validate,
        wire_form,
        with_stable_identity,
    )
    from inner_plane.signals.kinds import settle

    tracing.setup("inner-plane-cli")

    raw: dict[str, Any] = {
        "kind": kind,
        "source": source,
        "delegate_id": delegate,
        "data": _load_data(data, data_file),
        "trust": trust,
    }
    if mode is not None:
        raw["mode"] = mode
    if priority is not None:
        raw["priority"] = priority
    if dedup_key is not None:
        raw["dedup_key"] = dedup_key
    for field, value in (
        ("occurred_at", occurred_at),
        ("available_at", available_at),
        ("expires_at", expires_at),
    ):
        if value is not None:
            raw[field] = value
    try:
        draft = validate(raw, via="cli")
    except SignalError as error:
        fail(str(error))
    if not direct:
        require_plane()
    rt = runtime()
    # The mode the kind's policy gives it, and whether a requested interrupt was downgraded.
    policy = rt.registry.policy_for(draft.kind, draft.mode)
    effective, _, _, downgraded = settle(
        policy, draft.mode, draft.priority, draft.expires_at, datetime.now(UTC)
    )
    modes = {
        "mode": effective.value,
        "requested_mode": None if draft.mode is None else draft.mode.value,
        "downgraded": downgraded,
    }
    # Said in words on the text line: "mode wake (interrupt requested: downgraded ...)".
    mode_words = f"mode {effective.value}" + (
        f" ({draft.mode.value} requested: downgraded by the kind's policy)"
        if downgraded and draft.mode is not None
        else ""
    )
    if direct:
        result = publish_drafts([draft], rt, via="cli")[0]
        if as_json:
            print_json({**result.public(), **modes})
        else:
            state = "deduplicated" if result.deduplicated else "published"
            typer.echo(f"{state} {result.id} ({result.kind}, {mode_words})")
        return
    draft = with_stable_identity(draft, rt.registry)
    assert draft.id is not None
    existed = bool(rt.signals.existing_ids([draft.id]))
    # The signal's publish span: the message carries it, and the worker stores it on the row.
    attributes = publish_span_attributes(draft, draft.id, effective.value, "cli")
    with tracing.span("publish signals", SpanKind.PRODUCER, attributes):
        task_id = celery_bridge.send_publish(rt.settings, wire_form(draft))
    # The signal's id is known before a worker journals it (stable identity): it is what
    # `signals show` and the UI find; the Celery task id is only Flower's.
    output: dict[str, Any] = {"id": str(draft.id), "task_id": task_id, **modes}
    said = f"queued {draft.id} ({draft.kind}, {mode_words}) for a signals worker"
    if wait:
        deadline = time.monotonic() + 30
        while not rt.signals.existing_ids([draft.id]):
            if time.monotonic() > deadline:
                fail(f"signal {draft.id} not journaled after 30 s: is a signals worker running?", 1)
            time.sleep(0.05)
        output["deduplicated"] = existed
        state = "deduplicated" if existed else "published"
        said = f"{state} {draft.id} ({draft.kind}, {mode_words})"
    if as_json:
        print_json(output)
    else:
        typer.echo(f"{said}; task {task_id}")


def _parse_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        fail(f"not a signal id: {value!r}")


@signals_app.command("list")
def list_signals(
    delegate: Annotated[str | None, typer.Option("--delegate")] = None,
    state: Annotated[str | None, typer.Option("--state")] = None,
    kind: Annotated[str | None, typer.Option("--kind")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 50,
    before: Annotated[
        int | None,
        typer.Option("--before", min=1, help="Page cursor printed after the previous page."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List journaled signals, newest first (keyset-paged: --before continues a page)."""
    if state is not None and state not in {s.value for s in State}:
        fail(f"--state: {state!r} is not one of {', '.join(s.value for s in State)}")
    rows, cursor = runtime().signals.page(delegate, state, kind, limit, before)
    if cursor is not None:
        # On stderr, so the listing (text or JSON) on stdout keeps its shape.
        typer.echo(f"more: --before {cursor}", err=True)
    if as_json:
        print_json([row.public() for row in rows])
        return
    if not rows:
        shown = [f"{name} {value}" for name, value in (
            ("delegate", delegate), ("state", state), ("kind", kind), ("before", before)
        ) if value is not None]  # fmt: skip
        typer.echo("no signals" + (f" with {', '.join(shown)}" if shown else ""))
        return
    for row in rows:
        typer.echo(
            f"{row.id}  {row.created_at:%Y-%m-%d %H:%M:%S}  {_shown(row.delegate_id):<12} "
            f"{row.state:<9} {row.mode.value:<9} p{row.priority:<3} {_shown(row.kind)}  "
            f"({_shown(row.source)})"
        )


def _shown(text: str) -> str:
    """One row, one line: a value written behind the model's back (control characters, line
    separators) is shown escaped."""
    return text if text.isprintable() else json.dumps(text)


@signals_app.command("show")
def show_signal(
    signal_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one signal with its full record."""
    from inner_plane.journal.plain import Batch
    from inner_plane.journal.signals.events import events_read, history
    from inner_plane.journal.signals.record import signal_by_id_read

    parsed = _parse_id(signal_id)
    with journal_rows("signals show") as rows:
        # The row and why it was (or was not yet) delivered (every claim, deferral, recovery
        # and retry), in one round trip.
        batch = Batch(rows)
        found = batch.add(signal_by_id_read(parsed))
        history_read = batch.add(events_read(parsed))
        batch.run()
    row, events = found.value, history_read.value
    if row is None:
        fail(f"no signal {signal_id}", 1)
    record = row.public()
    # The whole history: its publication first, then every event, each with who acted.
    record["events"] = history(
        record,
        [
            {
                "at": event.at.isoformat(),
                "event": event.event,
                "reason": event.reason,
                "activation_id": None if event.activation_id is None else str(event.activation_id),
                "actor": event.actor,
            }
            for event in events
        ],
    )
    if as_json:
        print_json(record)
        return
    for key, value in record.items():
        if key == "events" or value is None or value == "":
            continue  # a field the signal does not have is left out, never printed as None
        if key == "data":
            value = json.dumps(value, ensure_ascii=False)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        typer.echo(f"{key:>18}: {_shown(str(value)) if key != 'data' else value}")
    typer.echo("history:")
    for event in record["events"]:
        reason = f"  {_shown(event['reason'])}" if event["reason"] else ""
        typer.echo(f"  {event['at']}  {event['event']:<16} by {_shown(event['by'])}{reason}")


@signals_app.command("retry")
def retry_signal(signal_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Bring a dead, dismissed or expired signal back to pending with fresh attempts."""
    from inner_plane import logs
    from inner_plane.attention.wakes import schedule_wake
    from inner_plane.journal.operator.lane_view import ActivationJournal

    journal = ActivationJournal(runtime().engine)
    signal = journal.retry_signal(_parse_id(signal_id))
    if signal is None:
        fail(f"signal {signal_id} is not dead, dismissed or expired (or does not exist)", 1)
    logs.emit("retried", **logs.of_signal(signal), reason="operator retry")
    if signal.mode.value in ("wake", "interrupt"):
        schedule_wake(runtime(), signal.delegate_id, urgent=True)
    typer.echo(f"retrying {signal.id}: state pending, attempts 0")


@signals_app.command("dismiss")
def dismiss_signal(
    signal_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[str, typer.Option("--reason")] = "dismissed by operator",
) -> None:
    """Settle a pending or dead signal as dismissed."""
    from inner_plane.journal.operator.lane_view import ActivationJournal

    journal = ActivationJournal(runtime().engine)
    signal = journal.dismiss_signal(_parse_id(signal_id), reason)
    if signal is None:
        fail(f"signal {signal_id} is not pending or dead (or does not exist)", 1)
    typer.echo(f"dismissed {signal.id}")


__all__ = ["Mode", "Trust", "publish_command", "signals_app"]
