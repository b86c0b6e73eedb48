"""The tool registry (plane tools plus configured ones), the settle tool's checks and the
read-only journal tool."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from inner_plane.activation import Disposition
from inner_plane.config import ConfigError, build_settings
from inner_plane.journal.lane.leases import Leases
from inner_plane.memory import remember
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.tools import ToolContext, ToolError, build_registry
from tests.support.activations import activation_for
from tests.support.guard import RecordingGuard


def _with_tools(runtime: Runtime, tools: str) -> Runtime:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        tools=tools,
    )
    return build_runtime(settings, registry=runtime.registry)


def test_registry_holds_plane_tools_and_configured_ones(runtime: Runtime) -> None:
    registry = build_registry(_with_tools(runtime, "tests.support.extra_tools:make"))
    assert registry.names() == [
        "settle_signal",
        "describe_background_activity",
        "set_timer",
        "cancel_timer",
        "list_timers",
        "remember",
        "send_email",
    ]
    journal = registry.get("describe_background_activity")
    assert journal is not None and journal.read_only


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("tests.support.extra_tools", "is not 'module:factory'"),
        ("tests.support.nowhere:make", "cannot load"),
        ("tests.support.extra_tools:missing", "cannot load"),
        ("tests.support.extra_tools:not_callable", "is not callable"),
    ],
)
def test_bad_tool_configuration_names_the_setting(
    runtime: Runtime, reference: str, message: str
) -> None:
    with pytest.raises(ConfigError, match="INNER_PLANE_TOOLS") as error:
        build_registry(_with_tools(runtime, reference))
    assert message in str(error.value)


def test_settle_tool_validates_before_recording(runtime: Runtime) -> None:
    due = publish(kind="timer.due", source="timers", data={"timer": "t"})
    activation = activation_for(runtime, [due.id])
    settle = build_registry(runtime).get("settle_signal")
    assert settle is not None
    context = ToolContext(
        runtime, activation, frozenset({due.id}), RecordingGuard(activation.id), 0
    )
    sid = str(due.id)
    bad = [
        ({"signal_id": str(uuid.uuid4()), "disposition": "acted"}, "was not shown"),
        ({"signal_id": sid, "disposition": "ignored"}, "disposition must be one of"),
        ({"signal_id": sid, "disposition": "deferred"}, "deferred needs until"),
        ({"signal_id": sid, "disposition": "deferred", "until": "2099-01-01T10:00"}, "offset"),
        (
            {
                "signal_id": sid,
                "disposition": "deferred",
                "until": (activation.now - timedelta(hours=1)).isoformat(),
            },
            "later than now",
        ),
    ]
    for arguments, message in bad:
        with pytest.raises(ToolError, match=message):
            settle.handler(arguments, context)
    assert context.settlements == {}
    settle.handler({"signal_id": sid, "disposition": "escalated", "reason": "tell"}, context)
    assert context.settlements[due.id].disposition is Disposition.ESCALATED


def test_journal_tool_describes_recent_consolidation_runs(runtime: Runtime) -> None:
    first = remember("Ana likes jazz", runtime=runtime)
    remember(
        "Ana likes jazz and blues",
        relation="consolidated",
        related_ids=[first.memory.id],
        runtime=runtime,
    )
    publish(kind="timer.due", source="timers", data={"timer": "t"})
    publish(kind="timer.due", source="timers", data={"timer": "other"}, delegate_id="someone")
    activation = activation_for(runtime, [])
    tool = build_registry(runtime).get("describe_background_activity")
    assert tool is not None
    context = ToolContext(runtime, activation, frozenset(), RecordingGuard(activation.id), 0)

    report = tool.handler({"kind_prefix": "memory."}, context)

    assert report["counts"] == {"memory.consolidated pending": 1, "memory.inserted pending": 1}
    consolidated = report["signals"][0]
    assert consolidated["kind"] == "memory.consolidated"
    assert consolidated["data"]["content"] == "Ana likes jazz and blues"
    everything = tool.handler({}, context)
    assert everything["returned"] == 3  # the other delegate's timer is not this delegate's
    with pytest.raises(ToolError):
        tool.handler({"since_hours": -1}, context)


def test_timer_tools_remind_me_at_five_for_the_activations_delegate(runtime: Runtime) -> None:
    due = publish(kind="task.completed", source="copilot", delegate_id="alice")
    # The timer tools write fenced: the activation holds the delegate's lease.
    taken = Leases(runtime.engine).take("default", "test", 30)
    assert taken is not None
    activation = replace(activation_for(runtime, [due.id]), epoch=taken[0])
    registry = build_registry(runtime)
    context = ToolContext(runtime, activation, frozenset(), RecordingGuard(activation.id), 0)
    set_timer, list_timers, cancel = (
        registry.get("set_timer"),
        registry.get("list_timers"),
        registry.get("cancel_timer"),
    )
    assert set_timer is not None and list_timers is not None and cancel is not None

    made = set_timer.handler(
        {"purpose": "call mum", "at": "2099-01-01T17:00", "timezone": "Europe/Berlin"}, context
    )
    assert made["delegate_id"] == activation.delegate_id and made["purpose"] == "call mum"
    listed = list_timers.handler({}, context)
    assert [t["name"] for t in listed if t.get("purpose") == "call mum"] == [made["name"]]

    with pytest.raises(ToolError):
        set_timer.handler({"purpose": "x", "at": "tomorrow-ish"}, context)
    with pytest.raises(ToolError):
        set_timer.handler({"purpose": "x", "colour": "red"}, context)
    cancel.handler({"name": made["name"]}, context)
    assert [t for t in list_timers.handler({}, context) if t.get("purpose") == "call mum"] == []
