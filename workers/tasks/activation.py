"""The activation lane's tasks, on the `activation` queue (concurrency 1, prefetch 1), and the
sweeper on `periodic`. Payload-free apart from the delegate: running one twice is harmless."""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import Reject

from inner_plane import celery_bridge as names
from inner_plane.lane.runner import run_lane
from inner_plane.lane.sweeper import sweep
from inner_plane.runtime import get_runtime
from inner_plane.signals.model import IDENTIFIER_RE


def _delegate(value: object) -> str:
    if not isinstance(value, str) or not IDENTIFIER_RE.match(value):
        raise Reject(f"delegate_id: invalid {value!r}", requeue=False)
    return value


@shared_task(name=names.ACTIVATE_TASK, acks_late=True)
def activate(delegate_id: str) -> None:
    run_lane(get_runtime(), _delegate(delegate_id), reason="wake")


@shared_task(name=names.USER_TURN_TASK, acks_late=True)
def user_turn(delegate_id: str, turn_id: str) -> None:
    run_lane(get_runtime(), _delegate(delegate_id), reason=f"user turn {turn_id}")


@shared_task(name=names.SWEEP_TASK, acks_late=True)
def sweep_lanes() -> dict[str, object]:
    report = sweep(get_runtime())
    return {"recovered": report.recovered, "woken": report.woken, "expired": report.expired}
