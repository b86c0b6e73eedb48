"""The library's only door to Celery: task names, queue names, and sending tasks by name.

The library never imports the worker code; the Celery app in ``workers/`` registers tasks under
these names. Keeping the door this small keeps the library's logic testable without a broker.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from amqp.exceptions import NotFound
from celery import Celery
from kombu import Connection, Exchange, Queue
from kombu.transport.native_delayed_delivery import (
    bind_queue_to_native_delayed_delivery_exchange,
    declare_native_delayed_delivery_exchanges_and_queues,
)

from inner_plane import receipts, tracing
from inner_plane.config import Settings

SIGNALS_QUEUE = "signals"
ACTIVATION_QUEUE = "activation"
USER_TURNS_QUEUE = "user_turns"
PERIODIC_QUEUE = "periodic"

PUBLISH_TASK = "inner_plane.publish"
PUBLISH_MANY_TASK = "inner_plane.publish_many"
ACTIVATE_TASK = "inner_plane.activate"
USER_TURN_TASK = "inner_plane.user_turn"
SWEEP_TASK = "inner_plane.sweep"
TIMERS_TICK_TASK = "inner_plane.timers_tick"
RETENTION_TASK = "inner_plane.retention"
NOTIFY_OUTBOX_TASK = "inner_plane.notify_outbox"
REPORT_TASK_TASK = "inner_plane.report_task"
# Mail and SMS (inner_plane.channels): beat's mailbox poll, and sending a channel's answer.
MAIL_POLL_TASK = "inner_plane.mail_poll"
CHANNEL_ANSWER_TASK = "inner_plane.channel_answer"


# Queues whose messages must survive a RabbitMQ node: replicated quorum queues there. `periodic`
# stays a classic queue: beat re-sends its ticks, and its messages carry a per-message expiry.
QUORUM_QUEUES = (SIGNALS_QUEUE, ACTIVATION_QUEUE, USER_TURNS_QUEUE)
ALL_QUEUES = (*QUORUM_QUEUES, PERIODIC_QUEUE)


def is_amqp(broker_url: str) -> bool:
    """True for a RabbitMQ (AMQP 0-9-1) broker, False for Redis."""
    return urlsplit(broker_url).scheme in {"amqp", "amqps", "pyamqp"}


def task_queues(broker_url: str) -> tuple[Queue, ...]:
    """The plane's queues as the worker and every sender declare them (they must agree: RabbitMQ
    refuses a queue re-declared with other arguments).

    On RabbitMQ each queue has its own topic exchange, because Celery's native delayed delivery
    (how a countdown works on quorum queues, which have no global QoS for worker-side ETAs)
    cannot route through direct exchanges. Quorum queues have no message priorities: nothing is
    sent with one; the journal's claim order (priority, then age) is what orders work.
    """
    if not is_amqp(broker_url):
        return tuple(Queue(name) for name in ALL_QUEUES)
    return tuple(
        Queue(
            name,
            Exchange(name, type="topic", durable=True),
            routing_key=name,
            durable=True,
            queue_arguments={"x-queue-type": "quorum"} if name in QUORUM_QUEUES else None,
        )
        for name in ALL_QUEUES
    )


# Publisher confirms: a send returns only once RabbitMQ holds the message.
AMQP_TRANSPORT_OPTIONS: dict[str, Any] = {"confirm_publish": True}


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """Transport options by broker. Redis: a visibility timeout longer than any task may run, so
    an unacked message is not redelivered while its task still runs. RabbitMQ redelivers an
    unacked message only when the consumer's channel closes, so it needs no such timeout."""
    if is_amqp(settings.effective_broker_url):
        return dict(AMQP_TRANSPORT_OPTIONS)
    return {"visibility_timeout": settings.visibility_timeout_s}


def prepare_broker(app: Celery) -> None:
    """On RabbitMQ, declare the delayed-delivery exchanges and bind the plane's queues to them
    (idempotent). Workers do it at start; a sender does it too, so a countdown sent before any
    worker ever ran is routed rather than refused."""
    if not is_amqp(str(app.conf.broker_url)):
        return
    connection: Connection
    with app.connection_for_write() as connection:
        declare_native_delayed_delivery_exchanges_and_queues(connection, "quorum")
        for queue in app.amqp.queues.values():
            queue.bind(connection.default_channel).declare()  # its exchange and binding too
            bind_queue_to_native_delayed_delivery_exchange(connection, queue)


