"""`inner-plane serve`: the HTTP API for external processors."""

from __future__ import annotations

import typer


def serve() -> None:
    """Serve the HTTP API (not yet available)."""
    typer.echo("inner-plane: error: the HTTP API is not available yet", err=True)
    raise typer.Exit(1)
