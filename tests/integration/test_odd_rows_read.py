"""Reads never crash on a stored row: rows made odd by direct SQL (timestamps beyond Python's
range and before year 1, infinity, JSON nested past every parser's limit, text no code writes)
list and show through the journal and the CLI, and the sweeper goes on past them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from inner_plane.cli import app, common
from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import stored_problem


def _deep_json(depth: int) -> str:
    """``{"d": [[...[1]...]]}`` as JSON text (Python's json module cannot write it that deep)."""
    return '{"d": ' + "[" * depth + "1" + "]" * depth + "}"


ODD = {
    "year-10000": ("UPDATE signals SET occurred_at = '10000-01-01T00:00Z' WHERE id = :id", {}),
    "bc": ("UPDATE signals SET available_at = '0001-01-01T00:00:00+00:01' WHERE id = :id", {}),
    "infinity": ("UPDATE signals SET expires_at = 'infinity' WHERE id = :id", {}),
    "deep-400": (
        "UPDATE signals SET data = CAST(:doc AS jsonb) WHERE id = :id",
        {"doc": _deep_json(400)},
    ),
    "deep-5000": (
        "UPDATE signals SET data = CAST(:doc AS jsonb) WHERE id = :id",
        {"doc": _deep_json(5_000)},
    ),
    "weird-text": (
        "UPDATE signals SET kind = :t, source = :t, trust = 'loud', mode = 'ambient' "
        "WHERE id = :id",
        {"t": "x\r\n\u2028[inner-context] event=published \u202e"},
    ),
}


@pytest.fixture
def odd_rows(runtime: Runtime) -> Iterator[dict[str, uuid.UUID]]:
    ids = {name: publish(kind="task.completed", source="odd", mode="ambient").id for name in ODD}
    with runtime.engine.begin() as connection:
        for name, (statement, params) in ODD.items():
            connection.execute(text(statement), {"id": ids[name], **params})
    yield ids


def test_the_journal_reads_and_shows_every_odd_row(
    runtime: Runtime, odd_rows: dict[str, uuid.UUID]
) -> None:
    listed = {s.id: s for s in runtime.signals.list(limit=100)}
    assert set(odd_rows.values()) <= set(listed)
    for name, signal_id in odd_rows.items():
        signal = runtime.signals.get(signal_id)
        assert signal is not None, name
        json.dumps(signal.public())  # shows as JSON, whatever it holds
        assert stored_problem(signal) is not None, name  # and the lane would quarantine it


def test_cli_list_and_show_never_crash(runtime: Runtime, odd_rows: dict[str, uuid.UUID]) -> None:
    common._runtime = None
    try:
        runner = CliRunner()
        listed = runner.invoke(app, ["signals", "list", "--json"], catch_exceptions=False)
        assert listed.exit_code == 0, listed.output
        assert {row["id"] for row in json.loads(listed.stdout)} >= {
            str(i) for i in odd_rows.values()
        }
        plain = runner.invoke(app, ["signals", "list"], catch_exceptions=False)
        assert plain.exit_code == 0, plain.output
        assert len(plain.stdout.splitlines()) == len(odd_rows)  # one row, one line
        for signal_id in odd_rows.values():
            shown = runner.invoke(
                app, ["signals", "show", str(signal_id), "--json"], catch_exceptions=False
            )
            assert shown.exit_code == 0, shown.output
            readable = runner.invoke(app, ["signals", "show", str(signal_id)])
            assert readable.exit_code == 0, readable.output
    finally:
        common._runtime = None


def test_the_sweeper_goes_on_past_odd_rows(
    runtime: Runtime, odd_rows: dict[str, uuid.UUID]
) -> None:
    # A BC expiry is past: the sweep expires that row (reading it back) and every other one.
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET expires_at = '0001-01-01T00:00:00+00:01' WHERE id = :id"),
            {"id": odd_rows["year-10000"]},
        )
    due = publish(kind="task.completed", source="other", delegate_id="elsewhere").id
    report = sweep(runtime)
    assert report.expired >= 1
    expired = runtime.signals.get(odd_rows["year-10000"])
    assert expired is not None and expired.state.value == "expired"
    assert "elsewhere" in report.woken and runtime.signals.get(due) is not None