def amqp_queue_depths(broker_url: str, queues: list[str], timeout: float) -> dict[str, int]:
    """Messages ready in each queue on a RabbitMQ broker (a queue not declared yet holds none);
    messages delivered and not yet acknowledged are not counted."""
    depths: dict[str, int] = {}
    with Connection(broker_url, connect_timeout=timeout) as connection:
        channel = connection.channel()
        for name in queues:
            try:
                declared: Any = Queue(name).bind(channel).queue_declare(passive=True)
                depths[name] = int(declared.message_count)
            except NotFound:  # the error closed the channel
                depths[name] = 0
                channel = connection.channel()
    return depths


@functools.cache
def _sender(broker_url: str) -> Celery:
    app = Celery("inner_plane_sender", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        task_send_sent_event=True,
        task_queues=task_queues(broker_url),
        broker_transport_options=dict(AMQP_TRANSPORT_OPTIONS) if is_amqp(broker_url) else {},
    )
    prepare_broker(app)
    return app


def sender(settings: Settings) -> Celery:
    return _sender(settings.effective_broker_url)


def send(
    settings: Settings,
    name: str,
    queue: str,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    countdown: float | None = None,
    task_id: str | None = None,
) -> str:
    """Send a task by name; return the Celery task id. No broker priority: RabbitMQ's quorum
    queues have none, and the order of work is the journal's."""
    # Traced, the message carries the current span's context (traceparent), so the task's
    # spans in the worker are its children; a worker's own Celery instrumentation does the same.
    app = sender(settings)
    options: dict[str, Any] = {
        "args": args,
        "kwargs": kwargs or {},
        "queue": queue,
        "countdown": _delay(settings, countdown),
        "task_id": task_id,
        "headers": _trace_headers(),
    }
    if is_amqp(settings.effective_broker_url):
        return str(app.send_task(name, **options).id)
    # On Redis the message and its task-sent event go in one round trip (a producer batch is
    # one pipeline), not one each.
    with app.producer_or_acquire() as producer, producer.batch():
        result = app.send_task(name, producer=producer, declare=_NO_DECLARE, **options)
    return str(result.id)


# On Redis, Celery routes a task to its queue through the anonymous exchange (by the queue's
# name: the list the worker reads), so declaring the queue again before each message binds
# nothing the message needs; the workers declare their queues. Skipping it is about a seventh of
# a message's cost to the sender (kombu copies and binds the queue on every publish).
_NO_DECLARE: tuple[Queue, ...] = ()


def _trace_headers() -> dict[str, Any] | None:
    return tracing.inject({}) if tracing.on else None


@dataclass(frozen=True)
class TaskSend:
    """One task for :func:`send_together`."""

    name: str
    queue: str
    args: tuple[Any, ...] = ()
    countdown: float | None = None


def send_together(settings: Settings, tasks: Sequence[TaskSend]) -> list[str]:
    """Send several tasks at once; return their ids. On Redis the messages and their task-sent
    events go in one round trip (kombu's producer batch: one pipeline), instead of two round
    trips per task; a broker without batches publishes each at once, as :func:`send`. Either
    all are sent or the error is raised (a message of the batch may have gone before it)."""
    if len(tasks) == 1:
        only = tasks[0]
        return [send(settings, only.name, only.queue, only.args, countdown=only.countdown)]
    app = sender(settings)
    ids: list[str] = []
    redis_only: dict[str, Any] = (
        {} if is_amqp(settings.effective_broker_url) else {"declare": _NO_DECLARE}
    )
    with app.producer_or_acquire() as producer, producer.batch():
        for task in tasks:
            result = app.send_task(
                task.name,
                args=task.args,
                queue=task.queue,
                countdown=_delay(settings, task.countdown),
                producer=producer,
                headers=_trace_headers(),
                **redis_only,
            )
            ids.append(str(result.id))
    return ids


def _delay(settings: Settings, countdown: float | None) -> float | None:
    if countdown is not None and countdown > 0 and is_amqp(settings.effective_broker_url):
        # RabbitMQ delays through Celery's native delayed delivery, in whole seconds (it refuses
        # a delay that rounds to zero): a delay is never shortened, so round it up.
        return float(math.ceil(countdown))
    return countdown


