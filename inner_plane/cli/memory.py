"""`inner-plane memory ...`."""

from __future__ import annotations

import typer

memory_app = typer.Typer(help="Memory.", no_args_is_help=True)
