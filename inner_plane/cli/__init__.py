"""The `inner-plane` command line."""

from __future__ import annotations

import sys

import typer

from inner_plane.cli import (
    activations,
    db,
    memory,
    operators,
    processes,
    processors,
    serve,
    signals,
    thoughtflow,
    timeline,
    timers,
)
from inner_plane.config import ConfigError
from inner_plane.journal.database import SchemaError
from inner_plane.services.embedded import EmbeddedServiceError

app = typer.Typer(
    name="inner-plane",
    help="Inner Context Plane: inner signals for a personal AI delegate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("up")(processes.up)
app.command("worker")(processes.worker)
app.command("beat")(processes.beat)
app.command("flower")(processes.flower)
app.command("publish")(signals.publish_command)
app.command("say")(activations.say)
app.add_typer(signals.signals_app, name="signals")
app.add_typer(db.db_app, name="db")
app.add_typer(activations.activations_app, name="activations")
app.add_typer(timers.timers_app, name="timers")
app.add_typer(memory.memory_app, name="memory")
app.add_typer(thoughtflow.thoughtflow_app, name="thoughtflow")
app.command("timeline")(timeline.timeline)
app.add_typer(processors.processors_app, name="processors")
app.add_typer(operators.operators_app, name="operators")
app.command("serve")(serve.serve)
app.command("mcp")(serve.mcp)


def main() -> None:
    try:
        app()
    except ConfigError as error:
        sys.stderr.write(f"inner-plane: error: {error}\n")
        sys.exit(2)
    except (SchemaError, EmbeddedServiceError) as error:
        sys.stderr.write(f"inner-plane: error: {error}\n")
        sys.exit(1)
