"""`inner-plane timers ...`."""

from __future__ import annotations

import typer

timers_app = typer.Typer(help="Timers.", no_args_is_help=True)
