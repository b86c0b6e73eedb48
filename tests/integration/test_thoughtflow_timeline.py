"""ThoughtFlow records, the dry-run agent, durable conversation events, replay and the CLI."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from inner_plane.activation import Disposition
from inner_plane.agent.dry_run import DryRunAgent
from inner_plane.cli import app
from inner_plane.composer import build_composer
from inner_plane.config import build_settings
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
from inner_plane.journal.lane import activations
from inner_plane.journal.lane.closing import close_activation
from inner_plane.journal.lane.leases import Leases
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.wiring import load_agent
from tests.support.activations import activation_for
from tests.support.guard import RecordingGuard
from tests.support.responses_wire import (
    ResponsesServer,
)

cli = CliRunner()


def test_dry_run_is_the_default_and_records_what_it_would_have_sent(runtime: Runtime) -> None:
    assert build_settings().agent == "dry-run"
    assert isinstance(load_agent(runtime), DryRunAgent)
    due = publish(kind="timer.due", source="timers", data={"timer": "periodic review"})
    activation = activation_for(runtime, [due.id])
    context = build_composer(runtime).compose(activation)

    result = DryRunAgent().run(context, RecordingGuard(activation.id))

    assert result.settlements[due.id].disposition is Disposition.DISMISSED
    assert result.settlements[due.id].reason == "no model configured"
    assert result.model_input == context.model_input()
    # Stored as the lane stores it: in the statement that closes the (running) activation.
    assert Leases(runtime.engine).acquire(activation.delegate_id, "test", 30) == activation.epoch
    with runtime.engine.begin() as connection:
        activations.insert_activation(
            connection,
            activation_id=activation.id,
            delegate_id=activation.delegate_id,
            trigger=activation.trigger.value,
            reason="test",
            epoch=activation.epoch,
            holder="test",
            signal_ids=[due.id],
            turn_id=None,
            attempts=1,
            agent="dry-run",
        )
        close_activation(
            connection,
            activation=activation,
            state="completed",
            context=context,
            result=result,
            duration_ms=12.5,
        )
    stored = get_thoughtflow(runtime.engine, activation.id)
    assert stored is not None
    assert stored["model_input"] == context.model_input()
    assert stored["dispositions"][str(due.id)]["reason"] == "no model configured"
    assert stored["envelope"] == context.envelope and stored["agent"] == "dry-run"
    assert stored["signals"][0]["data"] == {"timer": "periodic review"}

    shown = cli.invoke(app, ["thoughtflow", "show", str(activation.id), "--json"])
    assert shown.exit_code == 0, shown.output
    as_json = json.loads(shown.stdout)
    assert [item["role"] for item in as_json["model_input"]] == [i.role for i in context.items]
    text = cli.invoke(app, ["thoughtflow", "show", str(activation.id)])
    assert text.exit_code == 0 and "no model configured" in text.stdout
    missing = cli.invoke(app, ["thoughtflow", "show", str(uuid.uuid4())])
    assert missing.exit_code == 1 and "no thoughtflow" in missing.stderr
    bad = cli.invoke(app, ["thoughtflow", "show", "nope"])
    assert bad.exit_code == 2 and "not an activation id" in bad.stderr


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as running:
        yield running


def test_memory_cli_add_list_recall_and_bad_input(runtime: Runtime) -> None:
    added = cli.invoke(app, ["memory", "add", "check commitments at the periodic review", "--json"])
    assert added.exit_code == 0, added.output
    record = json.loads(added.stdout)
    assert record["signal"]["kind"] == "memory.inserted" and record["signal"]["mode"] == "ambient"
    merged = cli.invoke(
        app,
        [
            "memory",
            "add",
            "check commitments and deadlines at the periodic review",
            "--relation",
            "consolidated",
            "--related",
            record["id"],
            "--json",
        ],
    )
    assert merged.exit_code == 0, merged.output
    assert json.loads(merged.stdout)["signal"]["mode"] == "wake"
    listed = json.loads(cli.invoke(app, ["memory", "list", "--json"]).stdout)
    assert [m["relation"] for m in listed] == ["consolidated"]
    every = json.loads(cli.invoke(app, ["memory", "list", "--all", "--json"]).stdout)
    assert len(every) == 2
    found = json.loads(cli.invoke(app, ["memory", "recall", "periodic review", "--json"]).stdout)
    assert [m["relation"] for m in found] == ["consolidated"]

    before = runtime.signals.count()
    bad = cli.invoke(app, ["memory", "add", "x", "--relation", "override"])
    assert bad.exit_code == 2 and "related_ids" in bad.stderr
    bad_kind = cli.invoke(app, ["memory", "list", "--kind", "core"])
    assert bad_kind.exit_code == 2 and "--kind" in bad_kind.stderr
    assert runtime.signals.count() == before
