"""What the deployment files are checked against: the CLI's own commands and settings, and the
processes `inner-plane up` runs."""

from __future__ import annotations

from typing import Any

import typer

from inner_plane.cli import app
from inner_plane.config import ENV_PREFIX, Settings, build_settings
from inner_plane.services.processes import WORKER_ROLES, default_processes

# Environment variables the plane's processes read that are not INNER_PLANE_* settings.
OTHER_VARIABLES = {"FLOWER_BASIC_AUTH"}


def resolve(args: list[str]) -> Any:
    """The CLI command `inner-plane ARGS` runs; fail if any word or option is not the CLI's."""
    assert args and args[0] == "inner-plane", args
    command: Any = typer.main.get_command(app)
    rest = args[1:]
    path = ["inner-plane"]
    while hasattr(command, "commands"):  # a group: the next word names a sub-command
        assert rest, f"{' '.join(path)} needs a sub-command"
        sub = command.commands.get(rest[0])
        assert sub is not None, f"{' '.join(path)} has no command {rest[0]!r}"
        path.append(rest[0])
        command, rest = sub, rest[1:]
    # Parse the arguments and options exactly as the CLI would (without running the command).
    try:
        context = command.make_context(" ".join(path), list(rest))
    except Exception as error:  # the CLI's usage errors (typer vendors click)
        raise AssertionError(f"{' '.join(args)}: {error}") from error
    if path[1:] == ["worker"]:
        assert context.params["role"] in WORKER_ROLES, context.params
    return command


def up_commands() -> list[list[str]]:
    """What `inner-plane up` supervises, spelled as `inner-plane ...` commands."""
    settings = build_settings(database_url="postgresql://h/db", redis_url="redis://h:1/0")
    commands = []
    for spec in default_processes(settings):
        assert spec.command[1:3] == ["-m", "inner_plane"], spec.command
        commands.append(["inner-plane", *spec.command[3:]])
    return commands


def is_setting(variable: str) -> bool:
    """An environment variable some process reads: an INNER_PLANE_* setting or a known other."""
    if variable in OTHER_VARIABLES:
        return True
    field = variable.removeprefix(ENV_PREFIX).lower()
    return variable.startswith(ENV_PREFIX) and field in Settings.model_fields
