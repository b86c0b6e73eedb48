"""Celery application and configuration. Every setting says why it is set.

Importing this module starts nothing: the configuration is a lazy default that Celery evaluates
when it first reads its configuration (a worker or beat starting, or a caller reading
``app.conf``). Only then are the stores resolved, starting embedded PostgreSQL and Redis where no
URL is set."""

from __future__ import annotations

import importlib
from typing import Any

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)

from beat_schedule import celery_beat_schedule
from inner_plane import celery_bridge as names
from inner_plane.config import Settings, load_settings
from inner_plane.services.embedded import resolve_services


def celery_config(settings: Settings) -> dict[str, Any]:
    """The app's configuration for resolved settings (every store URL known)."""
    visibility = settings.visibility_timeout_s
    transport = names.broker_transport_options(settings)
    return dict(
        broker_url=settings.effective_broker_url,
        # Ack after the task ran: a worker that dies mid-task leaves its message to be redelivered.
        task_acks_late=True,
        # A child killed by the OS (OOM, SIGKILL) requeues its message instead of acking it;
        # every task is idempotent (ids fixed at enqueue, attempts bounded in Postgres).
        task_reject_on_worker_lost=True,
        # Take one message at a time: nothing sits reserved in a worker that may die.
        worker_prefetch_multiplier=1,
        # On a lost broker connection unacked messages go back to the queue anyway; cancel the
        # running copies so they do not run twice.
        worker_cancel_long_running_tasks_on_connection_loss=True,
        # Hard bounds on any task: nothing may outlive the visibility timeout below.
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        # Redis redelivers unacked messages after a visibility timeout longer than the hard time
        # limit, so a running task is never duplicated; set everywhere Celery reads it (docs).
        # RabbitMQ redelivers only on a closed channel: no timeout, publisher confirms instead.
        broker_transport_options=transport,
        result_backend_transport_options={"visibility_timeout": visibility},
        visibility_timeout=visibility,
        # JSON only: no pickle from a shared broker.
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        # One clock for everyone.
        timezone="UTC",
        enable_utc=True,
        # Flower needs task events; STARTED makes running tasks visible in it.
        worker_send_task_events=True,
        task_send_sent_event=True,
        task_track_started=True,
        # The journal is the truth: no result backend to fill or expire.
        task_ignore_result=True,
        # Keep retrying the broker at start instead of crashing the worker.
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # Queues: signals (ingest), activation (one per delegate, concurrency 1), user turns
        # (journaled at once by a worker that never runs an activation), periodic (beat's
        # housekeeping); quorum queues on RabbitMQ (celery_bridge.task_queues).
        task_queues=names.task_queues(settings.effective_broker_url),
        task_default_queue=names.SIGNALS_QUEUE,
        task_routes={
            names.PUBLISH_TASK: {"queue": names.SIGNALS_QUEUE},
            names.PUBLISH_MANY_TASK: {"queue": names.SIGNALS_QUEUE},
            names.REPORT_TASK_TASK: {"queue": names.SIGNALS_QUEUE},
            names.ACTIVATE_TASK: {"queue": names.ACTIVATION_QUEUE},
            names.USER_TURN_TASK: {"queue": names.USER_TURNS_QUEUE},
            names.SWEEP_TASK: {"queue": names.PERIODIC_QUEUE},
            names.TIMERS_TICK_TASK: {"queue": names.PERIODIC_QUEUE},
            names.RETENTION_TASK: {"queue": names.PERIODIC_QUEUE},
            names.NOTIFY_OUTBOX_TASK: {"queue": names.PERIODIC_QUEUE},
            names.MAIL_POLL_TASK: {"queue": names.PERIODIC_QUEUE},
            names.CHANNEL_ANSWER_TASK: {"queue": names.PERIODIC_QUEUE},
        },
        # Periodic work (timer tick, sweeper, retention) lives in beat_schedule/.
        beat_schedule=celery_beat_schedule(settings),
        # Beat records each loop in Redis (`inner-plane health beat`); loop at least every 5 s
        # so a live beat is never mistaken for a silent one.
        beat_scheduler="beat_schedule:PlaneScheduler",
        beat_max_loop_interval=5,
        # Restart pool children now and then to bound leaks from long-lived processes.
        worker_max_tasks_per_child=10_000,
    )


def configure(app: Celery, settings: Settings) -> None:
    """Configure ``app`` now, for settings whose stores are already resolved."""
    app.conf.update(celery_config(settings))


def create_app(settings: Settings | None = None) -> Celery:
    app = Celery("inner_plane", set_as_current=True)
    app.add_defaults(lambda: celery_config(resolve_services(settings or load_settings())))
    app.autodiscover_tasks(["workers"], related_name="tasks", force=True)
    return app


app = create_app()


@worker_process_init.connect
def follow_policy(**_kwargs: Any) -> None:
    """Each worker process hears a new attention policy version at once (LISTEN), besides the
    lane's own read of it at every decision and the poll on use (inner_plane.attention.live)."""
    from inner_plane import logs
    from inner_plane.attention.live import policy_source
    from inner_plane.runtime import get_runtime

    try:
        policy_source(get_runtime()).listen()
    except Exception as error:  # the journal is down: the poll on use catches up later
        logs.emit("policy_listen_failed", reason=str(error)[:200])


def preloaded_by_queue(agent: str) -> dict[str, tuple[str, ...]]:
    """What a worker loads once in its main process, before the pool forks, by the queues it
    consumes. Importing the app leaves these out (their tasks import them when they run), so no
    other process loads them: the lane (agent, composer, tools: about 0.2 s of CPU of a start)
    and the model SDK it calls (about a third of a start) only where activations run, the mail
    and SMS channels only where `periodic` runs."""
    model_sdk = ("openai",) if agent == "openai" else ()
    return {
        names.ACTIVATION_QUEUE: ("inner_plane.wiring", *model_sdk),
        names.PERIODIC_QUEUE: ("inner_plane.channels.imap", "inner_plane.channels.replies"),
    }


@celeryd_after_setup.connect
def preload_for_queues(instance: Any, **_kwargs: Any) -> None:
    """Sent after -Q is applied, before the pool starts."""
    consumed = instance.app.amqp.queues.consume_from
    for queue, modules in preloaded_by_queue(load_settings().agent).items():
        if queue in consumed:
            for module in modules:
                importlib.import_module(module)


@worker_init.connect
def trace_tasks(**_kwargs: Any) -> None:
    """Traces, when the OTEL_* variables ask for them (inner_plane.tracing): set up in the main
    process, before the pool forks (a child re-makes the exporter's thread), with Celery's
    official instrumentation: a task's run span is a child of the span that sent it."""
    from inner_plane import tracing

    if tracing.setup("inner-plane-worker"):
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]


@worker_process_shutdown.connect
def flush_traces(**_kwargs: Any) -> None:
    """A pool child ends without running exit hooks: export its last spans first."""
    from inner_plane import tracing

    tracing.flush()
