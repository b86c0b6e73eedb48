"""The long-running processes of a deployment, as `inner-plane` commands.

``inner-plane up`` supervises these; docker-compose.yml and deploy/ run the very same commands,
one per container or unit.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from inner_plane import celery_bridge as names
from inner_plane.config import Settings


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    command: list[str]
    where: str


def celery_command(role: str, settings: Settings, concurrency: int | None = None) -> list[str]:
    """The `celery` invocation behind `inner-plane worker ROLE` / `beat` / `flower`."""
    base = [sys.executable, "-m", "celery", "-A", "workers"]
    level = ["--loglevel", settings.log_level]
    if role == "signals":
        return [
            *base, "worker", "-Q", names.SIGNALS_QUEUE, "-n", "signals@%h",
            "-c", str(concurrency or 2), "--prefetch-multiplier", "1", *level,
        ]  # fmt: skip
    if role == "activation":
        # One activation at a time per worker; the lease makes it one per delegate overall.
        return [
            *base, "worker", "-Q", f"{names.ACTIVATION_QUEUE}",
            "-n", "activation@%h", "-c", str(concurrency or 1), "--prefetch-multiplier", "1",
            *level,
        ]  # fmt: skip
    if role == "user_turns":
        # Journals each turn at once and wakes the lane; it never runs an activation.
        return [
            *base, "worker", "-Q", names.USER_TURNS_QUEUE, "-n", "user_turns@%h",
            "-c", str(concurrency or 1), "--prefetch-multiplier", "1", *level,
        ]  # fmt: skip
    if role == "periodic":
        return [
            *base, "worker", "-Q", names.PERIODIC_QUEUE, "-n", "periodic@%h",
            "-c", str(concurrency or 1), "--prefetch-multiplier", "1", *level,
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


def default_processes(settings: Settings) -> list[ProcessSpec]:
    inner = [sys.executable, "-m", "inner_plane"]
    flower = f"http://{settings.flower_address}:{settings.flower_port}/"
    api = f"http://{settings.api_host}:{settings.api_port}/"
    return [
        ProcessSpec("signals-worker", [*inner, "worker", "signals"], "queue 'signals'"),
        ProcessSpec(
            "activation-worker",
            [*inner, "worker", "activation"],
            "queue 'activation' (concurrency 1, prefetch 1)",
        ),
        ProcessSpec(
            "user-turns-worker",
            [*inner, "worker", "user_turns"],
            "queue 'user_turns' (journals turns, never runs an activation)",
        ),
        ProcessSpec("periodic-worker", [*inner, "worker", "periodic"], "queue 'periodic'"),
        ProcessSpec("beat", [*inner, "beat"], "timers tick, sweeper, retention"),
        ProcessSpec("api", [*inner, "serve"], api),
        ProcessSpec("flower", [*inner, "flower"], flower),
    ]
