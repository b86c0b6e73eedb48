"""The CLI's text output says what happened in words, on real PostgreSQL and Redis: the queued
publish names the signal (not only the Celery task), an empty list says so, `say --wait` never
prints ``reply=None``, `signals show` gives the whole history with who acted, a refused publish
prints no half-empty log line, and no command's help or text output holds a Python repr."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from inner_plane import operators
from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.cli import app, common
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.lane_journal import Filled, fill, lane_runtime, run_lane
from tests.support.stores import ROOT, Stores

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What a Python value looks like when printed by mistake: None, a dict or list repr, an enum
# member (Mode.WAKE), an object repr, a key=value dump of one (requested_mode=None).
REPRS = re.compile(
    r"\bNone\b|\{'|\['|<[\w.]+ object at|\b(?:Mode|State|Trust|Disposition|Trigger)\.[A-Z_]+\b"
    r"|\b\w+=(?:None|True|False)\b"
)


@pytest.fixture
def cli(runtime: Runtime) -> Iterator[CliRunner]:
    common._runtime = None
    yield CliRunner()
    common._runtime = None


def run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, list(args), catch_exceptions=False)


def reprs_in(text: str) -> list[str]:
    return [m.group(0) for m in REPRS.finditer(text)]


def test_a_queued_publish_prints_the_signal_id(cli: CliRunner, runtime: Runtime) -> None:
    args = ("publish", "--kind", "task.completed", "--source", "ci", "--mode", "interrupt")
    result = run(cli, *args)
    assert result.exit_code == 0, result.stderr
    match = re.fullmatch(
        rf"queued ({UUID}) \(task\.completed, mode wake \(interrupt requested: downgraded by "
        rf"the kind's policy\)\) for a signals worker; task {UUID}\n",
        result.stdout,
    )
    assert match is not None, result.stdout
    # The id printed is the signal's: the message the worker will journal carries it.
    [message] = runtime.redis.lrange("signals", 0, -1)
    assert match.group(1) in message
    assert reprs_in(result.stdout) == []
    runtime.redis.delete("signals")


def test_an_empty_list_says_so(cli: CliRunner, runtime: Runtime) -> None:
    assert run(cli, "signals", "list").stdout == "no signals\n"
    publish(kind="memory.inserted", source="memory")  # ambient: pending, but another state
    result = run(cli, "signals", "list", "--state", "dead", "--delegate", "default")
    assert result.exit_code == 0
    assert result.stdout == "no signals with delegate default, state dead\n"
    # The ambient one is pending (retained): listed, as `status` counts it ("ambient retained").
    listed = run(cli, "signals", "list", "--state", "pending").stdout.splitlines()
    assert len(listed) == 1 and "ambient" in listed[0] and "memory.inserted" in listed[0]


def test_signals_show_gives_the_history_with_who_acted_and_never_none(
    cli: CliRunner, runtime: Runtime
) -> None:
    signal_id = publish(kind="task.completed", source="copilot", data={"n": 1}).id
    operators.dismiss_signal(runtime, signal_id, "dana", "handled by hand")
    result = run(cli, "signals", "show", str(signal_id))
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert reprs_in(text) == []
    history = text.split("history:\n", 1)[1].splitlines()
    assert "published" in history[0] and "by source copilot" in history[0]
    assert "dismissed" in history[1] and "by operator dana" in history[1]
    assert "handled by hand" in history[1]


def test_say_wait_never_prints_reply_none(cli: CliRunner, runtime: Runtime) -> None:
    """The turn is answered by the lane in a thread (the dry-run agent: no reply)."""
    rt = lane_runtime(runtime)
    done = threading.Event()

    def answer() -> None:
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            if run_lane(rt, DryRunAgent()):
                return
            time.sleep(0.05)

    helper = threading.Thread(target=answer, daemon=True)
    helper.start()
    try:
        result = run(cli, "say", "hello", "--wait", "--timeout", "60")
    finally:
        done.set()
        helper.join(60)
    assert result.exit_code == 0, result.stderr
    assert re.fullmatch(rf"turn {UUID} done: no reply( \(dry run: no model configured\))?\n",
                        result.stdout), result.stdout  # fmt: skip
    assert reprs_in(result.stdout) == []


def test_a_refused_publish_prints_no_half_empty_log_line(stores: Stores, runtime: Runtime) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "inner_plane", "publish", "--kind", "task.completed",
         "--source", "ci", "--mode", "urgent"],
        env=stores.env(), cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2
    logged = [line for line in completed.stderr.splitlines() if line.startswith("[inner-context]")]
    for line in logged:
        assert not re.search(r"\w= |\w=$", line), line  # no field written empty
    assert completed.stderr.splitlines()[-1].startswith("inner-plane: error: mode:")


def all_commands() -> list[list[str]]:
    """Every command and subcommand path of the CLI."""
    import typer.main

    found: list[list[str]] = [[]]
    root = typer.main.get_command(app)

    def walk(command: Any, path: list[str]) -> None:
        lister = getattr(command, "list_commands", None)
        if lister is None:
            return
        ctx = command.context_class(command)
        for name in lister(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                found.append([*path, name])
                walk(sub, [*path, name])

    walk(root, [])
    return found


def test_no_python_repr_in_any_help_or_text_output(cli: CliRunner, runtime: Runtime) -> None:
    commands = all_commands()
    assert ["signals", "show"] in commands and ["publish"] in commands
    for path in commands:
        result = run(cli, *path, "--help")
        assert result.exit_code == 0, (path, result.output)
        assert reprs_in(result.stdout) == [], (path, reprs_in(result.stdout))

    filled: Filled = fill(runtime)
    outputs = [
        ("publish", "--direct", "--kind", "task.completed", "--source", "ci", "--mode=interrupt"),
        ("publish", "--direct", "--kind", "memory.inserted", "--source", "memory"),
        ("signals", "list"),
        ("signals", "show", str(filled.dead_signal)),
        ("signals", "show", str(filled.background_signal)),
        ("activations", "list"),
        ("activations", "show", str(filled.background)),
        ("activations", "show", str(filled.failed)),
        ("thoughtflow", "show", str(filled.background)),
        ("thoughtflow", "list"),
        ("timeline",),
        ("timers", "list"),
        ("memory", "list"),
        ("processors", "list"),
        ("operators", "list"),
    ]
    for args in outputs:
        result = run(cli, *args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stdout.strip(), args
        assert reprs_in(result.stdout) == [], (args, reprs_in(result.stdout), result.stdout)
