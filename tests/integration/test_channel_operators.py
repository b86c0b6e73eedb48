"""Operators see the channels (issue 24): `status` and /metrics show each mailbox's last poll,
IDLE state, error and backlog, the SMS webhook's accepted, refused and unknown-sender counts and
the answers waiting to go out; the timeline says which channel a turn came in on and where its
answer went."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from inner_plane import operators
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.channels import imap, mailbox
from inner_plane.channels.replies import send_answers
from inner_plane.http.app import create_app
from inner_plane.people import directory
from inner_plane.runtime import Runtime
from inner_plane.services import metrics
from inner_plane.services.status import Targets, collect
from inner_plane.sources import auth_throttle
from inner_plane.timeline import replay
from tests.support.dovecot import PASSWORD, Dovecot, available
from tests.support.lane_journal import run_lane
from tests.support.smtp import SmtpServer, free_port
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, PLANE_NUMBER, inbound, signed, stand_in

PERSON = "ada@example.org"
PHONE = "+4915112345678"
URL = "http://127.0.0.1/v1/channels/sms/twilio"


@pytest.fixture
def one_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(auth_throttle, "_clock", lambda: 1_800_000_010.0)
    auth_throttle.forget_throttled()
    metrics.install(None)
    yield


def test_status_and_metrics_show_mailboxes_webhook_counts_and_waiting_answers(
    runtime: Runtime, one_window: None
) -> None:
    with stand_in() as (_, base):
        settings = runtime.settings.model_copy(
            update={
                "twilio_account_sid": ACCOUNT_SID,
                "twilio_auth_token": AUTH_TOKEN,
                "twilio_from_number": PLANE_NUMBER,
                "twilio_base_url": base,
            }
        )
        rt = replace(runtime, settings=settings)
        metrics.install(rt.settings.redis_url)
        directory.add(rt, "ada", display_name="Ada", emails=[PERSON], phones=[PHONE])
        box = mailbox.set_mailbox(
            rt,
            "ada",
            address="delegate@example.net",
            host="127.0.0.1",
            port=free_port(),  # nobody listens: the poll fails, and says so
            security="plain",
            username="ada",
            password="secret-imap-password",
        )
        report = imap.poll(rt, box)
        assert report.error is not None and "secret-imap-password" not in report.error
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        _, token = operators.add(rt, "ops")
        with TestClient(create_app(lambda: rt)) as client:
            for params in (inbound(PHONE, "hi"), inbound("+4915199999999", "who?")):
                body = urlencode(params)
                headers = {**form, "X-Twilio-Signature": signed(URL, params)}
                assert (
                    client.post(
                        "/v1/channels/sms/twilio", content=body, headers=headers
                    ).status_code
                    == 200
                )
            refused = client.post(
                "/v1/channels/sms/twilio",
                content=urlencode(inbound(PHONE, "x")),
                headers={**form, "X-Twilio-Signature": "forged"},
            )
            assert refused.status_code == 403
            metrics.flush()
            scraped = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
        for sample in (
            'inner_plane_mailbox_failing{delegate="ada"} 1.0',
            'inner_plane_mailbox_idle{delegate="ada"} 0.0',
            'inner_plane_mailbox_backlog{delegate="ada"} 0.0',
            'inner_plane_sms_webhook_total{outcome="accepted"} 1.0',
            'inner_plane_sms_webhook_total{outcome="unknown"} 1.0',
            'inner_plane_sms_webhook_total{outcome="refused"} 1.0',
            'inner_plane_channel_answers_pending{channel="sms"} 1.0',
        ):
            assert sample in scraped, sample
        assert 'inner_plane_mailbox_last_poll_age_seconds{delegate="ada"}' in scraped
        status = collect(Targets(settings=rt.settings, api_url=None, flower_url=None)).public()
        [shown] = status["channels"]["mailboxes"]
        assert shown["delegate_id"] == "ada" and shown["last_error"] and not shown["idle"]
        assert shown["last_poll_age_s"] is not None
        assert status["channels"]["answers_pending"] == {"sms": 1}
        assert status["channels"]["counters"]["sms_webhook|outcome=refused"] == 1
        assert any("mailbox of 'ada' fails" in p["what"] for p in status["problems"])
        assert "secret-imap-password" not in str(status)


@pytest.mark.skipif(
    not available() and os.environ.get("CI") != "true", reason="dovecot-imapd is not installed"
)
def test_the_timeline_says_where_a_turn_came_from_and_where_its_answer_went(
    runtime: Runtime,
) -> None:
    from tests.integration.test_mail_in import a_mail

    with Dovecot(["ada"]) as server, SmtpServer() as smtp:
        settings = runtime.settings.model_copy(
            update={
                "notify_smtp_host": "127.0.0.1",
                "notify_smtp_port": smtp.port,
                "notify_smtp_to": "ops@example.org",
            }
        )
        rt = replace(runtime, settings=settings)
        directory.add(rt, "ada", display_name="Ada", emails=[PERSON])
        box = mailbox.set_mailbox(
            rt,
            "ada",
            address="delegate@example.net",
            host="127.0.0.1",
            port=server.port,
            security="plain",
            username="ada",
            password=PASSWORD,
            require_authenticated=False,
        )
        server.append("ada", a_mail())
        assert imap.poll(rt, box).outcomes == {"turn": 1}
        run_lane(rt, ScriptedAgent({"reply": "Noon works."}), "ada")
        send_answers(rt)
    entries = replay(rt.engine, "ada")
    [said] = [e for e in entries if e["type"] == "user.message"]
    assert said["label"] == "User (by email)"
    [went] = [e for e in entries if e["type"] == "channel.answer"]
    assert went["summary"] == f"by email to {PERSON}: sent (1 message(s))"
    assert went["turn_id"] == said["turn_id"]
