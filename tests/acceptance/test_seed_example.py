"""The seed's own example, end to end with real workers, a local SMTP server and a scripted model
policy served through the real Responses adapter and wire format (the strict local server):

1. the user says "email me when consolidation teaches you something new" (a user turn sent by
   task name) and the model calls ``remember``;
2. later a ``memory.consolidated`` wake is composed with that memory recalled, and the model
   calls ``notify_user``;
3. the activation worker is killed (kill -9) right after that tool call, another worker takes
   the lease over and reruns the activation, and exactly one email has arrived.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane import celery_bridge
from inner_plane.attention.wakes import send_activate
from inner_plane.journal.lane.notifications import sent_to
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.user_turns import TURN_NAMESPACE
from inner_plane.memory.store import remember
from inner_plane.runtime import Runtime
from tests.support.model_wire import Served, slow
from tests.support.processes import ChildProcess, celery_worker, start_celery_workers
from tests.support.responses_wire import ResponsesServer, function_call, message
from tests.support.smtp import SmtpServer
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

WISH = "email me when consolidation teaches you something new"
LEARNED = "The user wants an email whenever consolidation teaches me something new."
NEWS = "The Lisbon offsite moved to May; the venue is booked."


def texts(conversation: list[dict[str, Any]], role: str) -> str:
    found = []
    for item in conversation:
        if item.get("role") != role:
            continue
        content = item.get("content")
        if isinstance(content, str):
            found.append(content)
        else:
            found.extend(str(part.get("text", "")) for part in content or [])
    return "\n".join(found)


def called(conversation: list[dict[str, Any]], name: str) -> bool:
    """Whether a call of ``name`` was made and answered in this conversation."""
    ids = {
        i.get("call_id")
        for i in conversation
        if i.get("type") == "function_call" and i.get("name") == name
    }
    return any(
        i.get("type") == "function_call_output" and i.get("call_id") in ids for i in conversation
    )


def policy(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scripted model: what a sensible model would do with what it is shown."""
    user = texts(conversation, "user")
    inner = texts(conversation, "developer") + texts(conversation, "system")
    if "kind=memory.consolidated" in inner and LEARNED in inner:  # a wake, the wish recalled
        if not called(conversation, "notify_user"):
            subject = "Consolidation taught me something new"
            return [function_call("notify_user", {"subject": subject, "body": NEWS})]
        return [message("Emailed the user about the consolidated memory.")]
    if WISH in user:
        if not called(conversation, "remember"):
            return [function_call("remember", {"content": LEARNED})]
        return [message("Noted: I will email you when that happens.")]
    return [message("Nothing to do.")]


def after_notify(body: dict[str, Any]) -> bool:
    return called(body.get("input") or [], "notify_user")


def test_email_me_when_consolidation_teaches_you_something_new(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    server = ResponsesServer(policy=policy)
    killed: list[bool] = []
    # The call after notify_user's output stalls until the worker is killed: the kill lands
    # right after the tool call, before the activation could finish.
    server.fault_for = lambda body: slow(stall_s=120) if after_notify(body) and not killed else None
    stores = Stores(
        runtime.settings.database_url or "",
        runtime.settings.redis_url or "",
        runtime.settings.data_dir,
        None,
    )
    with server.running(), SmtpServer() as smtp:
        env = stores.env(
            INNER_PLANE_AGENT="openai",
            INNER_PLANE_OPENAI_BASE_URL=server.base_url,
            INNER_PLANE_OPENAI_MODEL="test-model",
            INNER_PLANE_OPENAI_API_KEY="unused",
            INNER_PLANE_BATCH_QUIET_MS="50",
            INNER_PLANE_BATCH_MAX_AGE_MS="300",
            INNER_PLANE_LEASE_TTL_S="60",
            INNER_PLANE_NOTIFY_SMTP_HOST="127.0.0.1",
            INNER_PLANE_NOTIFY_SMTP_PORT=str(smtp.port),
            INNER_PLANE_NOTIFY_SMTP_TO="user@example.org",
        )
        queues = {"first": "activation", "turns": "user_turns"}
        first = start_celery_workers(children, env, log_dir, queues)["first"]
        journal = ActivationJournal(runtime.engine)

        # 1. The wish, from a chat front-end in another process, by task name.
        task_id = celery_bridge.send(
            runtime.settings,
            celery_bridge.USER_TURN_TASK,
            celery_bridge.USER_TURNS_QUEUE,
            args=("default", WISH, "chat"),
        )
        turn_id = uuid.uuid5(TURN_NAMESPACE, task_id)
        wait_until(
            lambda: (t := journal.user_turn(turn_id)) is not None and t.state == "done",
            "the wish answered",
            60,
        )
        with runtime.engine.connect() as connection:
            learned = connection.execute(
                text("SELECT kind, relation, source FROM memories WHERE content = :c"),
                {"c": LEARNED},
            ).all()
            inserted = connection.execute(
                text("SELECT mode, state FROM signals WHERE kind = 'memory.inserted'")
            ).all()
        assert [tuple(r) for r in learned] == [("learned", "new", "agent")]
        assert [tuple(r) for r in inserted] == [("ambient", "pending")]  # it never woke

        # 2. Later, consolidation merges two memories: a memory.consolidated wake.
        older = remember("The offsite is in Lisbon in April.", source="consolidation")
        merged = remember(
            NEWS,
            relation="consolidated",
            related_ids=[older.memory.id],
            source="consolidation",
            outcome_key="consolidation-run-1",
        )
        assert merged.signal.mode.value == "wake"
        stalled: Served = wait_until(
            lambda: next((s for s in server.served if after_notify(s.body)), None),
            "the call after notify_user",
            60,
        )
        [email] = wait_until(smtp.inbox.received, "the email", 10)

        # 3. kill -9 right after the tool call; another worker takes over and reruns.
        running = wait_until(
            lambda: next((r for r in journal.recent("default", 10) if r.state == "running"), None),
            "the running activation",
            10,
        )
        first.kill()
        killed.append(True)
        second = celery_worker("second", env, log_dir, queues="activation").start()
        children.append(second)
        second.wait_for(" ready.", 60)
        send_activate(runtime, "default")
        wait_until(
            lambda: runtime.signals.get(merged.signal.id).state.value not in ("pending", "claimed"),  # type: ignore[union-attr]
            "the consolidated wake handled by the rerun",
            60,
        )
        time.sleep(0.5)  # anything a duplicate would have sent has arrived by now
        assert len(smtp.inbox.received()) == 1

    assert stalled.closed_by_client_at is not None or not stalled.completed
    assert email["Subject"] == "Consolidation taught me something new"
    assert NEWS in email.get_payload()
    # The wake was composed with the user's wish recalled.
    composed = [s.body for s in server.served if "memory.consolidated" in json.dumps(s.body)]
    assert composed and all(LEARNED in json.dumps(body) for body in composed)
    records = sorted(journal.recent("default", 100), key=lambda r: r.started_at)
    wake_runs = [r for r in records if r.trigger == "wake"]
    assert [r.state for r in wake_runs] == ["abandoned", "completed"]
    assert wake_runs[0].id == running.id and wake_runs[1].epoch > running.epoch
    [notification] = sent_to(runtime.engine, "default")
    assert notification["state"] == "sent" and notification["activation_id"] == running.id
