"""`inner-plane operators add|list|remove`: the people who use the operator API and UI.

The token is printed once, at `add`; the journal keeps only its scrypt hash."""

from __future__ import annotations

from typing import Annotated

import typer

from inner_plane import operators
from inner_plane.cli.common import FAILURE, fail, print_json, runtime

operators_app = typer.Typer(
    help="Operators allowed to read the operator API and act on signals and timers.",
    no_args_is_help=True,
)


@operators_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="a-z, 0-9, '-'")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Add an operator and print their token (once)."""
    try:
        operator, token = operators.add(runtime(), name)
    except operators.OperatorError as error:
        fail(str(error))
    except operators.OperatorExists:
        fail(f"operator {name!r} already exists")
    if as_json:
        print_json({**operator.public(), "token": token})
        return
    typer.echo(f"operator {operator.name} added")
    typer.echo(f"token: {token}")
    typer.echo("This token is shown once and cannot be recovered; store it now.", err=True)


@operators_app.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Operators (never their tokens)."""
    found = operators.list_all(runtime())
    if as_json:
        print_json([o.public() for o in found])
        return
    if not found:
        typer.echo("no operators (the API and UI answer on loopback only): `operators add NAME`")
    for operator in found:
        typer.echo(f"{operator.name}\tadded {operator.created_at:%Y-%m-%d %H:%M:%S}")


@operators_app.command("remove")
def remove(name: Annotated[str, typer.Argument()]) -> None:
    """Remove an operator: their token stops working at once."""
    if not operators.remove(runtime(), name):
        fail(f"no operator named {name!r}", FAILURE)
    typer.echo(f"operator {name} removed")
