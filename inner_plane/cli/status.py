"""`inner-plane status [--json]`: the running plane at a glance; exit 0 healthy, 1 degraded,
2 down. Each problem comes with what to do about it."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from inner_plane.cli.common import import_redis_lean
from inner_plane.cli.locate import api_url, flower_url, plane_state
from inner_plane.config import load_settings


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _text(report: dict[str, Any]) -> list[str]:
    lines = [f"plane: {report['state']}"]
    for name, store in report["stores"].items():
        reach = store.get("reachable")
        state = "reachable" if reach else "UNREACHABLE" if reach is False else "not checked"
        schema = f", schema {', '.join(store['schema'])}" if store.get("schema") else ""
        lines.append(f"{name}: {state} ({store['url']}){schema}")
    for node, queues in sorted(report["workers"].items()):
        lines.append(f"worker {node}: alive, queues {', '.join(queues) or '-'}")
    if report["queues"]:
        depths = ", ".join(f"{q} {n}" for q, n in report["queues"].items())
        lines.append(f"queue depths: {depths}")
    if report["beat"]:
        lines.append(f"beat: last tick {_age(report['beat']['last_tick_age_s'])}")
    for name, endpoint in report["endpoints"].items():
        lines.append(f"{name}: {endpoint['url']} ({'ok' if endpoint['ok'] else 'DOWN'})")
    journal = report["journal"]
    if journal:
        oldest = journal["oldest_pending_s"]
        lines.append(
            f"signals: {journal['pending']} pending ({journal['due']} due), "
            f"{journal['claimed']} claimed, {journal['dead']} dead, "
            f"{journal.get('ambient', 0)}{'+' if journal.get('ambient_capped') else ''} ambient "
            "retained; oldest pending "
            f"{'none' if oldest is None else _age(oldest)}"
            f"; user turns queued {journal['queued_turns']}; "
            f"activations running {journal['running_activations']}"
        )
    if report["lanes"]:
        shown = len(report["lanes"])
        total = journal.get("delegates_with_backlog", shown)
        lines.append(f"lanes with due work (top {shown} of {total}):")
        for lane in report["lanes"]:
            lease = "running" if lane["leased"] else "idle"
            lines.append(
                f"  {lane['delegate_id']}: {lane['due']} due ({lane.get('waking', 0)} waking), "
                f"oldest {_age(lane['oldest_due_s'])}"
                f", {lease}, {lane['queued_turns']} user turn(s) queued"
            )
    if report.get("tokens_today"):
        lines.append("model tokens today (UTC), heaviest delegates:")
        for usage in report["tokens_today"]:
            lines.append(
                f"  {usage['delegate_id']}: {usage['tokens']} tokens ({usage['input_tokens']} in, "
                f"{usage['cached_tokens']} cached, {usage['output_tokens']} out, "
                f"{usage['reasoning_tokens']} reasoning) in {usage['calls']} call(s), "
                f"~${usage['cost_usd']:.4f}"
            )
    channels = report.get("channels") or {}
    for box in channels.get("mailboxes", []):
        state = "error: " + str(box["last_error"])[:120] if box["last_error"] else "ok"
        lines.append(
            f"mailbox {box['delegate_id']} ({box['mailbox']}): last poll "
            f"{_age(box['last_poll_age_s'])}, {'IDLE' if box['idle'] else 'polling'}, "
            f"backlog {box['backlog']}, {state}"
        )
    if channels.get("answers_pending"):
        waiting = ", ".join(f"{c} {n}" for c, n in channels["answers_pending"].items())
        lines.append(f"answers waiting to go out: {waiting}")
    if channels.get("counters"):
        counted = ", ".join(f"{k} {v:.0f}" for k, v in channels["counters"].items())
        lines.append(f"channel counters: {counted}")
    for problem in report["problems"]:
        lines.append(f"{problem['severity']}: {problem['what']}\n  -> {problem['do']}")
    return lines


def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="Lanes shown, by due backlog")] = 10,
    beat_max_age: Annotated[
        float, typer.Option("--beat-max-age", min=1, help="Seconds before beat counts as silent")
    ] = 60.0,
    api: Annotated[str | None, typer.Option("--api-url", help="Default: the plane's API")] = None,
    flower: Annotated[
        str | None, typer.Option("--flower-url", help="Default: the plane's Flower")
    ] = None,
) -> None:
    """Health of the running plane: stores and schema, workers and their queues, queue depths,
    beat, API and Flower, lanes, dead letters. Exit 0 healthy, 1 degraded, 2 down."""
    import_redis_lean()
    from inner_plane.services.status import DOWN, EXIT_CODES, Targets, collect

    settings = load_settings()
    # With configured stores (compose, Kubernetes) the API and Flower live elsewhere: checked
    # when named. A plane run by `up` has recorded where they are.
    endpoints: tuple[str | None, str | None] = (api, flower)
    if settings.database_url is None or settings.redis_url is None:
        state = plane_state(settings)
        if state is None:
            message = f"no plane running on {settings.data_dir.resolve()}"
            if as_json:
                problem = {"severity": DOWN, "what": message, "do": "start it: `inner-plane up`"}
                typer.echo(json.dumps({"state": DOWN, "problems": [problem]}))
            else:
                typer.echo(f"plane: down: {message}\n  -> start it: `inner-plane up`")
            raise typer.Exit(EXIT_CODES[DOWN])
        endpoints = (api or api_url(), flower or flower_url())
        settings = settings.model_copy(
            update={
                "database_url": settings.database_url or state.database_url,
                "redis_url": settings.redis_url or state.redis_url,
                "broker_url": settings.broker_url or state.broker_url,
            }
        )
    report = collect(
        Targets(
            settings=settings,
            api_url=endpoints[0],
            flower_url=endpoints[1],
            top_lanes=top,
            beat_max_age_s=beat_max_age,
        )
    ).public()
    if as_json:
        typer.echo(json.dumps(report, default=str))
    else:
        typer.echo("\n".join(_text(report)))
    raise typer.Exit(EXIT_CODES[report["state"]])
