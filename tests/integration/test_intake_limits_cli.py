"""Every intake limit through the `inner-plane` CLI (publish, and the processor and timer names
it registers): exit 2, one line naming the field, nothing stored and nothing enqueued."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from typer.testing import CliRunner, Result

from inner_plane.cli import app, common
from inner_plane.runtime import Runtime
from tests.support.intake_limits import Limit, limits_for

ERROR = "inner-plane: error: "
CLI_LIMITS = limits_for("cli")
OPTION = {"delegate_id": "delegate"}


@pytest.fixture
def cli(runtime: Runtime) -> Iterator[CliRunner]:
    common._runtime = None
    yield CliRunner()
    common._runtime = None


def run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, list(args), catch_exceptions=False)


def nothing_stored(runtime: Runtime) -> None:
    assert runtime.signals.count() == 0
    assert runtime.redis.llen("signals") == 0  # nothing enqueued for a worker either
    with runtime.engine.connect() as connection:
        for count in ("SELECT count(*) FROM processors", "SELECT count(*) FROM timers"):
            assert connection.execute(text(count)).scalar_one() == 0


def publish_args(limit: Limit) -> list[str]:
    values = {"kind": "task.completed", "source": "copilot", **limit.fields}
    args = ["publish"]
    for field, value in values.items():
        option = OPTION.get(field, field).replace("_", "-")
        args += [f"--{option}", json.dumps(value) if field == "data" else str(value)]
    return args


@pytest.mark.parametrize("limit", CLI_LIMITS, ids=[limit.id for limit in CLI_LIMITS])
@pytest.mark.parametrize("direct", [False, True], ids=["via-celery", "direct"])
def test_publish_exits_2_naming_the_field(
    cli: CliRunner, runtime: Runtime, limit: Limit, direct: bool
) -> None:
    args = publish_args(limit) + (["--direct"] if direct else [])
    result = run(cli, *args)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{ERROR}{limit.field}: "), line
    nothing_stored(runtime)


def test_priority_that_is_not_an_integer_exits_2(cli: CliRunner, runtime: Runtime) -> None:
    result = run(cli, "publish", "--kind", "task.completed", "--source", "c", "--priority", "true")
    assert result.exit_code == 2 and "--priority" in result.output
    nothing_stored(runtime)


@pytest.mark.parametrize("suffix", ["\n", "\r", "\u2028"])
def test_processor_and_timer_names_are_matched_whole(
    cli: CliRunner, runtime: Runtime, suffix: str
) -> None:
    added = run(cli, "processors", "add", "ci" + suffix)
    assert added.exit_code == 2 and added.stderr.startswith(ERROR), added.output
    assert "name" in added.stderr
    timer = run(cli, "timers", "add", "review" + suffix, "--purpose", "p", "--every", "60")
    assert timer.exit_code == 2, timer.output
    assert timer.stderr.startswith(ERROR) and ": name: " in timer.stderr
    at = run(cli, "timers", "add", "late", "--purpose", "p", "--at", "9999-12-31T23:59:59-00:01")
    assert at.exit_code == 2 and "timer 'late': at: " in at.stderr, at.output
    nothing_stored(runtime)
