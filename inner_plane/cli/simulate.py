"""`inner-plane simulate --since ISO [--until ISO] [--delegate D] --policy FILE [--json]`: replay
the journal's recorded signals under a candidate attention policy and compare with the record
(see docs/policy.md). Reads only: one READ ONLY transaction; no Redis, no Celery, no model."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from inner_plane.cli.common import fail, print_json, settings


def parse_instant(name: str, value: str | None) -> datetime | None:
    """An ISO-8601 instant with its offset (a naive time is ambiguous: refused)."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        fail(f"{name}: not an ISO-8601 instant: {value!r}")
    if moment.tzinfo is None:
        fail(f"{name}: give the offset (e.g. {value}Z or {value}+00:00)")
    return moment.astimezone(UTC)


def simulate(
    since: Annotated[str, typer.Option(help="ISO-8601 instant: replay signals from here")],
    policy: Annotated[Path, typer.Option(help="the candidate policy TOML file")],
    until: Annotated[str | None, typer.Option(help="ISO-8601 instant (default: now)")] = None,
    delegate: Annotated[str | None, typer.Option(help="one delegate only")] = None,
    tolerance: Annotated[
        float, typer.Option(min=0.0, max=3600.0, help="seconds a reproduced start may differ")
    ] = 2.0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="processes to split the replay across (default: the CPU count, "
            "at most 4); the report is the same whatever the number",
        ),
    ] = None,
) -> None:
    """Replay the recorded signals under a candidate policy: activations, delays, interrupts,
    budget deferrals and model calls, recorded against candidate."""
    from inner_plane.attention.document import PolicyError, SettingsDefaults, parse_document
    from inner_plane.cli.policy import read_policy_file
    from inner_plane.journal.database import check_schema, get_engine
    from inner_plane.services.embedded import resolve_services
    from inner_plane.signals.kinds import default_registry
    from inner_plane.signals.model import IDENTIFIER_RE
    from inner_plane.simulator.replay import default_workers, text_report
    from inner_plane.simulator.replay import simulate as replay

    start = parse_instant("--since", since)
    end = parse_instant("--until", until) or datetime.now(UTC)
    assert start is not None
    if end <= start:
        fail("--until: must be after --since")
    if delegate is not None and IDENTIFIER_RE.fullmatch(delegate) is None:
        fail("--delegate: 1-128 characters of A-Z a-z 0-9 . _ : -")
    configured = resolve_services(settings())
    registry = default_registry()
    data = read_policy_file(policy)
    try:
        document = parse_document(
            data, (k.kind for k in registry.kinds()), SettingsDefaults.of(configured)
        )
    except PolicyError as error:
        for where, why in error.problems:
            typer.echo(f"inner-plane: error: {policy}: {where}: {why}", err=True)
        raise typer.Exit(2) from None
    assert configured.database_url is not None
    engine = get_engine(configured.database_url, 2)
    check_schema(engine, configured.database_url)
    report = replay(
        engine,
        registry,
        configured,
        document,
        start,
        end,
        delegate,
        tolerance_s=tolerance,
        label=str(policy),
        workers=default_workers() if workers is None else workers,
    )
    if as_json:
        print_json(report)
        return
    typer.echo(text_report(report), nl=False)
