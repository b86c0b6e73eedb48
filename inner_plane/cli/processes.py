"""`inner-plane up` and the per-process commands it (and docker-compose) runs."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from inner_plane.cli.common import settings
from inner_plane.cli.locate import plane_settings
from inner_plane.journal import database
from inner_plane.services.embedded import export_environment, resolve_services, started_services
from inner_plane.services.plane import PlaneState, clear_state, write_state
from inner_plane.services.processes import (
    ROLES,
    WORKER_ROLES,
    celery_command,
    default_processes,
)
from inner_plane.services.status import masked
from inner_plane.services.supervisor import Supervisor


def up() -> None:
    """Start embedded services (unless URLs are set), migrate, and supervise the workers."""
    resolved = resolve_services(settings())
    services = started_services()
    for line in services.describe() if services else []:
        typer.echo(f"inner-plane: {line}")
    assert resolved.database_url is not None
    database.upgrade(resolved.database_url)
    # Passwords stay out of the console (a RabbitMQ or managed PostgreSQL URL carries one).
    journal = masked(database.sqlalchemy_url(resolved.database_url))
    typer.echo(f"inner-plane: journal migrated: {journal}")
    typer.echo(f"inner-plane: broker: {masked(resolved.effective_broker_url)}")
    typer.echo(f"inner-plane: operator UI and API: http://{resolved.api_host}:{resolved.api_port}/")
    data_dir = resolved.data_dir

    def stopped() -> None:
        clear_state(data_dir, os.getpid())
        if services:
            services.stop()

    supervisor = Supervisor(
        default_processes(resolved), export_environment(resolved), on_stop=stopped
    )
    write_state(
        data_dir,
        PlaneState(
            pid=os.getpid(),
            database_url=resolved.database_url,
            redis_url=resolved.redis_url or "",
            broker_url=resolved.effective_broker_url,
            api_url=f"http://{resolved.api_host}:{resolved.api_port}/",
            flower_url=f"http://{resolved.flower_address}:{resolved.flower_port}/",
        ),
    )
    raise typer.Exit(supervisor.run())


def _exec(command: list[str]) -> None:
    # Configured stores, or the running plane's: a process that execs into Celery must never
    # start embedded servers (their handles would leak past the exec).
    resolved = plane_settings()
    resolved.data_dir.mkdir(parents=True, exist_ok=True)
    env = export_environment(resolved)
    sys.stdout.flush()
    os.execvpe(command[0], command, env)


def worker(
    role: Annotated[str, typer.Argument(help="signals | activation | user_turns | periodic")],
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=1)] = None,
) -> None:
    """Run one Celery worker role (what `up` and docker-compose start)."""
    if role not in WORKER_ROLES:
        typer.echo(f"inner-plane: error: unknown worker role {role!r}", err=True)
        raise typer.Exit(2)
    _exec(celery_command(role, settings(), concurrency))


def beat() -> None:
    """Run Celery beat with the plane's schedule."""
    _exec(celery_command("beat", settings()))


def flower() -> None:
    """Run Flower (monitoring) on INNER_PLANE_FLOWER_ADDRESS:INNER_PLANE_FLOWER_PORT."""
    _exec(celery_command("flower", settings()))


__all__ = ["ROLES", "beat", "flower", "up", "worker"]
