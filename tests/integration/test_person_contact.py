"""Contact goes to the delegate's person: notify_user reaches their own email address (not
NOTIFY_SMTP_TO), or only their conversation when they prefer the app; a delegate without a
person keeps the NOTIFY_* default; quiet hours hold a normal message and let an urgent one go;
the outbox sweep sends a held message once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from inner_plane.journal.lane.leases import Leases
from inner_plane.journal.lane.notifications import sent_to
from inner_plane.outbound.channels import configured_channels
from inner_plane.outbound.deliver import deliver_due
from inner_plane.people import directory
from inner_plane.runtime import Runtime
from inner_plane.tools import ToolContext, build_registry
from tests.integration.test_outbound import context_for, smtp, smtp_runtime
from tests.support.smtp import SmtpServer

__all__ = ["smtp"]  # the fixture, shared with test_outbound


def _notify(
    rt: Runtime,
    subject: str,
    urgency: str = "normal",
    call: int = 0,
    context: ToolContext | None = None,
) -> dict[str, object]:
    tool = build_registry(rt).get("notify_user")
    assert tool is not None
    arguments = {"subject": subject, "body": f"{subject} body", "urgency": urgency}
    answer: dict[str, object] = tool.handler(arguments, context or context_for(rt, call=call))
    return answer


def test_notify_user_reaches_the_persons_own_address(runtime: Runtime, smtp: SmtpServer) -> None:
    rt = smtp_runtime(runtime, smtp)
    Leases(rt.engine).acquire("default", "test", 60)
    directory.add(rt, "default", display_name="Ada", emails=["ada@example.org"])
    _notify(rt, "For Ada")
    [mail] = smtp.inbox.received()
    assert mail["To"] == "ada@example.org" and mail["Subject"] == "For Ada"

    directory.update(rt, "default", preferred_channel="app")
    answer = _notify(rt, "In the app", call=1)
    assert answer["deliveries"] == [{"channel": "app", "status": "sent"}]
    assert len(smtp.inbox.received()) == 1  # nothing more by email
    directory.remove(rt, "default")
    _notify(rt, "Default again", call=2)
    assert smtp.inbox.received()[-1]["To"] == "user@example.org"


def test_quiet_hours_hold_a_normal_message_until_the_sweep(
    runtime: Runtime, smtp: SmtpServer
) -> None:
    rt = smtp_runtime(runtime, smtp)
    Leases(rt.engine).acquire("default", "test", 60)
    now = datetime.now(UTC)
    quiet = f"{now - timedelta(hours=1):%H:%M:%S}-{now + timedelta(hours=1):%H:%M:%S}"
    directory.add(rt, "default", display_name="Ada", emails=["ada@example.org"], quiet_hours=quiet)
    digest_call = context_for(rt)
    held = _notify(rt, "Digest", context=digest_call)
    assert held["deliveries"] == [{"channel": "email", "status": "waiting"}]
    assert "waits_until" in held
    _notify(rt, "Fire", urgency="high", call=1)
    assert [m["Subject"] for m in smtp.inbox.received()] == ["Fire"]
    # A rerun of the same call while it waits: still one waiting message.
    again = _notify(rt, "Digest", context=digest_call)
    assert again["deliveries"] == [{"channel": "email", "status": "waiting"}]

    channels = configured_channels(rt.settings)
    assert deliver_due(rt, channels) == 0  # not yet due
    with rt.engine.begin() as connection:  # the quiet hours end
        connection.execute(text("UPDATE notifications SET not_before = now() - interval '1 s'"))
    assert deliver_due(rt, channels) == 1
    assert deliver_due(rt, channels) == 0
    assert [m["Subject"] for m in smtp.inbox.received()] == ["Fire", "Digest"]
    states = {r["subject"]: (r["state"], r["attempts"]) for r in sent_to(rt.engine, "default")}
    assert states == {"Fire": ("sent", 1), "Digest": ("sent", 1)}
    # The same call again (a rerun) finds it sent: nothing more.
    rerun = _notify(rt, "Digest", context=digest_call)
    assert rerun["deliveries"] == [{"channel": "email", "status": "already_sent"}]
    assert len(smtp.inbox.received()) == 2
