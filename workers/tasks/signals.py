"""Ingest: ``inner_plane.publish`` and ``inner_plane.publish_many`` on the ``signals`` queue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, TypedDict

from celery import shared_task
from celery.exceptions import Reject
from redis import RedisError
from sqlalchemy.exc import OperationalError

from inner_plane import celery_bridge as names
from inner_plane import logs, receipts
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import get_runtime
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


@contextlib.contextmanager
def leaving_receipts(task_id: str | None) -> Iterator[None]:
    """The message leaves the receipts ledger (inner_plane.receipts) once its body journaled
    it or rejected it for good; a transient failure keeps it there for the retry."""
    try:
        yield
    except (Reject, SignalError):
        _forget(task_id)
        raise
    else:
        _forget(task_id)


def _forget(task_id: str | None) -> None:
    if task_id is None:  # a direct call, not a message
        return
    broker_url = get_runtime().settings.effective_broker_url
    if names.is_amqp(broker_url):
        return
    try:
        receipts.remove(receipts.client_for(broker_url), [task_id])
    except RedisError as error:  # the sweeper finds it journaled: a duplicate, no more
        logs.emit("receipt_remove_failed", messages=1, reason=str(error)[:200])


# In a worker, messages of this task never reach the body below: the strategy journals them many
# per transaction and acks each after its commit (workers/batching.py). The body serves direct
# calls (``publish_signal(...)``, ``.apply()``). Celery takes task-class attributes such as
# Strategy as options; the celery-types stubs list only the common ones, hence the ignore.
@shared_task(  # type: ignore[call-overload,untyped-decorator]
    name=names.PUBLISH_TASK,
    acks_late=True,
    serializer="json",
    Strategy="workers.batching:buffered_publish",
    bind=True,
    **RETRY,
)
def publish_signal(self: Any, signal: Any) -> dict[str, Any]:
    try:
        with leaving_receipts(self.request.id):
            return publish(signal, via="celery").public()
    except SignalError as error:
        # Bad input never succeeds on retry: drop it (already logged as rejected).
        raise Reject(str(error), requeue=False) from None


@shared_task(name=names.PUBLISH_MANY_TASK, acks_late=True, serializer="json", bind=True, **RETRY)
def publish_signals(self: Any, signals: Any) -> list[dict[str, Any]]:
    try:
        with leaving_receipts(self.request.id):
            if not isinstance(signals, list):
                raise Reject("signals: must be a list of signal objects", requeue=False)
            return [result.public() for result in publish_many(signals, via="celery")]
    except SignalError as error:
        raise Reject(str(error), requeue=False) from None
