"""Mail out as a reply in the thread (issue 24): the answer to a mail turn goes to its sender
from the delegate's mailbox with In-Reply-To, References and a Re: subject, once, under a
Message-ID derived from its effect key; a question mailed to the person is answered by
replying to it (the turn's in_reply_to)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import text

from inner_plane.activation import Disposition, Settlement
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.channels import imap, mailbox
from inner_plane.channels.replies import send_answers
from inner_plane.journal.lane.leases import Leases
from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.outbound.channels import message_id
from inner_plane.outbound.deliver import contact_on_dispositions
from inner_plane.people import directory
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.integration.test_mail_in import PERSON, a_mail, empty
from tests.support.activations import activation_for
from tests.support.dovecot import PASSWORD, Dovecot, available
from tests.support.lane_journal import run_lane
from tests.support.smtp import SmtpServer

pytestmark = pytest.mark.skipif(
    not available() and os.environ.get("CI") != "true", reason="dovecot-imapd is not installed"
)
DELEGATE_ADDRESS = "delegate@example.net"


@pytest.fixture(scope="module")
def dovecot() -> Iterator[Dovecot]:
    with Dovecot(["ada"]) as server:
        yield server


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


def wired(runtime: Runtime, dovecot: Dovecot, smtp: SmtpServer) -> Runtime:
    settings = runtime.settings.model_copy(
        update={
            "notify_smtp_host": "127.0.0.1",
            "notify_smtp_port": smtp.port,
            "notify_smtp_to": "ops@example.org",
        }
    )
    rt = replace(runtime, settings=settings)
    empty(dovecot, "ada")
    directory.add(rt, "ada", display_name="Ada", emails=[PERSON])
    mailbox.set_mailbox(
        rt,
        "ada",
        address=DELEGATE_ADDRESS,
        host="127.0.0.1",
        port=dovecot.port,
        security="plain",
        username="ada",
        password=PASSWORD,
        require_authenticated=False,
    )
    return rt


def poll(rt: Runtime) -> imap.PollReport:
    box = mailbox.get(rt, "ada")
    assert box is not None
    return imap.poll(rt, box)


def test_the_answer_is_a_reply_in_the_thread_sent_once(
    runtime: Runtime, dovecot: Dovecot, smtp: SmtpServer
) -> None:
    rt = wired(runtime, dovecot, smtp)
    mail = a_mail(subject="Lunch?", References="<older@example.org>")
    dovecot.append("ada", mail)
    assert poll(rt).outcomes == {"turn": 1}
    original = next(line for line in mail.decode().splitlines() if line.startswith("Message-ID"))
    mid = original.split(":", 1)[1].strip()
    run_lane(rt, ScriptedAgent({"reply": "Noon works."}), "ada")
    [answered] = send_answers(rt)
    assert answered.state == "sent" and answered.channel == "email"
    assert send_answers(rt) == []  # nothing left, nothing twice
    [reply] = smtp.inbox.received()
    assert reply["To"] == PERSON and reply["From"] == DELEGATE_ADDRESS
    assert reply["Subject"] == "Re: Lunch?"
    assert reply["In-Reply-To"] == mid
    assert reply["References"].split() == ["<older@example.org>", mid]
    assert reply["Message-ID"] == message_id(f"reply:{answered.turn_id}", "example.net")
    assert reply.get_payload().strip() == "Noon works."
    with rt.engine.connect() as connection:
        row = connection.execute(
            text("SELECT reply_state, reply_to FROM channel_messages WHERE turn_id = :t"),
            {"t": answered.turn_id},
        ).one()
    assert (row.reply_state, row.reply_to) == ("sent", PERSON)


def test_a_question_mailed_to_the_person_is_answered_by_replying_to_it(
    runtime: Runtime, dovecot: Dovecot, smtp: SmtpServer
) -> None:
    rt = wired(runtime, dovecot, smtp)
    Leases(rt.engine).acquire("ada", "test", 60)
    asked = publish(kind="task.input_required", source="copilot", delegate_id="ada", runtime=rt).id
    activation = activation_for(rt, [asked], delegate_id="ada")
    settlements = {asked: Settlement(Disposition.NEEDS_INPUT, "Which branch?")}
    contact_on_dispositions(rt, [], activation, settlements, None)
    [question_mail] = smtp.inbox.received()
    assert question_mail["From"] == DELEGATE_ADDRESS  # so that the reply comes back here
    question_id = uuid.UUID(question_mail["X-Inner-Plane-Question"])
    answer = a_mail(
        subject="Re: " + question_mail["Subject"],
        body="main, please\n\nOn Tue, Dec 1, 2026 at 9:00 Delegate wrote:\n> Which branch?",
        In_Reply_To=question_mail["Message-ID"],
    )
    dovecot.append("ada", answer)
    assert poll(rt).outcomes == {"turn": 1}
    with rt.engine.connect() as connection:
        turn_id = connection.execute(
            text("SELECT id FROM user_turns WHERE delegate_id = 'ada'")
        ).scalar_one()
    turn = UserTurns(rt.engine).get(turn_id)
    assert turn is not None and turn.in_reply_to == question_id
    assert turn.text.endswith("main, please")  # the quoted question trimmed
