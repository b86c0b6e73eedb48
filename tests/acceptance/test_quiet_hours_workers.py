"""Quiet hours with real processes (activation worker, periodic worker, celery beat): during the
person's quiet hours a non-urgent ``notify_user`` waits in the outbox and reaches their webhook
once, when the quiet hours end, even though the periodic worker that would send it was killed
(kill -9) and another started in the meantime; an urgent one goes at once."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from inner_plane.journal.lane.notifications import sent_to
from inner_plane.people import directory
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, redis_client
from tests.support.beat import celery_beat
from tests.support.hook import webhook_receiver
from tests.support.processes import ChildProcess, celery_worker, start_celery_worker
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

QUIET_FOR_S = 30  # long enough for a loaded machine to run the activation and kill a worker
SCRIPT = {
    "steps": 2,
    "calls": [
        {"name": "notify_user", "arguments": {"subject": "Weekly digest", "body": "Later."}},
        {
            "name": "notify_user",
            "arguments": {"subject": "Server down", "body": "Now!", "urgency": "high"},
        },
    ],
}


def test_a_message_in_quiet_hours_waits_for_their_end_and_goes_once(
    stores: Stores, runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    redis_client(stores.redis_url).flushdb()
    with webhook_receiver() as hook:
        env = stores.env(
            INNER_PLANE_AGENT="scripted",
            INNER_PLANE_AGENT_SCRIPT=json.dumps(SCRIPT),
            INNER_PLANE_BATCH_QUIET_MS="50",
            INNER_PLANE_BATCH_MAX_AGE_MS="200",
            INNER_PLANE_NOTIFY_WEBHOOK_SECRET="s3cret",
            INNER_PLANE_NOTIFY_OUTBOX_INTERVAL_S="0.3",
        )
        activation = start_celery_worker("activation", env, log_dir, queues="activation")
        children.append(activation)
        periodic = start_celery_worker("periodic-1", env, log_dir, queues="periodic")
        children.append(periodic)
        beat = celery_beat("beat", env, log_dir).start()
        children.append(beat)

        # Quiet hours from an hour ago until a little after the workers are up.
        now = datetime.now(UTC)
        ends = now + timedelta(seconds=QUIET_FOR_S)
        quiet = f"{(now - timedelta(hours=1)):%H:%M:%S}-{ends:%H:%M:%S}"
        directory.add(
            runtime,
            "default",
            display_name="Quinn",
            time_zone="UTC",
            webhook_url=hook.url,
            preferred_channel="webhook",
            quiet_hours=quiet,
        )
        publish(kind="task.completed", source="copilot", data={"task_id": "Q1"}, runtime=runtime)

        # The urgent message goes at once, in the quiet hours.
        urgent = wait_until(hook.all, "the urgent message at the webhook", 120)
        assert [b["subject"] for b in urgent] == ["Server down"]
        assert urgent[0]["urgency"] == "high" and datetime.now(UTC) < ends

        def outbox() -> dict[str, str]:
            return {row["subject"]: row["state"] for row in sent_to(runtime.engine, "default")}

        wait_until(lambda: outbox().get("Server down") == "sent", "the urgent one marked sent")
        assert outbox()["Weekly digest"] == "waiting"
        [held] = [r for r in sent_to(runtime.engine, "default") if r["subject"] == "Weekly digest"]
        assert held["not_before"] == ends.replace(microsecond=0)

        # The periodic worker dies before the quiet hours end; another takes its place.
        periodic.kill()
        assert datetime.now(UTC) < ends, "the machine was too slow to kill it in time"
        assert [b["subject"] for b in hook.all()] == ["Server down"]
        while datetime.now(UTC) < ends + timedelta(seconds=1):
            time.sleep(0.2)
        assert [b["subject"] for b in hook.all()] == ["Server down"]  # nothing sends it now
        replacement = celery_worker("periodic-2", env, log_dir, queues="periodic").start()
        children.append(replacement)

        def digest_sent() -> bool:
            return any(b["subject"] == "Weekly digest" for b in hook.all())

        wait_until(digest_sent, "the held message after the quiet hours", 120)
        delivered_at = datetime.now(UTC)
        assert delivered_at >= ends
        # Beat keeps checking every 0.3 s; seconds later it is still one message.
        time.sleep(3)
        subjects = [b["subject"] for b in hook.all()]
        assert subjects == ["Server down", "Weekly digest"]
        [digest] = [
            r for r in sent_to(runtime.engine, "default") if r["subject"] == "Weekly digest"
        ]
        assert digest["state"] == "sent" and digest["sent_at"] is not None
        assert digest["sent_at"] >= ends
