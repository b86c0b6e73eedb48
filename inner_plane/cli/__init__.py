"""The `inner-plane` command line.

Commands load lazily: `inner-plane --help` and the light commands (`health`, `status`, `signals
show`) import neither Celery nor FastAPI nor the embedded servers. Each entry below names the
module that defines the command and the one line shown by `--help`.

A face: may import any layer, but the agent, composer and tools only through
``inner_plane.wiring``.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Plain help: no Rich boxes (type tags, wrapping mid-sentence) and no Rich import at start.
os.environ.setdefault("TYPER_USE_RICH", "0")

import typer
from typer._click.core import Command, Context
from typer._click.formatting import HelpFormatter
from typer.core import TyperArgument, TyperGroup, TyperOption

from inner_plane.startup import collector_held


@dataclass(frozen=True)
class Entry:
    module: str
    attribute: str
    summary: str


COMMANDS: dict[str, Entry] = {
    "up": Entry("processes", "up", "Run the whole plane here: stores, workers, beat, API, Flower."),
    "status": Entry("status", "status", "The running plane at a glance; exit 0/1/2."),
    "health": Entry("health", "health_app", "One-shot probes for healthchecks (exit 0 or 1)."),
    "publish": Entry("signals", "publish_command", "Publish one inner signal."),
    "say": Entry("activations", "say", "Send a user turn to a delegate."),
    "signals": Entry("signals", "signals_app", "Read and act on the signal journal."),
    "activations": Entry("activations", "activations_app", "Activations of the base agent."),
    "timers": Entry("timers", "timers_app", "Timers: moments published as timer.due signals."),
    "memory": Entry("memory", "memory_app", "The delegate's memories: add, list, recall."),
    "thoughtflow": Entry("thoughtflow", "thoughtflow_app", "What each activation saw and did."),
    "timeline": Entry("timeline", "timeline", "Replay a delegate's conversation timeline."),
    "processors": Entry("processors", "processors_app", "External processors (HTTP, MCP)."),
    "operators": Entry("operators", "operators_app", "Operators of the API and UI (tokens)."),
    "delegates": Entry("delegates", "delegates_app", "The person each delegate serves; tokens."),
    "mail": Entry("mail", "mail_app", "Each delegate's mailbox: the person's mail in and out."),
    "serve": Entry("serve", "serve", "Serve the HTTP API, the operator UI at / and MCP."),
    "mcp": Entry("serve", "mcp", "Serve the MCP adapter over stdio for a local processor."),
    "worker": Entry("processes", "worker", "Run one Celery worker role."),
    "beat": Entry("processes", "beat", "Run Celery beat with the plane's schedule."),
    "flower": Entry("processes", "flower", "Run Flower (Celery monitoring)."),
    "db": Entry("db", "db_app", "Journal database migrations."),
    "policy": Entry("policy", "policy_app", "The attention policy: show, diff, apply, roll back."),
    "simulate": Entry("simulate", "simulate", "Replay the journal under a candidate policy."),
}


def _plain(command: Command) -> Command:
    """Plain help throughout: no Rich, and a value's placeholder names the option, not its type
    (`--delegate DELEGATE`, not `--delegate <str>` or `TEXT`)."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    if command.help and not command.short_help:
        # A group lists its commands by their first paragraph, whole (click would cut it at
        # 45 characters, mid-word).
        command.short_help = " ".join(command.help.strip().split("\n\n")[0].split())
    for param in command.params:
        if isinstance(param, TyperOption) and not param.is_flag and not param.count:
            name = (param.opts[-1] if param.opts else param.name or "").lstrip("-")
            param.metavar = name.upper().replace("-", "_")
        elif isinstance(param, TyperArgument):
            param.metavar = (param.name or "").upper()
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _plain(sub)
    return command


# Commands that answer and exit: the collector stays held through their body too (its imports,
# its connection, its answer), and what is left is frozen before exit. Any other command (`up`,
# `serve`, a worker, `say --wait`, `simulate` over a million signals) may run long or allocate
# without bound, and collects as usual once it is loaded.
ANSWERING_COMMANDS = frozenset(
    {"status", "health", "publish", "signals", "processors", "operators", "delegates", "db"}
)


