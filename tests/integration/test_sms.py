"""Texts in and out (issue 24): a signed webhook from the person's number becomes a turn whose
answer is POSTed to the Messages API stand-in; a replayed MessageSid, an unknown number and
every forged, changed, unsigned or oversized request make nothing; a refused address is
throttled before any signature is computed; long answers go out in ordered segments, once
each, with 429 and Retry-After honoured."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from inner_plane.activation import Disposition, Settlement
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.channels.replies import send_answers
from inner_plane.http.app import create_app
from inner_plane.journal.lane.leases import Leases
from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.outbound.deliver import contact_on_dispositions
from inner_plane.outbound.sms import segments
from inner_plane.people import directory
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.sources import auth_throttle
from tests.conftest import ContextLog
from tests.support.activations import activation_for
from tests.support.lane_journal import run_lane
from tests.support.twilio import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    PLANE_NUMBER,
    Provider,
    inbound,
    signed,
    stand_in,
)
from tests.support.waiting import wait_until

PHONE = "+4915112345678"
URL = "http://127.0.0.1/v1/channels/sms/twilio"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def provider() -> Iterator[tuple[Provider, str]]:
    with stand_in() as running:
        yield running


@pytest.fixture
def one_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_throttle, "_clock", lambda: 1_800_000_010.0)
    auth_throttle.forget_throttled()


def sms_runtime(runtime: Runtime, base_url: str, **overrides: Any) -> Runtime:
    settings = runtime.settings.model_copy(
        update={
            "twilio_account_sid": ACCOUNT_SID,
            "twilio_auth_token": AUTH_TOKEN,
            "twilio_from_number": PLANE_NUMBER,
            "twilio_base_url": base_url,
            "sms_retry_max_s": 0.05,
            **overrides,
        }
    )
    rt = replace(runtime, settings=settings)
    directory.add(rt, "ada", display_name="Ada", phones=[PHONE])
    return rt


def post(client: TestClient, params: dict[str, str], url: str = URL, **headers: str) -> Any:
    return client.post(
        "/v1/channels/sms/twilio",
        content=urlencode(params),
        headers={**FORM, "X-Twilio-Signature": signed(url, params), **headers},
    )


def turns(rt: Runtime) -> list[tuple[str, str]]:
    with rt.engine.connect() as connection:
        rows = connection.execute(text("SELECT channel, text FROM user_turns ORDER BY seq"))
        return [(row.channel, row.text) for row in rows]


def test_a_signed_text_becomes_a_turn_and_its_answer_is_sent_by_sms(
    runtime: Runtime, provider: tuple[Provider, str], one_window: None, context_log: ContextLog
) -> None:
    messages, base = provider
    rt = sms_runtime(runtime, base)
    with TestClient(create_app(lambda: rt)) as client:
        params = inbound(PHONE, "Where is my parcel?")
        answer = post(client, params)
        assert answer.status_code == 200, context_log.lines("unexpected_error")
        assert answer.headers["content-type"].startswith("text/xml")
        assert answer.text == '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
        # A replay (the provider's retry, or an attacker's) makes no second turn.
        assert post(client, params).status_code == 200
    assert turns(rt) == [("sms", "Where is my parcel?")]
    run_lane(rt, ScriptedAgent({"reply": "It arrives tomorrow."}), "ada")
    [answered] = send_answers(rt)
    assert answered.state == "sent" and answered.channel == "sms"
    assert messages.bodies(PHONE) == ["It arrives tomorrow."]
    assert messages.messages[0]["from"] == PLANE_NUMBER
    assert send_answers(rt) == []


def test_an_unknown_number_makes_no_turn_and_gets_no_answer_and_is_counted(
    runtime: Runtime, provider: tuple[Provider, str], context_log: ContextLog, one_window: None
) -> None:
    messages, base = provider
    rt = sms_runtime(runtime, base)
    with TestClient(create_app(lambda: rt)) as client:
        for number in ("+4915199999999", "not a number", ""):
            assert post(client, inbound(number, "hello")).status_code == 200
    assert turns(rt) == []
    assert [line for line in context_log.lines("sms_received") if "outcome=unknown" in line]
    assert len(context_log.lines("sms_received")) == 3
    assert send_answers(rt) == [] and messages.messages == []


def test_behind_a_proxy_the_signature_covers_the_configured_public_url(
    runtime: Runtime, provider: tuple[Provider, str], one_window: None
) -> None:
    public = "https://plane.example.com/hooks/v1/channels/sms/twilio"
    rt = sms_runtime(runtime, provider[1], sms_webhook_url=public)
    with TestClient(create_app(lambda: rt)) as client:
        assert post(client, inbound(PHONE, "internal URL")).status_code == 403
        assert post(client, inbound(PHONE, "public URL"), url=public).status_code == 200
    assert turns(rt) == [("sms", "public URL")]


def test_a_refused_address_is_throttled_before_any_signature_is_computed(
    runtime: Runtime,
    provider: tuple[Provider, str],
    one_window: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt = sms_runtime(runtime, provider[1])
    computed = []
    from twilio.request_validator import RequestValidator

    real = RequestValidator.compute_signature

    def counting(self: RequestValidator, *args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return real(self, *args, **kwargs)

    with TestClient(create_app(lambda: rt)) as client:
        params = inbound(PHONE, "forged")
        headers = {**FORM, "X-Twilio-Signature": "AAAA"}
        limit = rt.settings.auth_failures_per_minute
        for _ in range(limit):
            assert (
                client.post(
                    "/v1/channels/sms/twilio", content=urlencode(params), headers=headers
                ).status_code
                == 403
            )
        late = inbound(PHONE, "late")
        late_headers = {**FORM, "X-Twilio-Signature": signed(URL, late)}
        monkeypatch.setattr(RequestValidator, "compute_signature", counting)
        for _ in range(5):
            refused = client.post(
                "/v1/channels/sms/twilio", content=urlencode(params), headers=headers
            )
            assert refused.status_code == 429 and "retry-after" in refused.headers
        # A correctly signed text from the throttled address waits too (the limit is per address).
        late_answer = client.post(
            "/v1/channels/sms/twilio", content=urlencode(late), headers=late_headers
        )
        assert late_answer.status_code == 429
    assert computed == [] and turns(rt) == []


def test_a_question_sent_by_text_is_answered_by_the_next_text(
    runtime: Runtime, provider: tuple[Provider, str], one_window: None
) -> None:
    messages, base = provider
    rt = sms_runtime(runtime, base)
    directory.update(rt, "ada", preferred_channel="sms")
    Leases(rt.engine).acquire("ada", "test", 60)
    asked = publish(kind="task.input_required", source="copilot", delegate_id="ada", runtime=rt).id
    activation = activation_for(rt, [asked], delegate_id="ada")
    contact_on_dispositions(
        rt, [], activation, {asked: Settlement(Disposition.NEEDS_INPUT, "Which branch?")}, None
    )
    question_text = " ".join(messages.bodies(PHONE))
    assert "Which branch?" in question_text and "Reply to this text" in question_text
    with TestClient(create_app(lambda: rt)) as client:
        assert post(client, inbound(PHONE, "main")).status_code == 200
    with rt.engine.connect() as connection:
        turn_id = connection.execute(text("SELECT id FROM user_turns")).scalar_one()
        question_id = connection.execute(text("SELECT id FROM questions")).scalar_one()
    turn = UserTurns(rt.engine).get(turn_id)
    assert turn is not None and turn.in_reply_to == question_id


def test_429_and_5xx_are_retried_honouring_retry_after_and_a_long_answer_is_segmented(
    runtime: Runtime, provider: tuple[Provider, str], one_window: None
) -> None:
    messages, base = provider
    rt = sms_runtime(runtime, base)
    with TestClient(create_app(lambda: rt)) as client:
        assert post(client, inbound(PHONE, "Tell me a story")).status_code == 200
    story = " ".join(f"word{n}" for n in range(170))  # about 1,000 characters
    run_lane(rt, ScriptedAgent({"reply": story}), "ada")
    messages.throttle_next, messages.fail_next, messages.retry_after = 2, 1, "0"
    [answered] = send_answers(rt)
    assert answered.state == "sent" and answered.segments == len(segments(story))
    assert messages.bodies(PHONE) == segments(story)
    assert messages.requests == answered.segments + 3
    # The words arrive whole and in order.
    words = " ".join(b.split(") ", 1)[1] for b in messages.bodies(PHONE)).split()
    assert words == story.split()


# --- hostile requests --------------------------------------------------------------------------

CHANGES = st.sampled_from(
    [
        "signature",
        "param",
        "add_param",
        "drop_param",
        "url",
        "no_header",
        "oversize",
        "type",
        "empty",
    ]
)


@pytest.fixture
def hostile(
    runtime: Runtime, provider: tuple[Provider, str]
) -> Iterator[tuple[Runtime, TestClient]]:
    settings_ = runtime.settings.model_copy(update={"auth_failures_per_minute": 10**9})
    rt = sms_runtime(replace(runtime, settings=settings_), provider[1])
    with TestClient(create_app(lambda: rt), raise_server_exceptions=False) as client:
        yield rt, client


def test_forged_changed_unsigned_or_oversized_requests_are_refused_storing_nothing(
    hostile: tuple[Runtime, TestClient],
) -> None:
    rt, client = hostile

    @settings(
        max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
    )
    @given(change=CHANGES, data=st.data())
    def one(change: str, data: st.DataObject) -> None:
        params = inbound(PHONE, data.draw(st.text(max_size=200), label="body"))
        signature = signed(URL, params)
        body = urlencode(params)
        headers = {**FORM, "X-Twilio-Signature": signature}
        if change == "signature":
            headers["X-Twilio-Signature"] = data.draw(
                st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60)
            )
        elif change == "param":
            name = data.draw(st.sampled_from(sorted(params)))
            changed = dict(
                params, **{name: params[name] + data.draw(st.text(min_size=1, max_size=5))}
            )
            body = urlencode(changed)
        elif change == "add_param":
            body = urlencode(dict(params, Extra=data.draw(st.text(max_size=10))))
        elif change == "drop_param":
            name = data.draw(st.sampled_from(sorted(params)))
            body = urlencode({k: v for k, v in params.items() if k != name})
        elif change == "url":
            headers["X-Twilio-Signature"] = signed(
                URL + data.draw(st.sampled_from(["/", "?a=1", "x"])), params
            )
        elif change == "no_header":
            del headers["X-Twilio-Signature"]
        elif change == "oversize":
            body = urlencode(dict(params, Body="x" * (rt.settings.sms_max_body_bytes + 1)))
        elif change == "type":
            headers["Content-Type"] = data.draw(
                st.sampled_from(["application/json", "text/plain", ""])
            )
        elif change == "empty":
            body = ""
        answer = client.post("/v1/channels/sms/twilio", content=body, headers=headers)
        assert 400 <= answer.status_code < 500, (change, answer.status_code, answer.text)

    one()
    assert turns(rt) == []
    with rt.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM channel_messages")).scalar() == 0


# --- a sender killed mid-send ------------------------------------------------------------------

KILLED_SENDER = """
from inner_plane.channels.replies import send_answers
from inner_plane.runtime import build_runtime
from inner_plane.config import build_settings
import json, sys
runtime = build_runtime(build_settings(**json.loads(sys.argv[1])))
send_answers(runtime)
"""


def test_a_long_answer_arrives_in_ordered_segments_once_each_across_a_kill_mid_send(
    runtime: Runtime, provider: tuple[Provider, str], one_window: None
) -> None:
    messages, base = provider
    rt = sms_runtime(runtime, base)
    with TestClient(create_app(lambda: rt)) as client:
        assert post(client, inbound(PHONE, "Tell me a story")).status_code == 200
    story = " ".join(f"word{n}" for n in range(170))
    run_lane(rt, ScriptedAgent({"reply": story}), "ada")
    parts = segments(story)
    assert len(parts) >= 6
    # The provider accepts the third segment and the sender is killed before it hears so.
    messages.hold_on = parts[2]
    overrides = {
        name: getattr(rt.settings, name)
        for name in (
            "database_url", "redis_url", "twilio_account_sid", "twilio_auth_token",
            "twilio_from_number", "twilio_base_url",
        )
    }  # fmt: skip
    import json

    sender = subprocess.Popen([sys.executable, "-c", KILLED_SENDER, json.dumps(overrides)])
    try:
        assert messages.held.wait(60)
        os.kill(sender.pid, signal.SIGKILL)
        sender.wait(30)
    finally:
        messages.hold_on = None
        messages.release.set()
    assert messages.bodies(PHONE) == parts[:3]
    # The next sender asks the provider about the third. The killed sender's row lock lasts
    # until PostgreSQL sees its connection close, and the sender skips a locked row (as beat's
    # sweep does, trying again later): it tries until the lock is gone.
    [answered] = wait_until(lambda: send_answers(rt), "the killed sender's row lock to go")
    assert answered.state == "sent"
    assert messages.bodies(PHONE) == parts  # each once, in order
