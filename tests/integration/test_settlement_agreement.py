"""The lane and the ThoughtFlow record settle by one plan: what the journal did to each claimed
signal is what the record says, the default deferral included."""

from __future__ import annotations

from datetime import datetime

from inner_plane.activation import (
    DEFAULT_DEFERRAL,
    AgentResult,
    Disposition,
    Settlement,
    WorkingContext,
)
from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.port import StepGuard
from inner_plane.journal.conversation.thoughtflow import get_thoughtflow
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import State


class _DeferFirstLeaveSecond:
    """Defers the first rendered signal without a time and leaves the second unsettled."""

    name = "defer-first"

    def run(self, context: WorkingContext, guard: StepGuard) -> AgentResult:
        first = context.activation.signals[0].id
        return AgentResult(settlements={first: Settlement(Disposition.DEFERRED, "later")})


def test_the_journal_and_the_record_agree_on_every_signal(lane_runtime: Runtime) -> None:
    first = publish(kind="task.completed", source="copilot", data={"n": 1}).id
    second = publish(kind="task.completed", source="copilot", data={"n": 2}).id
    lane = Lane(lane_runtime, _DeferFirstLeaveSecond(), MinimalComposer(), holder="test")
    [activation_id] = lane.run("default").activations

    record = ActivationJournal(lane_runtime.engine).get(activation_id)
    assert record is not None and record.signal_ids[0] == first
    flow = get_thoughtflow(lane_runtime.engine, activation_id)
    assert flow is not None

    deferred = lane_runtime.signals.get(first)
    assert deferred is not None and deferred.state is State.PENDING
    assert deferred.disposition == "deferred"
    # The default deferral from the activation's clock, applied to the journal and shown in the
    # record, to the microsecond.
    until = datetime.fromisoformat(flow["dispositions"][str(first)]["until"])
    assert until == deferred.available_at
    assert until == datetime.fromisoformat(flow["now"]) + DEFAULT_DEFERRAL

    dismissed = lane_runtime.signals.get(second)
    assert dismissed is not None and dismissed.state is State.DISMISSED
    entry = flow["dispositions"][str(second)]
    assert (entry["disposition"], entry["by"]) == ("dismissed", "plane")
    assert entry["reason"] == dismissed.disposition_reason
