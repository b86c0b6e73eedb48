"""`inner-plane policy show|diff|apply FILE|history|rollback VERSION`: the attention policy as
versioned data (see docs/policy.md). A refused file prints each field and why, and changes
nothing (exit 2)."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path
from typing import Annotated

import typer

from inner_plane.cli.common import FAILURE, fail, print_json, runtime

policy_app = typer.Typer(
    help="The attention policy: batching windows, modes, priorities and wake budgets by kind "
    "and delegate, versioned in the journal.",
    no_args_is_help=True,
)


def _actor() -> str:
    """Who applies from the command line: the local user and host (the API records the
    operator)."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in a container
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def read_policy_file(path: Path) -> bytes:
    """The file's bytes, refused (exit 2) when unreadable or larger than a policy can be."""
    from inner_plane.attention.document import MAX_DOCUMENT_BYTES

    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as error:
        fail(f"{path}: {error.strerror or error}")
    if len(data) > MAX_DOCUMENT_BYTES:
        fail(f"{path}: document: larger than {MAX_DOCUMENT_BYTES} bytes; refused, nothing changed")
    return data


def _validated(path: Path) -> bytes:
    from inner_plane.attention import versions
    from inner_plane.attention.document import PolicyError

    data = read_policy_file(path)
    try:
        versions.validate(runtime(), data)
    except PolicyError as error:
        for where, why in error.problems:
            typer.echo(f"inner-plane: error: {path}: {where}: {why}", err=True)
        typer.echo("inner-plane: error: policy refused; nothing changed", err=True)
        raise typer.Exit(2) from None
    return data


@policy_app.command("show")
def show(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The version in force, as a file `policy apply` and `simulate --policy` accept."""
    from inner_plane.attention import versions

    shown = versions.show(runtime())
    if as_json:
        print_json(shown.public())
        return
    typer.echo(shown.document, nl=False)


@policy_app.command("diff")
def diff(file: Annotated[Path, typer.Argument(help="a policy TOML file")]) -> None:
    """What applying FILE would change (a unified diff of the two, written out in full)."""
    from inner_plane.attention import versions

    data = _validated(file)
    changes = versions.diff(runtime(), data)
    typer.echo(changes or "no change: the file decides as the version in force", nl=False)
    if not changes:
        typer.echo("")


@policy_app.command("apply")
def apply(
    file: Annotated[Path, typer.Argument(help="a policy TOML file")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Validate FILE and put it in force; running workers follow within seconds."""
    from inner_plane.attention import versions

    data = _validated(file)
    version = versions.apply(runtime(), data, _actor())
    if as_json:
        print_json({"version": version})
        return
    typer.echo(f"policy v{version} in force")


@policy_app.command("history")
def history(
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Every version, newest first: who applied it, when, and which one is in force."""
    from inner_plane.attention import versions

    found = versions.history(runtime(), limit)
    if as_json:
        print_json(found)
        return
    if not found:
        typer.echo("no policy applied: the settings decide")
    for item in found:
        mark = "*" if item["in_force"] else " "
        typer.echo(
            f"{mark} v{item['version']}\t{item['applied_at']}\t{item['applied_by']}\t"
            f"{item['rules']} rules\t{item['note']}"
        )


@policy_app.command("rollback")
def rollback(
    version: Annotated[int, typer.Argument(min=1)],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Put VERSION's document back in force (as a new version, so the history keeps both)."""
    from inner_plane.attention import versions

    new = versions.rollback(runtime(), version, _actor())
    if new is None:
        fail(f"no policy version {version}", FAILURE)
    if as_json:
        print_json({"version": new, "restored": version})
        return
    typer.echo(f"policy v{new} in force (the document of v{version})")
