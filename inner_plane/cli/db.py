"""`inner-plane db ...`: migrations."""

from __future__ import annotations

import typer

from inner_plane.cli.common import fail, settings
from inner_plane.journal import database
from inner_plane.services.embedded import resolve_services

db_app = typer.Typer(help="Journal database migrations.", no_args_is_help=True)


def _url() -> str:
    resolved = resolve_services(settings())
    assert resolved.database_url is not None
    return resolved.database_url


@db_app.command("upgrade")
def upgrade() -> None:
    """Apply all migrations."""
    url = _url()
    database.upgrade(url)
    typer.echo(f"journal at {', '.join(sorted(database.expected_heads(url)))}")


@db_app.command("check")
def check() -> None:
    """Exit 0 if the schema matches this version, else explain and exit 1."""
    url = _url()
    try:
        database.check_schema(database.get_engine(url), url)
    except database.SchemaError as error:
        fail(str(error), 1)
    typer.echo("journal schema is current")
