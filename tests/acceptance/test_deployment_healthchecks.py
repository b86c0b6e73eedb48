"""The healthchecks of docker-compose.yml and the probes of deploy/kubernetes, run against a plane
started from the very commands those files run (real worker, beat, API and Flower processes):
every one exits 0."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from inner_plane.services.embedded import free_port
from tests.support.kustomize import containers, render
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT, Stores

pytestmark = pytest.mark.acceptance

CLI = [sys.executable, "-m", "inner_plane"]
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
READY = {"worker": " ready.", "beat": "beat: Starting", "serve": "Uvicorn running"}


def compose_services() -> dict[str, dict[str, Any]]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return {
        name: service
        for name, service in services.items()
        if service.get("command", [None])[0] == "inner-plane" and "healthcheck" in service
    }


def health_commands() -> list[list[str]]:
    """Every healthcheck and probe command of the deployment files, once each."""
    found = [s["healthcheck"]["test"][1:] for s in compose_services().values()]
    for container in containers(render(ROOT / "deploy" / "kubernetes" / "overlays" / "example")):
        found.extend(container[p]["exec"]["command"] for p in PROBES if p in container)
    unique: list[list[str]] = []
    for command in found:
        if command not in unique:
            unique.append(command)
    return unique


def test_every_healthcheck_and_probe_passes_against_a_running_plane(
    stores: Stores, tmp_path: Path, children: list[ChildProcess]
) -> None:
    env = stores.env(
        INNER_PLANE_API_PORT=str(free_port()),
        INNER_PLANE_FLOWER_PORT=str(free_port()),
        INNER_PLANE_DATA_DIR=str(tmp_path / "data"),
        FLOWER_BASIC_AUTH="ops:test",
    )
    started = []
    for name, service in compose_services().items():
        command = [*CLI, *service["command"][1:]]
        started.append((service["command"][1], ChildProcess(name, command, env, tmp_path).start()))
    children.extend(child for _, child in started)
    for kind, child in started:
        child.wait_for(READY.get(kind, "Visit me at"), timeout=120)

    commands = health_commands()
    assert len(commands) >= 7

    def health(command: list[str]) -> subprocess.CompletedProcess[str]:
        for _ in range(20):  # beat may not have ticked yet
            done = subprocess.run(
                [*CLI, *command[1:]], env=env, cwd=ROOT, capture_output=True, text=True,
                timeout=90,
            )  # fmt: skip
            if done.returncode == 0:
                break
            time.sleep(0.5)
        return done

    for command in commands:
        assert command[:2] == ["inner-plane", "health"], command
    # All at once, as the orchestrators run them (each waits on its own ping or request).
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        results = list(pool.map(health, commands))
    for command, done in zip(commands, results, strict=True):
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert done.stdout.startswith("ok: "), done.stdout
