"""`inner-plane processors ...`."""

from __future__ import annotations

import typer

processors_app = typer.Typer(help="Processors.", no_args_is_help=True)
