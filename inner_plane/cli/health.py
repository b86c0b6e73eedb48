"""`inner-plane health ...`: one-shot probes for container healthchecks and Kubernetes.

Each prints one line and exits 0 when healthy, 1 when not. They start nothing: with no store URLs
configured they talk to the plane `inner-plane up` runs on the data dir.

``--live`` makes a probe a liveness probe: it fails only for a fault of the process itself, never
for a store that does not answer (a PostgreSQL, Redis or broker outage must not restart every pod
of the plane; readiness probes, without ``--live``, report those).
"""

from __future__ import annotations

import socket
from typing import Annotated, NoReturn

import typer

from inner_plane.cli.locate import api_url, flower_url, plane_settings

Live = Annotated[
    bool,
    typer.Option("--live", help="Liveness: healthy when the stores do not answer (not our fault)"),
]

health_app = typer.Typer(
    help="One-shot probes for healthchecks: exit 0 healthy, 1 not; one line of output.",
    no_args_is_help=True,
)


def _answer(ok: bool, what: str, detail: str) -> NoReturn:
    typer.echo(f"{'ok' if ok else 'unhealthy'}: {what}: {detail}")
    raise typer.Exit(0 if ok else 1)


@health_app.command("worker")
def worker(
    role: Annotated[
        str | None,
        typer.Argument(help="signals, activation, user_turns or periodic (default: the --queue's)"),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", "-Q", help="Also require this queue consumed")
    ] = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help="Node name (default: ROLE@HOSTNAME)"),
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds")] = 3.0,
    live: Live = False,
) -> None:
    """Celery-ping the worker of this host (its node name is ROLE@HOSTNAME). With --live, an
    unreachable broker counts as healthy: only a worker that does not answer a broker that does
    is unhealthy (a consumer stuck after a reconnect, a hung main loop)."""
    from inner_plane import celery_bridge

    if node is None:
        name = role or queue
        if name is None:
            typer.echo("inner-plane: error: give a ROLE or --queue", err=True)
            raise typer.Exit(2)
        node = f"{name}@{socket.gethostname()}"
    settings = plane_settings()
    try:
        answered = celery_bridge.ping_worker(settings, node, timeout)
    except Exception as error:
        _answer(live, f"worker {node}", f"broker unreachable ({str(error)[:200]})")
    if not answered and live and not celery_bridge.broker_answers(settings, timeout):
        _answer(True, f"worker {node}", "broker unreachable: not this worker's fault")
    if not answered:
        _answer(False, f"worker {node}", f"no answer to a ping within {timeout:g} s")
    if queue is not None:
        queues = celery_bridge.worker_queues(settings, [node], timeout).get(node, [])
        if queue not in queues:
            _answer(False, f"worker {node}", f"does not consume queue {queue!r} ({queues})")
    _answer(True, f"worker {node}", "answered a ping")


@health_app.command("api")
def api(
    url: Annotated[
        str | None, typer.Option("--url", help="Base URL (default: the plane's API)")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds")] = 3.0,
    live: Live = False,
) -> None:
    """GET the API's /healthz (the API process and its journal); with --live, /livez (the
    process alone)."""
    from inner_plane.services.probes import http_check

    base = url or api_url()
    path = "/livez" if live else "/healthz"
    check = http_check(base.rstrip("/") + path, expect='"ok"', timeout=timeout)
    _answer(check.ok, "api", check.detail)


@health_app.command("flower")
def flower(
    url: Annotated[
        str | None, typer.Option("--url", help="Base URL (default: the plane's Flower)")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds")] = 3.0,
) -> None:
    """GET Flower's /healthcheck."""
    from inner_plane.services.probes import http_check

    base = url or flower_url()
    check = http_check(base.rstrip("/") + "/healthcheck", expect="OK", timeout=timeout)
    _answer(check.ok, "flower", check.detail)


@health_app.command("beat")
def beat(
    max_age: Annotated[
        float, typer.Option("--max-age", min=1, help="Seconds since beat's last tick")
    ] = 60.0,
    live: Live = False,
) -> None:
    """Beat's last tick (recorded in Redis by beat itself) is recent enough. With --live, an
    unreachable Redis counts as healthy (beat cannot record its ticks there, by no fault of its
    own)."""
    from inner_plane.cli.common import import_redis_lean

    import_redis_lean()
    import redis

    from inner_plane.services.probes import beat_tick_age, redis_client

    settings = plane_settings()
    assert settings.redis_url is not None
    try:
        age = beat_tick_age(redis_client(settings.redis_url))
    except redis.RedisError as error:
        _answer(live, "beat", f"Redis unreachable ({str(error)[:200]})")
    if age is None:
        _answer(False, "beat", "no tick recorded yet")
    _answer(age <= max_age, "beat", f"last tick {age:.1f} s ago (bound {max_age:g} s)")
