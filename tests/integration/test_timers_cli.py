"""`inner-plane timers add|list|cancel|check` on real PostgreSQL: bad input exits 2 with one
line naming the field, and stores nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from inner_plane.cli import app, common
from inner_plane.config import load_settings
from inner_plane.journal.timers.store import TimerJournal
from inner_plane.runtime import Runtime

ERROR = "inner-plane: error: "


@pytest.fixture
def cli(runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    path = tmp_path / "timers.toml"
    path.write_text('[timers.nightly]\ncron = "0 3 * * *"\npurpose = "Nightly"\n')
    monkeypatch.setenv("INNER_PLANE_TIMERS_FILE", str(path))
    load_settings.cache_clear()
    common._runtime = None
    yield CliRunner()
    common._runtime = None
    monkeypatch.delenv("INNER_PLANE_TIMERS_FILE")
    load_settings.cache_clear()


def run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, ["timers", *args], catch_exceptions=False)


def test_add_list_cancel(cli: CliRunner, runtime: Runtime) -> None:
    added = run(cli, "add", "standup", "--purpose", "Standup", "--cron", "0 9 * * 1-5",
                "--timezone", "Europe/Berlin", "--json")  # fmt: skip
    assert added.exit_code == 0, added.stderr
    info = json.loads(added.stdout)
    assert info["name"] == "standup" and info["next_due"]

    listed = run(cli, "list", "--json")
    timers = {t["name"]: t for t in json.loads(listed.stdout)}
    assert set(timers) == {"nightly", "standup"}
    assert timers["nightly"]["origin"] == "static" and timers["nightly"]["next_due"]
    assert timers["standup"]["next_due"] == info["next_due"]

    table = run(cli, "list").stdout
    assert "standup" in table and "nightly" in table
    # The next due time is shown.
    assert datetime.fromisoformat(info["next_due"]).isoformat() in table

    cancelled = run(cli, "cancel", "standup")
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.stdout
    assert "standup" not in run(cli, "list").stdout
    assert "cancelled" in run(cli, "list", "--all").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "x", "--purpose", "p"], "timer 'x': schedule: give exactly one of"),
        (["add", "x", "--purpose", "p", "--every", "5", "--at", "2030-01-01T00:00Z"],
         "timer 'x': schedule: give exactly one of cron, every_s or at (got every_s, at)"),
        (["add", "x", "--purpose", "p", "--cron", "0 9 * * *", "--timezone", "Nowhere/City"],
         "timer 'x': timezone: 'Nowhere/City' is not a known time zone"),
        (["add", "x", "--purpose", "p", "--at", "2001-01-01T00:00Z"], "timer 'x': at: "),
        (["add", "x", "--purpose", "p", "--at", "tomorrow"], "timer 'x': at: "),
        (["add", "x", "--purpose", "p", "--every", "5", "--missed", "never"], "timer 'x': missed:"),
        (["add", "x", "--purpose", "p", "--every", "5", "--priority", "500"],
         "timer 'x': priority:"),
        (["add", "nightly", "--purpose", "p", "--every", "5"], "timer 'nightly': name: "),
        (["cancel", "ghost"], "timer 'ghost': timer: no active timer"),
        (["cancel", "nightly"], "timer 'nightly': timer: is a static timer"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line_and_stores_nothing(
    cli: CliRunner, runtime: Runtime, args: list[str], message: str
) -> None:
    result = run(cli, *args)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR + message), result.stderr
    assert TimerJournal(runtime.engine).list_timers(include_finished=True) == []


def test_check_names_the_entry_and_field(cli: CliRunner, tmp_path: Path) -> None:
    good = run(cli, "check")
    assert good.exit_code == 0 and "1 valid timer(s)" in good.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[timers.broken]\npurpose = "p"\nevery_s = -1\n')
    result = run(cli, "check", str(bad))
    assert result.exit_code == 2
    assert f"{bad}: timer 'broken': every_s: " in result.stderr


def test_tick_once(cli: CliRunner) -> None:
    result = run(cli, "tick")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["ran"] in (True, False)
