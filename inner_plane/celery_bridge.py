"""The library's only door to Celery: task names, queue names, and sending tasks by name.

The library never imports the worker code; the Celery app in ``workers/`` registers tasks under
these names. Keeping the door this small keeps the library's logic testable without a broker.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery

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
REPORT_TASK_TASK = "inner_plane.report_task"


@functools.cache
def _sender(broker_url: str) -> Celery:
    app = Celery("inner_plane_sender", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        task_send_sent_event=True,
    )
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
    priority: int | None = None,
) -> str:
    """Send a task by name; return the Celery task id."""
    result = sender(settings).send_task(
        name, args=args, kwargs=kwargs or {}, queue=queue, countdown=countdown, priority=priority
    )
    return str(result.id)


def send_publish(settings: Settings, signal: dict[str, Any]) -> str:
    return send(settings, PUBLISH_TASK, SIGNALS_QUEUE, args=(signal,))


def send_publish_many(settings: Settings, signals: list[dict[str, Any]]) -> str:
    return send(settings, PUBLISH_MANY_TASK, SIGNALS_QUEUE, args=(signals,))


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
    return send(settings, REPORT_TASK_TASK, SIGNALS_QUEUE, args=args)


def ping_worker(settings: Settings, node: str, timeout: float = 2.0) -> bool:
    """True if the worker named ``node`` answers a Celery ping within ``timeout`` seconds."""
    replies = sender(settings).control.ping(destination=[node], timeout=timeout, limit=1)
    return any(node in reply for reply in replies or [])


def worker_queues(
    settings: Settings, nodes: list[str] | None = None, timeout: float = 1.0
) -> dict[str, list[str]]:
    """The queues each answering worker consumes (every worker, or only ``nodes``)."""
    limit = len(nodes) if nodes else None
    inspect = sender(settings).control.inspect(destination=nodes, timeout=timeout, limit=limit)
    answers = inspect.active_queues() or {}
    return {node: sorted(q["name"] for q in queues or []) for node, queues in answers.items()}