def send_recorded(
    settings: Settings, name: str, queue: str, args: tuple[Any, ...], task_id: str | None = None
) -> str:
    """Send a signal-carrying task; on a Redis broker, record it in the receipts ledger first
    (:mod:`inner_plane.receipts`). Returns once the broker holds both."""
    task_id = task_id or str(uuid.uuid4())
    broker_url = settings.effective_broker_url
    if not is_amqp(broker_url):
        receipts.record(receipts.client_for(broker_url), task_id, name, queue, list(args))
    return send(settings, name, queue, args=args, task_id=task_id)


def with_message_id(signal: Any, task_id: str, index: int = 0) -> Any:
    """A signal sent with neither an id nor a dedup key gets an id fixed by its message, so a
    redelivery of the message, or its journaling from a receipt, is a duplicate and never a
    second row. (A dedup key, given or made by the kind's template, still decides the id.)"""
    if isinstance(signal, dict) and signal.get("id") is None and signal.get("dedup_key") is None:
        return {**signal, "id": str(uuid.uuid5(_MESSAGE_IDS, f"{task_id}:{index}"))}
    return signal


_MESSAGE_IDS = uuid.UUID("5b0c1a6e-3f1d-4c55-9d8e-6a7f2b1c0d4e")


def send_publish(settings: Settings, signal: dict[str, Any]) -> str:
    task_id = str(uuid.uuid4())
    args = (with_message_id(signal, task_id),)
    return send_recorded(settings, PUBLISH_TASK, SIGNALS_QUEUE, args, task_id)


def send_publish_many(settings: Settings, signals: list[dict[str, Any]]) -> str:
    task_id = str(uuid.uuid4())
    args = ([with_message_id(signal, task_id, n) for n, signal in enumerate(signals)],)
    return send_recorded(settings, PUBLISH_MANY_TASK, SIGNALS_QUEUE, args, task_id)


def send_user_turn(settings: Settings, delegate_id: str, text: str, channel: str = "text") -> str:
    """A user turn from another process (a chat front-end): the user-turns worker journals it at
    once under an id its task id gives it, and wakes the delegate's lane."""
    return send_recorded(settings, USER_TURN_TASK, USER_TURNS_QUEUE, (delegate_id, text, channel))


def send_report_task(
    settings: Settings,
    status: str,
    task_id: str,
    title: str,
    delegate_id: str = "default",
    detail: Any = None,
) -> str:
    """A task runner in another process reports a Copilot task (completed, input_required,
    failed); the signals worker journals it (inner_plane.sources.copilot.report_task)."""
    args = (status, task_id, title, delegate_id, detail)
    return send_recorded(settings, REPORT_TASK_TASK, SIGNALS_QUEUE, args)


def send_channel_answer(settings: Settings, turn_id: str | None = None) -> str:
    """Send the answer to a turn that came in by mail or text (None: every waiting one)."""
    return send(settings, CHANNEL_ANSWER_TASK, PERIODIC_QUEUE, args=(turn_id,))


def broker_answers(settings: Settings, timeout: float = 2.0) -> bool:
    """True if a connection to the broker opens within ``timeout`` seconds (one attempt)."""
    try:
        with Connection(settings.effective_broker_url, connect_timeout=timeout) as connection:
            connection.ensure_connection(max_retries=1, timeout=max(1, round(timeout)))
    except Exception:
        return False
    return True


def ping_worker(settings: Settings, node: str, timeout: float = 2.0) -> bool:
    """True if the worker named ``node`` answers a Celery ping within ``timeout`` seconds."""
    replies = sender(settings).control.ping(destination=[node], timeout=timeout, limit=1)
    return any(node in reply for reply in replies or [])


def worker_queues(
    settings: Settings,
    nodes: list[str] | None = None,
    timeout: float = 1.0,
    expected: int | None = None,
) -> dict[str, list[str]]:
    """The queues each answering worker consumes (every worker, or only ``nodes``). Replies are
    awaited for ``timeout`` seconds, or until ``expected`` (or all ``nodes``) have answered."""
    limit = len(nodes) if nodes else expected
    inspect = sender(settings).control.inspect(destination=nodes, timeout=timeout, limit=limit)
    answers = inspect.active_queues() or {}
    return {node: sorted(q["name"] for q in queues or []) for node, queues in answers.items()}
