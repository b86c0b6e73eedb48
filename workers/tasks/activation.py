"""The activation lane's tasks, on the `activation` queue (concurrency 1, prefetch 1), user turns
on `user_turns`, and the sweeper on `periodic`. Payload-free apart from the delegate (a user
turn's message is journaled once per task id): running one twice is harmless."""

from __future__ import annotations

from celery import Task, shared_task
from celery.exceptions import Reject

from inner_plane import celery_bridge as names
from inner_plane.lane.sweeper import sweep
from inner_plane.lane.user_turns import ensure_user_turn, wake_for_user_turn
from inner_plane.runtime import get_runtime
from inner_plane.signals.model import IDENTIFIER_RE, SignalError
from workers.tasks.signals import RETRY, leaving_receipts


def _delegate(value: object) -> str:
    if not isinstance(value, str) or IDENTIFIER_RE.fullmatch(value) is None:
        raise Reject(f"delegate_id: invalid {value!r}", requeue=False)
    return value


# A store error mid-run (a restart, a failover, a dead pooled connection) is retried with
# backoff rather than acked: otherwise the delegate's work waits for the sweeper, or, where no
# beat runs, for good. A rerun is harmless: the lease decides, and a dead run's claims are
# recovered by the next holder.
@shared_task(name=names.ACTIVATE_TASK, acks_late=True, **RETRY)
def activate(delegate_id: str) -> None:
    # Loaded by a worker that consumes `activation` before its pool forks (workers.app); no other
    # process (the signals, user-turn and periodic workers, beat, Flower) loads the lane.
    from inner_plane.wiring import run_lane

    run_lane(get_runtime(), _delegate(delegate_id), reason="wake")


# The same for a turn: retried (its task id journals it once), not left to the receipts' replay.
@shared_task(name=names.USER_TURN_TASK, acks_late=True, bind=True, **RETRY)
def user_turn(
    self: Task,  # type: ignore[type-arg]
    delegate_id: str,
    text: str,
    channel: str = "text",
    turn_id: str | None = None,
) -> None:
    """On `user_turns`: journal the turn now (the journal tells a running lane, which yields at
    its next safe point) and wake the delegate's lane; never runs an activation itself."""
    try:
        with leaving_receipts(self.request.id):
            ensure_user_turn(get_runtime(), delegate_id, text, channel, turn_id, self.request.id)
    except SignalError as error:
        raise Reject(str(error), requeue=False) from None
    wake_for_user_turn(get_runtime(), delegate_id)


@shared_task(name=names.SWEEP_TASK, acks_late=True)
def sweep_lanes() -> dict[str, object]:
    report = sweep(get_runtime())
    return {
        "recovered": report.recovered,
        "woken": report.woken,
        "expired": report.expired,
        "replayed": report.replayed,
    }
