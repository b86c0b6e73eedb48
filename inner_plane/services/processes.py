"""The long-running processes of a deployment, as `inner-plane` commands.

``inner-plane up`` supervises these; docker-compose.yml and deploy/ run the very same commands,
one per container or unit.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from inner_plane.config import Settings

SIGNALS_QUEUE = "signals"
ACTIVATION_QUEUE = "activation"
PERIODIC_QUEUE = "periodic"
USER_TURNS_QUEUE = "user_turns"
# (The same names as ``celery_bridge``'s, spelled here so that listing processes loads no Celery.)


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    command: list[str]
    where: str
    # How `up` knows the process answers: a Celery node to ping, or a URL to GET.
    node: str | None = None
    health_url: str | None = None
    health_expect: str | None = None
    port: int | None = None
    # Seconds between SIGTERM and SIGKILL at shutdown.
    stop_grace_s: float = 20.0


def node_name(role: str) -> str:
    """The Celery node name `inner-plane worker ROLE` takes (Celery's ``ROLE@%h``)."""
    return f"{role}@{socket.gethostname()}"


def celery_command(role: str, settings: Settings, concurrency: int | None = None) -> list[str]:
    """The `celery` invocation behind `inner-plane worker ROLE` / `beat` / `flower`."""
    # `celery -A workers`, with the collector held while Celery and the app load (workers/__main__).
    base = [sys.executable, "-m", "workers"]
    level = ["--loglevel", settings.log_level]
    # Without Celery's worker-to-worker steps, which the plane never uses (its tasks are fenced by
    # the journal, not revoked; `up`, health and status ping over remote control, which stays).
    # Mingle waits a second at every start for other workers' revoked ids, so a worker `up`
    # restarts after a crash consumes again a second later; Gossip has each worker read every
    # other's heartbeats, and after a broker restart its step fails to restart and logs an ERROR
    # ("Error on restarting Gossip") for a fault that was not one.
    quiet = ["--without-mingle", "--without-gossip"]
    if role == "signals":
        return [
            *base, "worker", "-Q", SIGNALS_QUEUE, "-n", "signals@%h",
            "-c", str(concurrency or 2), "--prefetch-multiplier", "1", *quiet, *level,
        ]  # fmt: skip
    if role == "activation":
        # One activation at a time per worker; the lease makes it one per delegate overall.
        return [
            *base, "worker", "-Q", ACTIVATION_QUEUE,
            "-n", "activation@%h", "-c", str(concurrency or 1), "--prefetch-multiplier", "1",
            *quiet, *level,
        ]  # fmt: skip
    if role == "user_turns":
        # Journals each turn at once and wakes the lane; it never runs an activation.
        return [
            *base, "worker", "-Q", USER_TURNS_QUEUE, "-n", "user_turns@%h",
            "-c", str(concurrency or 1), "--prefetch-multiplier", "1", *quiet, *level,
        ]  # fmt: skip
    if role == "periodic":
        return [
            *base, "worker", "-Q", PERIODIC_QUEUE, "-n", "periodic@%h",
            "-c", str(concurrency or 1), "--prefetch-multiplier", "1", *quiet, *level,
        ]  # fmt: skip
    if role == "beat":
        schedule = settings.data_dir.resolve() / "celerybeat-schedule"
        return [*base, "beat", "-s", str(schedule), *level]
    if role == "flower":
        return [
            *base, "flower", f"--address={settings.flower_address}",
            f"--port={settings.flower_port}",
        ]  # fmt: skip
    raise ValueError(f"unknown process role {role!r}")


WORKER_ROLES = ("signals", "activation", "user_turns", "periodic")
ROLES = (*WORKER_ROLES, "beat", "flower")


FLOWER_CREDENTIALS = "flower-credentials"


def flower_credentials(data_dir: Path) -> str:
    """``user:password`` for Flower's basic authentication: made once, random, and kept in
    ``<data dir>/flower-credentials`` (readable by its owner only), where the operator reads
    it (README, "Flower"). Flower shows task arguments: no page of it is served without it."""
    path = data_dir / FLOWER_CREDENTIALS
    try:
        stored = path.read_text().strip()
    except FileNotFoundError:
        stored = ""
    if ":" in stored:
        return stored
    data_dir.mkdir(parents=True, exist_ok=True)
    made = f"operator:{secrets.token_urlsafe(24)}"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(made + "\n")
    return made


def _local(host: str) -> str:
    return "127.0.0.1" if host in {"0.0.0.0", "::", ""} else host


def api_url(settings: Settings) -> str:
    return f"http://{_local(settings.api_host)}:{settings.api_port}/"


def flower_url(settings: Settings) -> str:
    return f"http://{_local(settings.flower_address)}:{settings.flower_port}/"


def default_processes(settings: Settings) -> list[ProcessSpec]:
    inner = [sys.executable, "-m", "inner_plane"]
    api, flower = api_url(settings), flower_url(settings)
    return [
        ProcessSpec(
            "signals-worker", [*inner, "worker", "signals"], "queue 'signals'",
            node=node_name("signals"),
        ),
        ProcessSpec(
            "activation-worker", [*inner, "worker", "activation"],
            "queue 'activation' (concurrency 1, prefetch 1)", node=node_name("activation"),
        ),
        ProcessSpec(
            "user-turns-worker", [*inner, "worker", "user_turns"],
            "queue 'user_turns' (journals turns, never runs an activation)",
            node=node_name("user_turns"),
        ),
        ProcessSpec(
            "periodic-worker", [*inner, "worker", "periodic"], "queue 'periodic'",
            node=node_name("periodic"),
        ),
        ProcessSpec("beat", [*inner, "beat"], "timers, sweeper, retention"),
        ProcessSpec(
            "api", [*inner, "serve"], api, health_url=api + "healthz",
            health_expect='"ok"', port=settings.api_port,
        ),
        # Flower may ignore SIGTERM while its broker is down: a short grace, then SIGKILL.
        ProcessSpec(
            "flower", [*inner, "flower"], flower, health_url=flower + "healthcheck",
            health_expect="OK", port=settings.flower_port, stop_grace_s=5.0,
        ),
    ]  # fmt: skip
