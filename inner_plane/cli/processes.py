"""`inner-plane up` and the per-process commands it (and docker-compose) runs."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Annotated

import typer

from inner_plane.cli.common import fail, settings
from inner_plane.cli.locate import plane_settings
from inner_plane.config import Settings
from inner_plane.services.embedded import export_environment, free_port
from inner_plane.services.plane import PlaneState, clear_state, running_plane, write_state
from inner_plane.services.processes import (
    FLOWER_CREDENTIALS,
    ROLES,
    WORKER_ROLES,
    ProcessSpec,
    api_url,
    celery_command,
    default_processes,
    flower_credentials,
    flower_url,
)


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _choose_ports(configured: Settings, auto_ports: bool) -> dict[str, int]:
    """Check every port `up` will bind before anything starts; fail naming the first taken one
    (or, with --auto-ports, pick free ones)."""
    chosen: dict[str, int] = {}
    wanted = [
        ("api_port", "INNER_PLANE_API_PORT", configured.api_host, configured.api_port),
        ("flower_port", "INNER_PLANE_FLOWER_PORT", configured.flower_address,
         configured.flower_port),
    ]  # fmt: skip
    taken: set[int] = set()
    for field, variable, host, port in wanted:
        if port not in taken and port_free(host, port):
            chosen[field] = port
        elif auto_ports:
            chosen[field] = free_port(host)
            typer.echo(f"inner-plane: port {port} ({variable}) is in use; using {chosen[field]}")
        else:
            fail(
                f"port {port} ({variable}) is in use: stop what holds it, set {variable}, "
                "or run `inner-plane up --auto-ports`",
                1,
            )
        taken.add(chosen[field])
    return chosen


def _listening(pid: int, port: int) -> bool:
    """Whether the process ``pid`` (or one of its children) listens on ``port``: the URL `up`
    prints is served by its own child, not by someone else's server."""
    import psutil  # type: ignore[import-untyped]

    try:
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                    return True
    except psutil.Error:
        return False
    return False


def _probe(resolved: Settings, started_at: float) -> object:
    from inner_plane.services.probes import beat_tick_age, http_check, redis_client
    from inner_plane.services.supervisor import Child

    def probe(child: Child) -> bool:
        spec: ProcessSpec = child.spec
        assert child.process is not None
        if spec.node is not None:
            from inner_plane import celery_bridge

            try:
                return celery_bridge.ping_worker(resolved, spec.node, timeout=1.0)
            except Exception:
                return False
        if spec.health_url is not None:
            if spec.port is not None and not _listening(child.process.pid, spec.port):
                return False
            return http_check(spec.health_url, expect=spec.health_expect, timeout=2.0).ok
        if spec.name == "beat":
            assert resolved.redis_url is not None
            try:
                age = beat_tick_age(redis_client(resolved.redis_url))
            except Exception:
                return False
            return age is not None and age <= time.monotonic() - started_at + 1.0
        return True

    return probe


def up(
    auto_ports: Annotated[
        bool, typer.Option("--auto-ports", help="Pick free ports for the API and Flower if taken")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show every process's whole output")
    ] = False,
) -> None:
    """Run the whole plane here: embedded PostgreSQL and Redis (unless URLs are set), migrations,
    the workers, beat, the API and Flower, supervised. Ready when every one of them answers."""
    configured = settings()
    data_dir = configured.data_dir.resolve()
    plane = running_plane(data_dir)
    if plane is not None:
        fail(f"a plane already runs on {data_dir} (`inner-plane up`, pid {plane.pid})", 1)
    resolved = configured.model_copy(update=_choose_ports(configured, auto_ports))
    started_at = time.monotonic()

    from inner_plane.journal import database
    from inner_plane.services.embedded import EmbeddedServiceError, EmbeddedServices
    from inner_plane.services.supervisor import Supervisor

    services = None
    if resolved.database_url is None or resolved.redis_url is None:
        services = EmbeddedServices(resolved)
        try:
            resolved = services.start()
        except EmbeddedServiceError as error:
            fail(str(error), 1)
        for line in services.describe():
            typer.echo(f"inner-plane: {line}")
    assert resolved.database_url is not None and resolved.redis_url is not None
    database.upgrade(resolved.database_url)
    heads = ", ".join(sorted(database.expected_heads(resolved.database_url)))
    typer.echo(f"inner-plane: journal migrated (schema {heads})")
    env = export_environment(resolved)
    env["INNER_PLANE_API_PORT"] = str(resolved.api_port)
    env["INNER_PLANE_FLOWER_PORT"] = str(resolved.flower_port)
    write_state(
        data_dir,
        PlaneState(
            pid=os.getpid(),
            database_url=resolved.database_url,
            redis_url=resolved.redis_url,
            broker_url=resolved.effective_broker_url,
            api_url=api_url(resolved),
            flower_url=flower_url(resolved),
        ),
    )
    flower_sign_in = ""
    if not (os.environ.get("FLOWER_BASIC_AUTH") or os.environ.get("FLOWER_AUTH")):
        flower_credentials(data_dir)
        flower_sign_in = f" (user:password in {data_dir / FLOWER_CREDENTIALS})"
    supervisor = Supervisor(
        default_processes(resolved),
        env,
        log_dir=data_dir / "logs",
        services=services,
        probe=_probe(resolved, started_at),  # type: ignore[arg-type]
        verbose=verbose,
        on_ready=lambda: [
            f"operator UI and API: {api_url(resolved)}",
            f"Flower: {flower_url(resolved)}{flower_sign_in}",
        ],
        on_stop=lambda: clear_state(data_dir, os.getpid()),
    )
    raise typer.Exit(supervisor.run())


def _exec(command: list[str], flower: bool = False) -> None:
    # Configured stores, or the running plane's: a process that execs into Celery must never
    # start embedded servers (their handles would leak past the exec).
    resolved = plane_settings()
    resolved.data_dir.mkdir(parents=True, exist_ok=True)
    env = export_environment(resolved)
    if flower and not (env.get("FLOWER_BASIC_AUTH") or env.get("FLOWER_AUTH")):
        # Through the environment, not the command line (which every local user can read).
        env["FLOWER_BASIC_AUTH"] = flower_credentials(resolved.data_dir.resolve())
    sys.stdout.flush()
    os.execvpe(command[0], command, env)


def worker(
    role: Annotated[str, typer.Argument(help="signals | activation | user_turns | periodic")],
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=1)] = None,
) -> None:
    """Run one Celery worker role (what `up` and docker-compose start)."""
    if role not in WORKER_ROLES:
        fail(f"unknown worker role {role!r} ({', '.join(WORKER_ROLES)})")
    _exec(celery_command(role, settings(), concurrency))


def beat() -> None:
    """Run Celery beat with the plane's schedule."""
    _exec(celery_command("beat", settings()))


def flower() -> None:
    """Run Flower (monitoring) on INNER_PLANE_FLOWER_ADDRESS:INNER_PLANE_FLOWER_PORT, behind
    basic authentication (the user:password in <data dir>/flower-credentials, made on first
    start; FLOWER_BASIC_AUTH overrides it)."""
    _exec(celery_command("flower", settings()), flower=True)


__all__ = ["ROLES", "beat", "flower", "up", "worker"]
