"""Operator commands of the lane: activations list/show, signals show/retry/dismiss, say."""

from __future__ import annotations

import json
from dataclasses import replace

from typer.testing import CliRunner

from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.cli import app
from inner_plane.cli import common as cli_common
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.kinds import KindPolicy
from inner_plane.signals.model import Mode, State

runner = CliRunner()


def invoke(rt: Runtime, *args: str) -> tuple[int, str, str]:
    cli_common._runtime = rt  # the CLI talks to the test stores
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def fast(rt: Runtime) -> Runtime:
    return replace(
        rt,
        settings=rt.settings.model_copy(
            update={"batch_quiet_ms": 0, "batch_max_age_ms": 0, "retry_base_s": 60.0}
        ),
    )


def test_activations_list_and_show_report_trigger_epoch_state_and_signal_ids(runtime) -> None:
    signal_id = publish(kind="task.completed", source="copilot").id
    [activation_id] = (
        Lane(fast(runtime), ScriptedAgent(), MinimalComposer()).run("default").activations
    )

    code, out, _ = invoke(runtime, "activations", "list", "--json")
    assert code == 0
    [listed] = json.loads(out)
    assert listed["id"] == str(activation_id) and listed["signal_ids"] == [str(signal_id)]

    code, out, _ = invoke(runtime, "activations", "show", str(activation_id), "--json")
    shown = json.loads(out)
    assert code == 0
    assert (shown["trigger"], shown["state"], shown["attempts"]) == ("wake", "completed", 1)
    assert shown["epoch"] >= 1 and shown["started_at"] and shown["finished_at"]
    assert shown["reason"] == "wake"

    code, _, err = invoke(runtime, "activations", "show", "not-a-uuid")
    assert code == 2 and "not an activation id" in err


def test_signals_show_explains_why_a_signal_is_not_delivered_yet(runtime) -> None:
    rt = replace(runtime, settings=runtime.settings.model_copy(update={"wake_budget_per_hour": 1}))
    publish(kind="task.completed", source="copilot")
    Lane(fast(rt), ScriptedAgent(), MinimalComposer()).run("default")
    waiting = publish(kind="task.completed", source="copilot").id
    Lane(
        replace(
            fast(rt), settings=fast(rt).settings.model_copy(update={"wake_budget_per_hour": 1})
        ),
        ScriptedAgent(),
        MinimalComposer(),
    ).run("default")

    code, out, _ = invoke(runtime, "signals", "show", str(waiting), "--json")
    record = json.loads(out)
    assert code == 0 and record["state"] == "pending"
    published, event = record["events"]
    assert published["event"] == "published"
    assert event["event"] == "deferred" and "budget" in event["reason"]


def test_operator_retry_and_dismiss(runtime) -> None:
    runtime.registry.register(KindPolicy("test.poison", Mode.WAKE, 50, max_attempts=1))
    poison = publish(kind="test.poison", source="t").id
    Lane(fast(runtime), ScriptedAgent({"fail_kinds": ["test.poison"]}), MinimalComposer()).run(
        "default"
    )
    assert runtime.signals.get(poison).state is State.DEAD  # type: ignore[union-attr]

    code, out, _ = invoke(runtime, "signals", "retry", str(poison))
    assert code == 0 and "retrying" in out
    revived = runtime.signals.get(poison)
    assert revived is not None and revived.state is State.PENDING and revived.attempts == 0

    code, _, err = invoke(runtime, "signals", "retry", str(poison))
    assert code == 1 and "is not dead" in err  # a pending signal cannot be retried

    code, out, _ = invoke(runtime, "signals", "dismiss", str(poison), "--reason", "noise")
    assert code == 0
    dismissed = runtime.signals.get(poison)
    assert dismissed is not None and dismissed.state is State.DISMISSED
    assert dismissed.disposition_reason == "noise"
    events = [e.event for e in ActivationJournal(runtime.engine).events(poison)]
    assert events[-2:] == ["retried", "dismissed"]


def test_say_rejects_bad_input_and_queues_nothing(runtime) -> None:
    for args, message in (
        (["say", "--delegate", "bad delegate!", "hi"], "delegate_id"),
        (["say", "   "], "text"),
        (["say", "--channel", "", "hi"], "channel"),
    ):
        code, _, err = invoke(runtime, *args)
        assert code == 2 and message in err
    with runtime.engine.connect() as connection:
        from sqlalchemy import text

        assert connection.execute(text("SELECT count(*) FROM user_turns")).scalar_one() == 0
    assert runtime.redis.llen("activation") == 0
