"""docker-compose.yml and deploy/systemd run real `inner-plane` commands, the ones `up` runs.

No Docker engine or systemd here: the files are parsed and every command is resolved against the
CLI's registered commands and parsed with the CLI's own option parser.
"""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inner_plane.config import build_settings
from tests.support.deployment import is_setting, resolve, up_commands

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SYSTEMD = ROOT / "deploy" / "systemd"


def test_resolve_rejects_what_the_cli_does_not_have() -> None:
    for bad in (
        ["inner-plane", "wroker", "signals"],
        ["inner-plane", "db", "migrate"],
        ["inner-plane", "db"],
        ["inner-plane", "worker", "signals", "--threads", "4"],
        ["inner-plane", "worker", "gpu"],
        ["celery", "-A", "workers", "worker"],
    ):
        with pytest.raises(AssertionError):
            resolve(bad)


# docker-compose.yml ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def plane_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if (service.get("command") or [None])[0] == "inner-plane"
    }


def test_compose_has_the_whole_stack(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "migrate"} <= set(services)
    commands = {tuple(s["command"]) for s in plane_services(compose).values()}
    for expected in (
        ("inner-plane", "db", "upgrade"),
        ("inner-plane", "worker", "signals"),
        ("inner-plane", "worker", "activation", "--concurrency", "1"),
        ("inner-plane", "worker", "user_turns", "--concurrency", "1"),
        ("inner-plane", "worker", "periodic"),
        ("inner-plane", "beat"),
        ("inner-plane", "flower"),
        ("inner-plane", "serve"),
    ):
        assert expected in commands


def test_every_compose_command_is_a_real_cli_command(compose: dict[str, Any]) -> None:
    services = plane_services(compose)
    assert len(services) >= 7
    for name, service in services.items():
        assert isinstance(service["command"], list), f"{name}: use the list form"
        resolve(service["command"])


def test_compose_runs_every_process_that_up_runs(compose: dict[str, Any]) -> None:
    commands = [s["command"] for s in plane_services(compose).values()]
    for wanted in up_commands():
        assert any(command[: len(wanted)] == wanted for command in commands), (
            f"`{' '.join(wanted)}` runs under `inner-plane up` but not in docker-compose.yml"
        )


def test_compose_services_use_the_compose_stores_and_one_image(compose: dict[str, Any]) -> None:
    for name, service in plane_services(compose).items():
        env = service["environment"]
        assert "@postgres:5432/" in env["INNER_PLANE_DATABASE_URL"], name
        assert env["INNER_PLANE_DATABASE_URL"].startswith("postgresql://"), name
        assert env["INNER_PLANE_REDIS_URL"] == "redis://redis:6379/0", name
        assert service["build"] == "." and service["image"] == "inner-plane:local", name
    assert (ROOT / "Dockerfile").is_file()


