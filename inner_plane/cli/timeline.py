"""`inner-plane timeline --delegate D`: the conversation timeline replayed from stored events;
with `--follow`, then the entries as they commit, through the API's live feed."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

import httpx
import typer

from inner_plane.cli.common import FAILURE, fail, print_json, runtime, settings
from inner_plane.timeline import live_entry, render_line, replay

TOKEN_ENV = "INNER_PLANE_OPERATOR_TOKEN"


def timeline(
    delegate: Annotated[str, typer.Option("--delegate")] = "default",
    conversation: Annotated[
        str | None, typer.Option("--conversation", help="One conversation id (default: all)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing entries as they commit")
    ] = False,
    api: Annotated[
        str | None,
        typer.Option("--api", help="API to follow (default: INNER_PLANE_API_HOST/PORT)"),
    ] = None,
    token: Annotated[
        str | None, typer.Option("--token", help=f"Operator token (default: ${TOKEN_ENV})")
    ] = None,
) -> None:
    """Replay a delegate's conversation timeline: messages, tool calls, memory retrieval,
    inner context and internal activity, in order."""
    if follow:
        configured = settings()
        base = (api or f"http://{configured.api_host}:{configured.api_port}").rstrip("/")
        _follow(base, delegate, token or os.environ.get(TOKEN_ENV), as_json)
        return
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


def _show(item: Mapping[str, Any], as_json: bool) -> None:
    typer.echo(json.dumps(item, default=str) if as_json else render_line(item))


def _sse(response: httpx.Response) -> Iterator[tuple[str | None, str, str]]:
    ident: str | None = None
    name, data = "message", list[str]()
    for line in response.iter_lines():
        if line == "":
            if data:
                yield ident, name, "\n".join(data)
            name, data = "message", []
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "id":
                ident = value
            elif key == "event":
                name = value
            elif key == "data":
                data.append(value)


def _follow(base: str, delegate: str, token: str | None, as_json: bool) -> None:
    """Print the latest entries, then each new one: a `timeline` event names new entries, which
    are fetched after the last one shown; live-only events are shown as they come."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    client = httpx.Client(base_url=base, headers=headers, timeout=httpx.Timeout(30, read=None))

    def entries_after(after: int | None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": 500} if after is None else {"after": after, "limit": 500}
        response = client.get(f"/v1/delegates/{delegate}/timeline", params=params)
        if response.status_code in (401, 403):
            fail(f"{base}: {response.json().get('message')} (give --token or ${TOKEN_ENV})")
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["entries"]
        return found

    try:
        shown = entries_after(None)
    except httpx.HTTPError as error:
        fail(f"cannot reach the API at {base}: {error}", FAILURE)
    for item in shown[-20:]:
        _show(item, as_json)
    last = shown[-1]["seq"] if shown else 0
    typer.echo(f"inner-plane: following {delegate} at {base} (Ctrl-C to stop)", err=True)
    sys.stderr.flush()
    last_event: str | None = None
    while True:
        try:
            resume = {} if last_event is None else {"Last-Event-ID": last_event}
            with client.stream(
                "GET",
                "/v1/events",
                params={"delegate": delegate, "topic": "timeline,live"},
                headers=resume,
            ) as response:
                response.raise_for_status()
                # Entries committed between the first read and the subscription.
                for item in entries_after(last):
                    _show(item, as_json)
                    last = item["seq"]
                for ident, name, data in _sse(response):
                    last_event = ident or last_event
                    if name == "live":
                        shown_live = live_entry(json.loads(data).get("data"))
                        if shown_live is not None:
                            _show(shown_live, as_json)
                    elif name in ("timeline", "reset"):
                        for item in entries_after(last):
                            _show(item, as_json)
                            last = item["seq"]
        except KeyboardInterrupt:
            return
        except httpx.HTTPError as error:
            typer.echo(f"inner-plane: live feed interrupted ({error}); reconnecting", err=True)
            time.sleep(1.0)
