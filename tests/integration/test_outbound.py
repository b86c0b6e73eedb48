"""notify_user (SMTP to a local aiosmtpd server, a signed webhook), once per effect key and
fenced by the lease; escalated and needs_input dispositions reaching the user; the remember
tool's learned memory, ambient and made once per call; every bad input refused by field."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.activation import Disposition, Settlement
from inner_plane.config import ConfigError, build_settings
from inner_plane.journal.lane.leases import LeaseLost, Leases
from inner_plane.journal.lane.notifications import sent_to
from inner_plane.memory.store import recall
from inner_plane.outbound.channels import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    ChannelError,
    Message,
    WebhookChannel,
    configured_channels,
    sign,
)
from inner_plane.outbound.deliver import contact_on_dispositions
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, build_runtime
from inner_plane.signals.model import Mode
from inner_plane.tools import ToolContext, ToolError, build_registry
from tests.support.activations import activation_for
from tests.support.guard import RecordingGuard
from tests.support.smtp import SmtpServer


def with_settings(runtime: Runtime, **overrides: Any) -> Runtime:
    settings = build_settings(
        database_url=runtime.settings.database_url,
        redis_url=runtime.settings.redis_url,
        **overrides,
    )
    return build_runtime(settings, registry=runtime.registry)


@pytest.fixture
def smtp() -> Any:
    with SmtpServer() as server:
        yield server


def smtp_runtime(runtime: Runtime, smtp: SmtpServer) -> Runtime:
    return with_settings(
        runtime,
        notify_smtp_host="127.0.0.1",
        notify_smtp_port=smtp.port,
        notify_smtp_to="user@example.org",
    )


def context_for(rt: Runtime, step: int = 0, call: int = 0) -> ToolContext:
    activation = activation_for(rt, [])
    return ToolContext(rt, activation, frozenset(), RecordingGuard(activation.id), step, {}, call)


def test_notify_user_sends_one_email_per_call_whatever_reruns(
    runtime: Runtime, smtp: SmtpServer
) -> None:
    rt = smtp_runtime(runtime, smtp)
    assert Leases(rt.engine).acquire("default", "test", 60) == 1
    tool = build_registry(rt).get("notify_user")
    assert tool is not None
    context = context_for(rt)
    arguments = {"subject": "Learned something", "body": "Consolidation found X."}

    first = tool.handler(arguments, context)
    again = tool.handler(arguments, context)  # the same call, rerun
    assert first == {"deliveries": [{"channel": "email", "status": "sent"}]}
    assert again == {"deliveries": [{"channel": "email", "status": "already_sent"}]}
    [email] = smtp.inbox.received()
    assert email["Subject"] == "Learned something" and email["To"] == "user@example.org"
    assert "Consolidation found X." in email.get_payload()

    context.call_index = 1  # another call of the same step is another message
    tool.handler(arguments, context)
    assert len(smtp.inbox.received()) == 2
    rows = sent_to(rt.engine, "default")
    assert [(r["channel"], r["state"]) for r in rows] == [("email", "sent")] * 2


def test_a_holder_whose_lease_was_taken_over_sends_nothing(
    runtime: Runtime, smtp: SmtpServer
) -> None:
    rt = smtp_runtime(runtime, smtp)
    leases = Leases(rt.engine)
    assert leases.acquire("default", "stale", 60) == 1
    with rt.engine.begin() as connection:
        connection.execute(text("UPDATE leases SET expires_at = now() - interval '1 s'"))
    assert leases.acquire("default", "new", 60) == 2
    tool = build_registry(rt).get("notify_user")
    assert tool is not None
    with pytest.raises(LeaseLost):
        tool.handler({"subject": "s", "body": "b"}, context_for(rt))  # epoch 1: stale
    assert smtp.inbox.received() == [] and sent_to(rt.engine, "default") == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"body": "b"}, "subject"),
        ({"subject": "  ", "body": "b"}, "subject"),
        ({"subject": "two\nlines", "body": "b"}, "subject"),
        ({"subject": "x" * 201, "body": "b"}, "subject"),
        ({"subject": "s"}, "body"),
        ({"subject": "s", "body": 3}, "body"),
        ({"subject": "s", "body": "b", "urgency": "now!"}, "urgency"),
    ],
)
def test_bad_notify_arguments_name_the_field_and_send_nothing(
    runtime: Runtime, smtp: SmtpServer, arguments: dict[str, Any], field: str
) -> None:
    rt = smtp_runtime(runtime, smtp)
    Leases(rt.engine).acquire("default", "test", 60)
    tool = build_registry(rt).get("notify_user")
    assert tool is not None
    with pytest.raises(ToolError, match=f"^{field}:"):
        tool.handler(arguments, context_for(rt))
    assert smtp.inbox.received() == [] and sent_to(rt.engine, "default") == []


def test_without_a_channel_there_is_no_notify_tool(runtime: Runtime) -> None:
    assert build_registry(runtime).get("notify_user") is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"notify_smtp_host": "mail"}, "notify_smtp_to"),
        ({"notify_webhook_url": "https://hooks.example/x"}, "notify_webhook_secret"),
        ({"notify_webhook_url": "ftp://x", "notify_webhook_secret": "s"}, "notify_webhook_url"),
        ({"notify_smtp_port": 0}, "notify_smtp_port"),
    ],
)
def test_bad_channel_settings_name_the_setting(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"(?i){field}"):
        build_settings(database_url="postgresql://h/db", redis_url="redis://h:1/0", **overrides)


class Hook(BaseHTTPRequestHandler):
    answers: list[int] = []
    seen: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append((dict(self.headers), body))
        self.send_response(type(self).answers.pop(0) if type(self).answers else 200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Any:
    Hook.answers, Hook.seen = [], []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_the_webhook_is_signed_retried_with_backoff_and_carries_its_key(hook: str) -> None:
    settings = build_settings(
        database_url="postgresql://h/db",
        redis_url="redis://h:1/0",
        notify_webhook_url=hook,
        notify_webhook_secret="s3cret",
        notify_webhook_attempts=3,
    )
    waits: list[float] = []
    Hook.answers = [503, 500]
    WebhookChannel(settings, sleep=waits.append).send(Message("d", "subj", "body", "key-1"))
    assert len(Hook.seen) == 3 and waits == [0.5, 1.0]
    headers, body = Hook.seen[-1]
    assert headers[SIGNATURE_HEADER] == sign("s3cret", body)
    assert headers[IDEMPOTENCY_HEADER] == "key-1"
    assert json.loads(body)["subject"] == "subj"

    Hook.answers, Hook.seen = [400], []
    with pytest.raises(ChannelError, match="HTTP 400"):
        WebhookChannel(settings, sleep=waits.append).send(Message("d", "s", "b", "key-2"))
    assert len(Hook.seen) == 1  # a refusal is not retried


def test_escalated_and_needs_input_reach_the_user_once(runtime: Runtime, smtp: SmtpServer) -> None:
    rt = smtp_runtime(runtime, smtp)
    Leases(rt.engine).acquire("default", "test", 60)
    asked = publish(kind="task.input_required", source="copilot", runtime=rt).id
    escalated = publish(kind="task.completed", source="copilot", runtime=rt).id
    acted = publish(kind="task.completed", source="copilot", data={"n": 2}, runtime=rt).id
    activation = activation_for(rt, [asked, escalated, acted])
    settlements = {
        asked: Settlement(Disposition.NEEDS_INPUT, "which branch?"),
        escalated: Settlement(Disposition.ESCALATED, "the build broke twice"),
        acted: Settlement(Disposition.ACTED, "done"),
    }
    channels = configured_channels(rt.settings)
    for _ in range(2):  # a rerun of the same settlement contacts nobody again
        contact_on_dispositions(rt, channels, activation, settlements, "Looking into it.")
    subjects = sorted(m["Subject"] for m in smtp.inbox.received())
    assert subjects == [
        "[escalated] task.completed from copilot",
        "[question] task.input_required from copilot",
    ]


def test_remember_stores_one_ambient_learned_memory_per_call(runtime: Runtime) -> None:
    tool = build_registry(runtime).get("remember")
    assert tool is not None
    context = context_for(runtime)
    wish = "The user wants an email when consolidation teaches me something new."
    first = tool.handler({"content": wish}, context)
    again = tool.handler({"content": wish}, context)
    assert first["stored"] is True and again == {**first, "stored": False}
    with runtime.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT kind, mode, caused_by FROM signals WHERE kind LIKE 'memory.%'")
        ).all()
    assert [(r.kind, r.mode) for r in rows] == [("memory.inserted", Mode.AMBIENT.value)]
    assert rows[0].caused_by == context.activation.id
    found = recall("consolidation email", "default", limit=5, runtime=runtime)
    assert [m.content for m in found] == [wish]
    for bad in ({}, {"content": " "}, {"content": 7}):
        with pytest.raises(ToolError, match=r"^content:"):
            tool.handler(bad, context)
