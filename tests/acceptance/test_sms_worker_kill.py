"""A long SMS answer across a `celery worker` killed mid-send (issue 24): a 1,000-character
answer arrives at the Messages API stand-in in ordered segments, once each.

The answer is sent by the periodic worker, the process that sends it in production (the lane
asks it when the turn is answered; beat's sweep asks it for anything left). The stand-in accepts
a middle segment and holds its HTTP answer; the worker's whole process group is killed with
SIGKILL meanwhile, so that segment reached the provider but its outcome was never recorded. A
new worker takes over through beat's sweep (not the broker's redelivery of the unacknowledged
task, which waits the visibility timeout), skips the segments marked sent, finds the held one in
the provider's message list, and sends the rest.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.channels.replies import send_answers
from inner_plane.http.app import create_app
from inner_plane.journal.channels.messages import of_turns
from inner_plane.outbound.sms import segments
from inner_plane.people import directory
from inner_plane.runtime import Runtime, redis_client
from tests.support.beat import celery_beat
from tests.support.lane_journal import run_lane
from tests.support.processes import ChildProcess, celery_worker, start_celery_worker
from tests.support.stores import Stores
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, PLANE_NUMBER, inbound, signed, stand_in
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance
PHONE = "+4915112345678"
WEBHOOK = "http://127.0.0.1/v1/channels/sms/twilio"


def test_a_long_answer_arrives_in_ordered_segments_once_each_across_a_worker_killed_mid_send(
    stores: Stores, runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    redis_client(stores.redis_url).flushdb()
    with stand_in() as (provider, base):
        twilio = {
            "twilio_account_sid": ACCOUNT_SID,
            "twilio_auth_token": AUTH_TOKEN,
            "twilio_from_number": PLANE_NUMBER,
            "twilio_base_url": base,
        }
        rt = runtime.__class__(
            settings=runtime.settings.model_copy(update=twilio),
            engine=runtime.engine,
            registry=runtime.registry,
        )
        env = stores.env(
            INNER_PLANE_NOTIFY_OUTBOX_INTERVAL_S="1",  # beat's answer sweep
            **{f"INNER_PLANE_{name.upper()}": value for name, value in twilio.items()},
        )
        directory.add(rt, "ada", display_name="Ada", phones=[PHONE])
        params = inbound(PHONE, "Tell me a story")
        with TestClient(create_app(lambda: rt)) as client:
            answer = client.post(
                "/v1/channels/sms/twilio",
                content=urlencode(params),
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "X-Twilio-Signature": signed(WEBHOOK, params),
                },
            )
        assert answer.status_code == 200
        story = " ".join(f"word{n}" for n in range(200))[:1000]
        assert len(story) == 1000
        parts = segments(story)
        assert len(parts) >= 6
        middle = len(parts) // 2
        # The provider accepts the middle segment, then holds its answer until released.
        provider.hold_on = parts[middle]
        # The lane (in this process) answers the turn and asks the periodic queue to send it.
        run_lane(rt, ScriptedAgent({"reply": story}), "ada")

        first = start_celery_worker("periodic-1", env, log_dir, queues="periodic")
        children.append(first)
        try:
            assert provider.held.wait(60), first.output()[-3000:]
            first.kill()  # SIGKILL to the process group: the prefork child too
        finally:
            provider.hold_on = None
            provider.release.set()
        assert provider.bodies(PHONE) == parts[: middle + 1]

        # The next worker, asked by beat's sweep (the killed one's task is still unacknowledged).
        children.append(celery_worker("periodic-2", env, log_dir, queues="periodic").start())
        children.append(celery_beat("beat", env, log_dir).start())
        with rt.engine.connect() as connection:
            [turn_id] = connection.execute(text("SELECT id FROM user_turns")).scalars().all()

        def sent() -> dict[uuid.UUID, object] | None:
            found = of_turns(rt.engine, [turn_id])
            return found if found[turn_id]["reply_state"] == "sent" else None

        answered = wait_until(sent, "the answer marked sent by the second worker", 50)
        assert answered[turn_id]["reply_to"] == PHONE

        assert provider.bodies(PHONE) == parts  # every segment once, in order
        assert provider.requests == len(parts)  # the held one was not POSTed again
        assert {m["from"] for m in provider.messages} == {PLANE_NUMBER}
        with rt.engine.connect() as connection:
            outbox = connection.execute(
                text(
                    "SELECT effect_key, state, attempts FROM notifications"
                    " WHERE effect_key LIKE :key"
                ),
                {"key": f"reply:{turn_id}:%"},
            ).all()
            events = connection.execute(
                text(
                    "SELECT payload FROM conversation_events"
                    " WHERE type = 'channel.answer' AND turn_id = :turn"
                ),
                {"turn": turn_id},
            ).all()
        by_index = {int(row.effect_key.rsplit(":", 1)[1]): row for row in outbox}
        assert sorted(by_index) == list(range(len(parts)))
        assert {row.state for row in outbox} == {"sent"}
        # Only the segment whose outcome the killed worker never heard was claimed twice.
        assert [by_index[i].attempts for i in range(len(parts))] == [
            2 if i == middle else 1 for i in range(len(parts))
        ]
        assert [e.payload for e in events] == [
            {"channel": "sms", "to": PHONE, "state": "sent", "segments": len(parts)}
        ]
        assert "inner_plane.channel_answer[" in children[1].output()  # the second worker sent it
        # The killed worker's task, redelivered once the visibility timeout passes, sends nothing.
        assert send_answers(rt, turn_id) == []
        assert provider.requests == len(parts)
