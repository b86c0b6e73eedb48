"""One-signal publish messages journaled many per transaction, acked only after the commit.

A Celery task strategy runs in the worker's main process for every message of its task: this
one keeps ``inner_plane.publish`` messages in a buffer instead of handing each to a pool child,
and journals the buffer as one ``publish_drafts`` call (one Redis round trip, one insert, one
commit) when it holds ``INNER_PLANE_INGEST_BATCH`` messages (500) or
``INNER_PLANE_INGEST_FLUSH_MS`` (10 ms) after the first one arrived. Then:

- every message is acked only after the transaction that holds its signal committed; until then
  it is unacknowledged in the broker, so a worker killed mid-buffer loses nothing (the broker
  redelivers after its visibility timeout, and the fixed signal id makes the redelivery a
  duplicate, not a second row);
- on a Redis broker, the messages journaled (or rejected for good) leave the receipts ledger in one
  round trip per batch (:mod:`inner_plane.receipts`); what a killed worker held, or what a
  crash took between Redis and the worker, stays there for the sweeper, seconds later rather
  than after the visibility timeout;
- a bad message is rejected alone (``requeue=False``, one ``rejected`` line); the others of its
  buffer are journaled;
- a store outage keeps the buffer, unacknowledged, and tries again after a pause;
- any other failure of the batch falls back to one message per transaction, so the one message
  that fails is rejected alone.

The worker's prefetch is raised by one for each buffered message (and lowered after its ack), so
the buffer can fill whatever ``worker_prefetch_multiplier`` says for the other tasks.

Flower (and any other consumer of Celery's task events) sees every message as Celery's own
strategy would show it: ``task-received`` (stamped with the time it entered the buffer) and
``task-started`` when its batch is journaled, then ``task-succeeded`` after its ack, or
``task-failed`` (the reason as the exception) and ``task-rejected`` after its reject. Without
them a batched message would stay PENDING in Flower forever, and the worker's processed count
(Flower counts ``task-received`` events) would stay 0. They are sent at journaling time, not as
each message arrives, so the buffer fills at the broker's pace.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from celery.utils.log import get_logger
from opentelemetry.trace import Link, SpanKind
from redis import RedisError
from sqlalchemy.exc import OperationalError

from inner_plane import logs, receipts, tracing
from inner_plane.celery_bridge import is_amqp
from inner_plane.config import load_settings
from inner_plane.publish import publish_drafts, validate
from inner_plane.signals.model import SignalDraft, SignalError

RETRY_S = 1.0
TRANSIENT = (OperationalError, RedisError)

logger = get_logger("celery.worker.strategy")


@dataclass
class _Held:
    message: Any
    ack: Callable[..., Any]
    reject: Callable[..., Any]
    task_id: str
    raw: Any
    # Whether the prefetch was raised for it (only up to a batch of held messages: while the stores
    # are down the buffer stops growing at the worker's ordinary prefetch).
    counted: bool
    received: float = 0.0  # when it entered the buffer (time.time(): the task-received event's)
    started: float | None = None  # when its batch began to be journaled (task-started)
    settled: bool = False  # journaled or rejected for good (whether or not its ack got through)


def _bounded(links: list[Link]) -> list[Link]:
    # A span keeps 128 links by default (OTEL_SPAN_LINK_COUNT_LIMIT); past that the rows still
    # hold every signal's own traceparent.
    return links[:128]


def _signal_of(message: Any) -> Any:
    args = message.decode()[0]  # protocol 2: (args, kwargs, embed)
    if not isinstance(args, list | tuple) or len(args) != 1:
        raise SignalError("signal", "the publish task takes exactly one signal")
    return args[0]


def buffered_publish(
    task: Task[Any, Any], app: Celery, consumer: Any, **_: Any
) -> Callable[..., None]:
    """The strategy of the one-signal publish task (``Task.Strategy`` names this function)."""
    settings = load_settings()
    batch_size, flush_s = settings.ingest_batch, settings.ingest_flush_ms / 1000
    broker_url = str(app.conf.broker_url)
    ledger = None if is_amqp(broker_url) else receipts.client_for(broker_url)
    held: list[_Held] = []
    errors = consumer.connection_errors
    timer = consumer.timer
    scheduled: list[Any] = []
    info = logger.isEnabledFor(logging.INFO)
    # Task events as Celery's default strategy sends them (worker_send_task_events, `-E`).
    eventer = consumer.event_dispatcher
    send_events = bool(eventer and eventer.enabled and task.send_events)

    def event(kind: str, task_id: str, **fields: Any) -> None:
        if send_events:
            eventer.send(kind, uuid=task_id, **fields)

    def settle(item: _Held, ok: bool, detail: str = "") -> None:
        item.settled = True
        if ok:
            item.ack(logger, errors)
            if info:
                logger.info("Task %s[%s] succeeded: journaled", task.name, item.task_id)
            runtime = 0.0 if item.started is None else time.monotonic() - item.started
            event("task-succeeded", item.task_id, result="'journaled'", runtime=runtime)
        else:
            item.reject(logger, errors, False)
            logger.warning("Task %s[%s] reject requeue=False: %s", task.name, item.task_id, detail)
            event("task-failed", item.task_id, exception=f"SignalError({detail[:200]!r})")
            event("task-rejected", item.task_id, requeue=False)
        if item.counted:
            consumer.qos.decrement_eventually()

    def received(message: Any, task_id: str, at: float) -> None:
        headers = message.headers
        event(
            "task-received",
            task_id,
            name=task.name,
            args=headers.get("argsrepr", ""),
            kwargs=headers.get("kwargsrepr", ""),
            root_id=headers.get("root_id"),
            parent_id=headers.get("parent_id"),
            retries=headers.get("retries", 0),
            eta=None,
            expires=None,
            timestamp=at,
        )

    def forget(settled: list[_Held]) -> None:
        """Out of the receipts ledger: their signals are journaled (or they were rejected)."""
        if ledger is None or not settled:
            return
        try:
            receipts.remove(ledger, [item.task_id for item in settled if item.task_id])
        except RedisError as error:  # the sweeper finds them journaled: a duplicate, no more
            logs.emit("receipt_remove_failed", messages=len(settled), reason=str(error)[:200])

    def journal(batch: list[_Held]) -> None:
        try:
            _journal(batch)
        finally:
            forget([item for item in batch if item.settled])

    def _journal(batch: list[_Held]) -> None:
        # The received and started events of a batch are sent when it is journaled, not as each
        # message arrives: the buffer fills at the broker's pace, with nothing else on the way
        # (received carries the arrival time).
        for item in batch:
            if item.started is None:
                item.started = time.monotonic()
                received(item.message, item.task_id, item.received)
                event("task-started", item.task_id)
        drafts: list[tuple[_Held, SignalDraft]] = []
        for item in batch:
            try:
                drafts.append((item, validate(item.raw, via="celery")))
            except SignalError as error:  # logged as rejected by validate
                settle(item, False, str(error))
        if not drafts:
            return
        try:
            if tracing.on:
                _journal_traced(drafts)
            else:
                publish_drafts([draft for _, draft in drafts], via="celery")
        except TRANSIENT:
            raise
        except Exception:
            if len(drafts) == 1:
                item = drafts[0][0]
                logger.exception("Task %s[%s] failed", task.name, item.task_id)
                settle(item, False, "failed to journal")
                return
            for item, _draft in drafts:
                _journal([item])
            return
        for item, _draft in drafts:
            settle(item, True)

    def _journal_traced(drafts: list[tuple[_Held, SignalDraft]]) -> None:
        """One consumer span for the batch: a child of its first message's publish span (so
        the wake it sends, and the activation, join that trace), linked to the others'. Each
        signal's row keeps its own message's publish span."""
        origins = [tracing.extracted(item.message.headers) for item, _ in drafts]
        links = [link for o in origins[1:] if (link := tracing.link(o)) is not None]
        with tracing.span(
            "process signals",
            SpanKind.CONSUMER,
            {
                "messaging.operation.type": "process",
                "messaging.destination.name": "signals",
                "messaging.batch.message_count": len(drafts),
            },
            links=_bounded(links),
            parent=tracing.parent_of(origins[0]),
        ):
            publish_drafts([draft for _, draft in drafts], via="celery", origins=origins)

    def flush() -> None:
        scheduled.clear()
        if not held:
            return
        batch = held[:]
        del held[:]
        try:
            journal(batch)
        except TRANSIENT as error:
            # Nothing of this batch was acked: keep it and try again after a pause.
            logs.emit("ingest_retry", messages=len(batch), reason=str(error)[:200])
            held[:0] = [item for item in batch if not item.message.acknowledged]
            scheduled.append(timer.call_after(RETRY_S, flush))

    def on_message(
        message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **_: Any
    ) -> None:
        task_id = message.headers.get("id", "")
        try:
            raw = _signal_of(message)
        except Exception as error:
            reject(logger, errors, False)
            logs.emit("rejected", field="signal", reason=str(error)[:200], via="celery")
            logger.warning("Task %s[%s] reject requeue=False: %s", task.name, task_id, error)
            received(message, task_id, time.time())
            event("task-failed", task_id, exception=f"SignalError({str(error)[:200]!r})")
            event("task-rejected", task_id, requeue=False)
            if ledger is not None and task_id:
                with contextlib.suppress(RedisError):
                    receipts.remove(ledger, [task_id])
            return
        if info:
            logger.info("Task %s[%s] received", task.name, task_id)
        counted = len(held) < batch_size
        if counted:
            consumer.qos.increment_eventually()  # built after the strategies
        held.append(_Held(message, ack, reject, task_id, raw, counted, time.time()))
        if len(held) >= batch_size:
            for entry in scheduled:
                entry.cancel()
            flush()
        elif not scheduled:
            scheduled.append(timer.call_after(flush_s, flush))

    return on_message
