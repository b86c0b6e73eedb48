"""Ingest: ``inner_plane.publish`` and ``inner_plane.publish_many`` on the ``signals`` queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from celery import shared_task
from celery.exceptions import Reject
from redis import RedisError
from sqlalchemy.exc import OperationalError

from inner_plane import celery_bridge as names
from inner_plane.publish import publish, publish_many
from inner_plane.signals.model import SignalError

# A store outage is not the signal's fault: retry (bounded backoff, never past a minute so the
# countdown stays far below the visibility timeout) rather than ack and lose the signal.
TRANSIENT = (OperationalError, RedisError)


class RetryOptions(TypedDict):
    autoretry_for: Sequence[type[BaseException]]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int | None


RETRY: RetryOptions = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": None,
}


# In a worker, messages of this task never reach the body below: the strategy journals them many
# per transaction and acks each after its commit (workers/batching.py). The body serves direct
# calls (``publish_signal(...)``, ``.apply()``). Celery takes task-class attributes such as
# Strategy as options; the celery-types stubs list only the common ones, hence the ignore.
@shared_task(  # type: ignore[call-overload,untyped-decorator]
    name=names.PUBLISH_TASK,
    acks_late=True,
    serializer="json",
    Strategy="workers.batching:buffered_publish",
    **RETRY,
)
def publish_signal(signal: Any) -> dict[str, Any]:
    try:
        return publish(signal, via="celery").public()
    except SignalError as error:
        # Bad input never succeeds on retry: drop it (already logged as rejected).
        raise Reject(str(error), requeue=False) from None


@shared_task(name=names.PUBLISH_MANY_TASK, acks_late=True, serializer="json", **RETRY)
def publish_signals(signals: Any) -> list[dict[str, Any]]:
    if not isinstance(signals, list):
        raise Reject("signals: must be a list of signal objects", requeue=False)
    try:
        return [result.public() for result in publish_many(signals, via="celery")]
    except SignalError as error:
        raise Reject(str(error), requeue=False) from None
