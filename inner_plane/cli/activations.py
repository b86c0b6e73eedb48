"""`inner-plane activations ...`."""

from __future__ import annotations

import typer

activations_app = typer.Typer(help="Activations of the base agent.", no_args_is_help=True)
