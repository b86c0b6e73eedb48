"""Fast takeover after a crash, with real `celery worker` processes: the activation worker is
killed (kill -9) mid-run, a user turn for its delegate is sent right after by task name from this
(another) process, and the surviving worker takes the lease over at once (the dead holder's
liveness lock went with its connection) instead of waiting for the lease TTL. Every invariant is
checked from the journal."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from inner_plane import celery_bridge
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import State
from tests.acceptance.test_lane_workers import (
    BASE_ENV,
    _running,
    _stores,
    activations,
    overlaps,
)
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

# A lease TTL far beyond what the test may wait: only the liveness lock can explain a takeover.
ENV = {**BASE_ENV, "INNER_PLANE_LEASE_TTL_S": "60", "INNER_PLANE_HEARTBEAT_S": "1"}
SCRIPT = {"steps": 24, "step_s": 0.25, "user_turn_steps": 0, "reply": "here"}


def parent_pid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no parent for {pid}")


def test_a_user_turn_right_after_a_kill_9_is_answered_by_a_fast_takeover(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    environment = _stores(runtime).env(**ENV, INNER_PLANE_AGENT_SCRIPT=json.dumps(SCRIPT))
    queues = {"left": "activation", "right": "activation", "turns": "user_turns"}
    workers = start_celery_workers(children, environment, log_dir, queues)

    signal_id = publish(kind="task.completed", source="copilot").id
    killed = wait_until(lambda: _running(runtime), "background activation running", 30)
    holder_pid = int(killed.holder.split(":")[1])
    [victim] = [w for n, w in workers.items() if w.pid in (holder_pid, parent_pid(holder_pid))]
    victim.kill(signal.SIGKILL)

    celery_bridge.sender(runtime.settings).send_task(
        celery_bridge.USER_TURN_TASK,
        args=("default", "are you there?", "text"),
        queue=celery_bridge.USER_TURNS_QUEUE,
        task_id="turn-after-the-crash",
    )
    journal = ActivationJournal(runtime.engine)
    wait_until(lambda: runtime.signals.get(signal_id).state is State.DELIVERED, "rerun done", 60)  # type: ignore[union-attr]

    wait_until(lambda: all(r.finished_at for r in activations(runtime)), "all finished", 30)

    records = activations(runtime)
    abandoned = records[0]
    assert (abandoned.trigger, abandoned.state) == ("wake", "abandoned")
    # The turn goes first. The killed run's activate comes back at once (RabbitMQ requeues an
    # unacked message when its consumer's connection drops), so the takeover's rerun may open
    # before the turn is journaled: then it yields to the turn at its next safe point. No
    # background run completes before the turn is answered; the signal rides along with the
    # turn or runs after it.
    [at] = [i for i, r in enumerate(records) if r.trigger == "user_turn"]
    for rerun in records[1:at]:
        assert (rerun.trigger, rerun.state) == ("wake", "interrupted"), rerun
        assert rerun.error == "user turn waiting", rerun
    answer = records[at]
    assert all(r.state == "completed" for r in records[at:])
    assert abandoned.id == killed.id
    epochs = [r.epoch for r in records]
    # The takeover took a newer epoch than the killed run's; one lane run may open several
    # activations (the rerun that yielded, then the turn) under its one lease epoch.
    assert epochs == sorted(epochs)
    assert epochs[0] < min(epochs[1:])
    assert overlaps(records) == 0
    turn = journal.user_turn(answer.turn_id)  # type: ignore[arg-type]
    assert turn is not None and turn.state == "done" and turn.reply == "here"
    assert turn.finished_at is not None
    # Answered within 10 s of being journaled, with a lease TTL of 60 s (journal clocks).
    assert (turn.finished_at - turn.created_at).total_seconds() < 10
    # The dead holder wrote nothing after it was taken over: its signal's only event under the
    # killed activation is the claim.
    stale_events = [e for e in journal.events(signal_id) if e.activation_id == killed.id]
    assert [e.event for e in stale_events] == ["claimed"]
