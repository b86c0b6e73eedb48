"""A quarantined signal's record on real PostgreSQL and Redis, with the lane in-process: its
history names the problem once, its events name an activation that exists (or none, when the
claim left nothing to run), and the activation page and CLI find what the events point to."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from typer.testing import CliRunner

from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.cli import app, common
from inner_plane.journal.operator import reads
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime

ODD_SOURCE = "x\r\n\u2028odd"


def make_odd(rt: Runtime, signal_id: uuid.UUID) -> None:
    with rt.engine.begin() as connection:
        connection.execute(
            text("UPDATE signals SET source = :s WHERE id = :id"),
            {"s": ODD_SOURCE, "id": signal_id},
        )


def run_lane(rt: Runtime) -> list[uuid.UUID]:
    lane = Lane(rt, ScriptedAgent(), MinimalComposer(), holder="test")
    return list(lane.run("default").activations)


def activation_ids_of(rt: Runtime, signal_id: uuid.UUID) -> list[uuid.UUID | None]:
    found = reads.get_signal(rt.engine, signal_id)
    assert found is not None
    return [
        None if e["activation_id"] is None else uuid.UUID(e["activation_id"])
        for e in found["events"]
    ]


def test_quarantined_alone_history_says_it_once_and_names_no_phantom_activation(
    lane_runtime: Runtime,
) -> None:
    odd = publish(kind="task.completed", source="copilot", data={"n": 1}).id
    make_odd(lane_runtime, odd)
    assert run_lane(lane_runtime) == []  # nothing was left to run

    found = reads.get_signal(lane_runtime.engine, odd)
    assert found is not None and found["state"] == "dead"
    events = {e["event"]: e for e in found["events"]}
    assert set(events) == {"claimed", "quarantined"}
    reason = events["quarantined"]["reason"]
    assert reason and not reason.startswith("quarantined")
    assert found["last_error"] == f"quarantined: {reason}"
    # No activation row was written, so no event may name one.
    assert activation_ids_of(lane_runtime, odd) == [None, None]
    assert "no activation ran" in events["claimed"]["reason"]


def test_quarantined_beside_good_signals_names_the_activation_that_ran(
    lane_runtime: Runtime,
) -> None:
    good = publish(kind="task.completed", source="copilot", data={"n": 1}).id
    odd = publish(kind="task.completed", source="copilot", data={"n": 2}).id
    make_odd(lane_runtime, odd)
    [ran] = run_lane(lane_runtime)
    assert set(activation_ids_of(lane_runtime, odd)) == {ran}
    assert reads.activation_detail(lane_runtime.engine, ran) is not None
    assert ran in set(activation_ids_of(lane_runtime, good))

    common._runtime = None
    try:
        shown = CliRunner().invoke(app, ["activations", "show", str(ran)], catch_exceptions=False)
    finally:
        common._runtime = None
    assert shown.exit_code == 0, shown.stderr
