"""Mail and SMS on the ``periodic`` queue: beat's poll of every mailbox, and sending the answer
to a turn that came in by mail or text (asked by the lane when the turn is answered, and by
beat for anything left)."""

from __future__ import annotations

import uuid

from celery import shared_task

from inner_plane import celery_bridge as names
from inner_plane.runtime import get_runtime

# Both tasks run on `periodic`: a worker consuming it loads the channels before its pool forks
# (workers.app); no other process loads them.


@shared_task(name=names.MAIL_POLL_TASK, acks_late=True, ignore_result=True)
def mail_poll() -> dict[str, int]:
    """Read every mailbox once (a failure is recorded on its mailbox, never raised)."""
    from inner_plane.channels.imap import poll_all

    reports = poll_all(get_runtime())
    return {report.delegate_id: report.read for report in reports}


@shared_task(name=names.CHANNEL_ANSWER_TASK, acks_late=True, ignore_result=True)
def channel_answer(turn_id: str | None = None) -> int:
    """Send the answers waiting to go out (that turn's, or all); running twice sends nothing
    twice (the outbox rows and the message's row lock)."""
    try:
        turn = None if turn_id is None else uuid.UUID(turn_id)
    except (ValueError, TypeError):
        return 0
    from inner_plane.channels.replies import send_answers

    return len(send_answers(get_runtime(), turn))