def test_everything_waits_for_the_migration(compose: dict[str, Any]) -> None:
    services = plane_services(compose)
    migrate = compose["services"]["migrate"]
    assert migrate["command"] == ["inner-plane", "db", "upgrade"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name, service in services.items():
        if name == "migrate":
            continue
        condition = service["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name
    assert "healthcheck" in compose["services"]["postgres"]
    assert "healthcheck" in compose["services"]["redis"]


def test_activation_worker_runs_one_at_a_time(compose: dict[str, Any]) -> None:
    [activation] = [
        s for s in plane_services(compose).values() if s["command"][1:3] == ["worker", "activation"]
    ]
    assert activation["command"][3:] == ["--concurrency", "1"]


def test_flower_takes_basic_auth_from_the_shell_and_stays_on_loopback(
    compose: dict[str, Any],
) -> None:
    flower = compose["services"]["flower"]
    env = flower["environment"]
    # Passed through when set; unset, `inner-plane flower` makes its own credentials.
    assert env["FLOWER_BASIC_AUTH"] == "${FLOWER_BASIC_AUTH:-}"
    assert "FLOWER_UNAUTHENTICATED_API" not in env
    for service in compose["services"].values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port


ONE_SHOT = {"migrate", "create-operator"}
INTERPOLATION = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's `${NAME:-default}` as compose would fill it with NAME unset (`${NAME:?...}`,
    which refuses to start without NAME, gets a placeholder)."""
    return INTERPOLATION.sub(lambda m: m.group(3) if m.group(2) == "-" else "user:password", value)


def test_every_long_running_plane_process_has_a_plane_healthcheck(
    compose: dict[str, Any],
) -> None:
    for name, service in plane_services(compose).items():
        if name in ONE_SHOT:
            assert "healthcheck" not in service, name
            continue
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD" and test[1:3] == ["inner-plane", "health"], name
        resolve(test[1:])
        if service["command"][1] == "worker":  # the worker's own role and queue
            role = service["command"][2]
            assert test[3:7] == ["worker", role, "--queue", role], name
        interval = int(service["healthcheck"]["interval"].removesuffix("s"))
        assert interval >= 10, f"{name}: every probe starts a Python process"


def test_compose_environment_is_real_settings_and_valid(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, service in plane_services(compose).items():
        env = service["environment"]
        unknown = sorted(variable for variable in env if not is_setting(variable))
        assert not unknown, f"{name}: not settings of inner_plane/config.py: {unknown}"
        for variable, value in env.items():
            if value is None:  # passed through from the shell when set there
                monkeypatch.delenv(variable, raising=False)
            else:
                monkeypatch.setenv(variable, interpolate(str(value)))
        settings = build_settings()  # raises ConfigError naming any invalid value
        assert settings.redis_url == "redis://redis:6379/0", name


def test_compose_passes_the_model_settings_through(compose: dict[str, Any]) -> None:
    for name, service in plane_services(compose).items():
        env = service["environment"]
        for variable in ("INNER_PLANE_OPENAI_MODEL", "INNER_PLANE_OPENAI_API_KEY"):
            assert variable in env and env[variable] is None, f"{name}: {variable}"


def test_compose_redis_never_evicts_and_keeps_an_append_only_file(
    compose: dict[str, Any],
) -> None:
    command = [interpolate(str(word)) for word in compose["services"]["redis"]["command"]]
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--maxmemory-policy"] == "noeviction"
    assert options["--maxmemory"]


def test_compose_mounts_the_timers_file_from_the_host(compose: dict[str, Any]) -> None:
    for name, service in plane_services(compose).items():
        path = service["environment"]["INNER_PLANE_TIMERS_FILE"]
        volumes = [interpolate(volume) for volume in service["volumes"]]
        mounts = [volume for volume in volumes if volume.split(":")[1] == path]
        assert len(mounts) == 1, name
        host, _, mode = mounts[0].split(":")
        assert mode == "ro" and (ROOT / host).is_file(), name


def test_compose_serves_the_api_and_ui_port_and_offers_an_operator_credential(
    compose: dict[str, Any],
) -> None:
    api = compose["services"]["api"]
    port = api["environment"]["INNER_PLANE_API_PORT"]
    assert f"127.0.0.1:{port}:{port}" in api["ports"]
    operator = compose["services"]["create-operator"]
    assert operator["command"][:3] == ["inner-plane", "operators", "add"]
    assert operator["profiles"] == ["setup"] and operator["restart"] == "no"


def test_no_variable_is_required_so_one_shot_steps_run_with_nothing_set() -> None:
    """Compose interpolates the whole file for every command: a `${NAME:?...}` anywhere stops
    `docker compose run --rm create-operator` (the documented first step) unless NAME is set."""
    required = [
        m.group(0) for m in INTERPOLATION.finditer(COMPOSE.read_text()) if m.group(2) == "?"
    ]
    assert required == []


def test_compose_file_validates_against_the_compose_spec_schema(tmp_path: Path) -> None:
    """check-jsonschema with the compose-spec schema it vendors (no network), also seen to
    refuse a planted unknown service key."""
    command = [str(Path(sys.executable).with_name("check-jsonschema")), "--builtin-schema"]
    command += ["vendor.compose-spec"]
    done = subprocess.run([*command, str(COMPOSE)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    planted = yaml.safe_load(COMPOSE.read_text())
    planted["services"]["api"]["healthchek"] = planted["services"]["api"].pop("healthcheck")
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(planted))
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "healthchek" in done.stdout + done.stderr


def test_dockerfile_installs_dependencies_before_copying_the_source() -> None:
    """A source edit must not reinstall every dependency: the only file copied before the
    dependency install is pyproject.toml, and the package installs without dependencies."""
    steps = [
        line.split(None, 1)
        for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line and not line.startswith("#")
    ]
    copies = [i for i, (op, _) in enumerate(steps) if op == "COPY"]
    runs = [i for i, (op, _) in enumerate(steps) if op == "RUN"]
    deps = next(i for i in runs if "pip install -r" in steps[i][1])
    assert [steps[i][1] for i in copies if i < deps] == ["pyproject.toml ./"]
    package = next(i for i in runs if "pip install" in steps[i][1] and i > deps)
    assert "--no-deps" in steps[package][1]
    assert all(i < package for i in copies)


# deploy/systemd --------------------------------------------------------------------------------


def units() -> list[Path]:
    found = sorted(SYSTEMD.glob("*.service"))
    assert found
    return found


def read_unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


@pytest.mark.parametrize("path", units(), ids=lambda p: p.name)
def test_every_unit_runs_a_real_cli_command(path: Path) -> None:
    unit = read_unit(path)
    exec_start = shlex.split(unit["Service"]["ExecStart"])
    assert exec_start[0] == "/opt/inner-plane/venv/bin/inner-plane", exec_start
    resolve(["inner-plane", *exec_start[1:]])
    assert unit["Service"]["EnvironmentFile"] == "/etc/inner-plane/inner-plane.env"
    assert unit["Service"]["User"] == "inner-plane"
    assert unit["Install"]["WantedBy"] == "inner-plane.target"


def test_units_cover_every_process_and_wait_for_migrations() -> None:
    commands = {}
    for path in units():
        unit = read_unit(path)
        commands[path.name] = ["inner-plane", *shlex.split(unit["Service"]["ExecStart"])[1:]]
        if path.name != "inner-plane-migrate.service":
            assert "inner-plane-migrate.service" in unit["Unit"]["Requires"], path.name
            assert "inner-plane-migrate.service" in unit["Unit"]["After"], path.name
            # Longer than the default task hard limit for workers, so warm shutdown can finish.
            if "worker" in path.name:
                assert int(unit["Service"]["TimeoutStopSec"]) > build_settings().task_time_limit_s
    assert commands["inner-plane-migrate.service"] == ["inner-plane", "db", "upgrade"]
    assert commands["inner-plane-activation-worker.service"][-2:] == ["--concurrency", "1"]
    for wanted in [*up_commands(), ["inner-plane", "worker", "activation"]]:
        assert any(c[: len(wanted)] == wanted for c in commands.values()), wanted
    target = (SYSTEMD / "inner-plane.target").read_text()
    for name in commands:
        assert name in target


def test_env_example_settings_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    for line in (ROOT / "deploy" / "inner-plane.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            monkeypatch.setenv(key, value)
    settings = build_settings()  # raises ConfigError naming any invalid variable
    assert settings.database_url and settings.redis_url
