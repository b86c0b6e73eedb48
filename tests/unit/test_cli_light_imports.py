"""The CLI answers at once because it loads little: `--help` loads Typer and none of the plane's
libraries, and the light commands (`signals`, `status`, `health`) load no server, broker, model
or migration library until a command that needs one runs. Checked in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from inner_plane import cli

ROOT = Path(__file__).resolve().parents[2]

# Libraries only some commands need (serve, worker, beat, flower, mcp, db, the agent).
HEAVY = {"celery", "kombu", "fastapi", "starlette", "uvicorn", "openai", "mcp", "alembic"}
# What `--help` does without, too: the stores' drivers and the settings' validation.
STORES = {"sqlalchemy", "psycopg", "redis", "pydantic"}

CHILD = """
import json, sys
from inner_plane.cli import load_command, main
try:
    main()  # argv: --help
except SystemExit:
    pass
after_help = sorted({name.split(".")[0] for name in sys.modules})
for name in ("signals", "status", "health"):
    load_command(name)
after_load = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"help": after_help, "light": after_load}))
"""


def run_child(*args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    env.update(PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_help_and_light_commands_load_no_heavy_library() -> None:
    completed = run_child("-c", CHILD, "--help")
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.strip().splitlines()
    assert "signals" in completed.stdout  # the help was printed
    loaded = json.loads(lines[-1])
    assert set(loaded["help"]) & (HEAVY | STORES) == set()
    assert set(loaded["light"]) & HEAVY == set()


def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    # The CLI recognises the settings' error without importing its module up front.
    completed = run_child(
        "-m",
        "inner_plane",
        "signals",
        "list",
        INNER_PLANE_DB_POOL_SIZE="0",
        INNER_PLANE_DATA_DIR=str(tmp_path),
    )
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.strip().splitlines()
    assert line.startswith("inner-plane: error: ") and "INNER_PLANE_DB_POOL_SIZE" in line
    assert list(tmp_path.iterdir()) == []  # nothing started


# A command registered for the test: it reports the collector as its body sees it, and as it
# was while its module loaded (a group of two, to cover subcommands too).
PROBE = """
import gc, json, sys, types
import typer
from inner_plane import cli

probe = types.ModuleType("inner_plane.cli.gc_probe")
group = typer.Typer()

@group.command("look")
def look() -> None:
    garbage = []
    garbage.append(garbage)  # a cycle only the collector frees
    del garbage
    print(json.dumps({
        "while_loading": probe.while_loading,
        "in_body": gc.isenabled(),
        "frozen": gc.get_freeze_count(),
        "collected": gc.collect() > 0,
    }))

probe.group = group
sys.modules["inner_plane.cli.gc_probe"] = probe
cli.COMMANDS["probe"] = cli.Entry("gc_probe", "group", "test probe")

original = cli.load_command
def load_command(name):
    probe.while_loading = gc.isenabled()
    return original(name)
cli.load_command = load_command
try:
    cli.main()
except SystemExit:
    pass
print(json.dumps({"after_main_frozen": gc.get_freeze_count() > 0, "after_main": gc.isenabled()}))
"""


def test_the_collector_waits_while_a_command_loads_and_runs_in_its_body() -> None:
    # Off while the command's libraries load (start time), on in the body (a long-running
    # command collects as usual), with what loading made frozen.
    completed = run_child("-c", PROBE, "probe", "look")
    assert completed.returncode == 0, completed.stderr[-3000:]
    body, end = (json.loads(line) for line in completed.stdout.strip().splitlines()[-2:])
    assert body["while_loading"] is False
    assert body["in_body"] is True
    assert body["frozen"] > 10_000
    assert body["collected"] is True
    assert end == {"after_main_frozen": True, "after_main": True}  # as it was before main


def test_the_app_run_in_process_leaves_the_collector_as_its_caller_keeps_it() -> None:
    # Only `main` (the command line) holds the collector off and hands it back: a test or an
    # embedding program that runs the app keeps its own setting, and nothing of it is frozen.
    in_process = PROBE.split("original = cli.load_command")[0] + (
        "from typer.testing import CliRunner\n"
        "probe.while_loading = None\n"
        "gc.disable()\n"
        "result = CliRunner().invoke(cli.app, ['probe', 'look'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output.strip().splitlines()[-1])\n"
        "print(json.dumps({'after': gc.isenabled(), 'frozen': gc.get_freeze_count()}))\n"
    )
    completed = run_child("-c", in_process)
    assert completed.returncode == 0, completed.stderr[-3000:]
    body, end = (json.loads(line) for line in completed.stdout.strip().splitlines()[-2:])
    assert body["in_body"] is False
    assert body["frozen"] == 0
    assert end == {"after": False, "frozen": 0}


LEAN_REDIS = """
import json, sys
from inner_plane.cli.common import import_redis_lean
import_redis_lean()
without_sdk = "opentelemetry.sdk.metrics" not in sys.modules
import redis
client = redis.Redis.from_url("redis://127.0.0.1:1/0")  # builds a client; connects to nothing
from opentelemetry.sdk.metrics import MeterProvider  # still importable afterwards
print(json.dumps({"without_sdk": without_sdk, "redis": hasattr(redis, "Redis"),
                  "sdk_later": MeterProvider.__name__}))
"""


def test_redis_loads_without_the_metrics_sdk_and_the_sdk_still_imports_after() -> None:
    completed = run_child("-c", LEAN_REDIS)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result == {"without_sdk": True, "redis": True, "sdk_later": "MeterProvider"}


def test_an_answering_command_keeps_the_collector_held_through_its_body() -> None:
    # A command that answers and exits (`status`, `signals show`, `processors add`) never gives
    # it back: its body's imports and answer run held, and main freezes what is left at exit.
    answering = PROBE.replace(
        'cli.COMMANDS["probe"]',
        'cli.ANSWERING_COMMANDS = frozenset({"probe"})\ncli.COMMANDS["probe"]',
    )
    completed = run_child("-c", answering, "probe", "look")
    assert completed.returncode == 0, completed.stderr[-3000:]
    body, end = (json.loads(line) for line in completed.stdout.strip().splitlines()[-2:])
    assert body["while_loading"] is False
    assert body["in_body"] is False
    assert end == {"after_main_frozen": True, "after_main": True}  # as it was before main


def test_the_answering_commands_are_ones_that_end() -> None:
    # Never one that serves, supervises, waits for a reply or replays without bound.
    long_running = {"up", "serve", "mcp", "worker", "beat", "flower", "say", "simulate"}
    assert set(cli.COMMANDS) - long_running >= cli.ANSWERING_COMMANDS
