"""User turns travel on their own queue, which `up` consumes with a worker of its own."""

from __future__ import annotations

from celery import Celery

from inner_plane import celery_bridge as names
from inner_plane.config import build_settings
from inner_plane.services.processes import celery_command, default_processes
from workers.app import configure


def test_the_user_turn_task_is_routed_to_the_user_turns_queue() -> None:
    app = Celery("routing-test", set_as_current=False)
    configure(app, build_settings(database_url="postgresql://h/db", redis_url="redis://h:1/0"))
    routes = app.conf.task_routes
    assert routes[names.USER_TURN_TASK] == {"queue": names.USER_TURNS_QUEUE}
    assert routes[names.ACTIVATE_TASK] == {"queue": names.ACTIVATION_QUEUE}


def test_up_runs_a_worker_on_the_user_turns_queue() -> None:
    settings = build_settings(database_url="postgresql://h/db", redis_url="redis://h:1/0")
    specs = {spec.name: spec for spec in default_processes(settings)}
    assert specs["user-turns-worker"].command[-2:] == ["worker", "user_turns"]
    command = celery_command("user_turns", settings)
    assert command[command.index("-Q") + 1] == names.USER_TURNS_QUEUE