def _collecting(command: Command) -> Command:
    """Give the command's body (and each subcommand's) the garbage collector back, with what
    loading it made frozen: a long-running command (`up`, `serve`, a worker) collects as usual,
    and never walks the libraries' objects again. An answering command keeps it held."""
    if command.name in ANSWERING_COMMANDS:
        return command
    callback = command.callback
    if callback is not None:
        command.callback = _after_loading(callback)
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _collecting(sub)
    return command


# Set by main while it holds the collector off; the app run in process (tests, an embedding
# program) leaves the collector as its caller keeps it.
_collector_held = False


def _after_loading(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        global _collector_held
        if _collector_held:
            _collector_held = False
            gc.freeze()
            gc.enable()
        return callback(*args, **kwargs)

    return run


def load_command(name: str) -> Command | None:
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    module = importlib.import_module(f"inner_plane.cli.{entry.module}")
    target: Any = getattr(module, entry.attribute)
    command: Command
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return _collecting(_plain(command))


class LazyCommands(Mapping[str, Command]):
    """The root's commands: the table's, each imported on first access, and any registered
    eagerly with ``app.command`` / ``app.add_typer``."""

    def __init__(self, eager: Mapping[str, Command]) -> None:
        self._loaded: dict[str, Command] = dict(eager)

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            command = load_command(name)
            if command is None:
                raise KeyError(name)
            self._loaded[name] = command
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(COMMANDS) + [n for n in self._loaded if n not in COMMANDS])

    def __len__(self) -> int:
        return len(list(iter(self)))


class LazyGroup(TyperGroup):
    _lazy: LazyCommands | None = None

    @property  # type: ignore[override]
    def commands(self) -> LazyCommands:
        if self._lazy is None:
            self._lazy = LazyCommands({})
        return self._lazy

    @commands.setter
    def commands(self, value: Mapping[str, Command] | None) -> None:
        self._lazy = LazyCommands(value or {})

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        # From the table above: listing the commands imports none of them.
        with formatter.section("Commands"):
            rows = [(name, entry.summary) for name, entry in COMMANDS.items()]
            eager = [n for n in self.commands._loaded if n not in COMMANDS]
            rows += [(n, self.commands[n].get_short_help_str()) for n in eager]
            formatter.write_dl(rows)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"inner-plane {version('inner-plane')}")
        except PackageNotFoundError:
            typer.echo("inner-plane (not installed)")
        raise typer.Exit()


app = typer.Typer(
    name="inner-plane",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
)


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Inner Context Plane: inner signals for a personal AI delegate."""


# Commands that only read and report, answering at once (`status`, `signals show`, `health`):
# pydantic looks for plugins (a scan of every installed distribution's entry points, about 12 ms)
# only in the commands that run the plane. The plane registers no pydantic plugin; an operator's
# own PYDANTIC_DISABLE_PLUGINS setting wins.
READING_COMMANDS = frozenset({"status", "signals", "health"})


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in READING_COMMANDS:
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # Loading a command allocates hundreds of thousands of objects that live until exit
    # (SQLAlchemy, psycopg, pydantic): collecting while they load, and once more at exit, cost
    # `signals show` about a third of its start. The collector is off until the command's body
    # runs (see _collecting) and what is left is frozen before the interpreter's last sweep.
    global _collector_held
    with collector_held():  # frozen and given back at exit, as the caller had it
        _collector_held = True
        try:
            app(prog_name="inner-plane")
        except Exception as error:
            # Errors that name their cause (a bad setting; schema not migrated, embedded server
            # failed or busy, the plane's Redis down) end as one line; anything else keeps its
            # traceback. Matched by name: importing their modules (pydantic, SQLAlchemy) would
            # cost `--help` most of its start.
            names = {cls.__name__ for cls in type(error).__mro__}
            if "ConfigError" in names:
                sys.stderr.write(f"inner-plane: error: {error}\n")
                sys.exit(2)
            if names & {"SchemaError", "EmbeddedServiceError"}:
                sys.stderr.write(f"inner-plane: error: {error}\n")
                sys.exit(1)
            if "OperationalError" in names:  # psycopg's, or SQLAlchemy's wrapping it
                cause = getattr(error, "orig", None) or error
                said = str(cause).strip()
                first = said.splitlines()[0][:300] if said else type(cause).__name__
                sys.stderr.write(
                    f"inner-plane: error: the journal database: {first} (is the plane up? "
                    "`inner-plane status` tells; check INNER_PLANE_DATABASE_URL)\n"
                )
                sys.exit(1)
            raise
        finally:
            _collector_held = False
