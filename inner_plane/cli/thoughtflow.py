"""`inner-plane thoughtflow ...`."""

from __future__ import annotations

import typer

thoughtflow_app = typer.Typer(help="Thoughtflow.", no_args_is_help=True)
