"""An activate or a user turn whose run meets a transient store error is retried by Celery (bounded
backoff), not acked and lost: with a real `celery worker` and no beat (so no sweeper to fall back
on), every PostgreSQL session of the worker is terminated, as a database restart or a failover
does; the next wake's run finds its pooled connection dead, and the signal is still delivered."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from inner_plane import celery_bridge
from inner_plane.journal.lane.user_turns import UserTurns
from inner_plane.lane.user_turns import TURN_NAMESPACE
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import State
from tests.acceptance.test_lane_workers import BASE_ENV, _stores
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

# Every pooled session of this database opened since ``since`` (the worker's, and any this
# process opened meanwhile) but the caller's own. Older ones belong to what this pytest process
# keeps for later tests (servers, listeners): they stay. So do the LISTEN sessions: a listener
# that reconnected would read through the pool first, SQLAlchemy would then drop the dead
# pooled sessions, and the lane's run might never meet one.
TERMINATE = text(
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' AND backend_start >= :since "
    "AND query NOT LIKE 'LISTEN %'"
)
NOW = text("SELECT clock_timestamp()")


def now(runtime: Runtime) -> object:
    with runtime.engine.connect() as connection:
        return connection.execute(NOW).scalar()


def terminate_sessions_since(runtime: Runtime, since: object) -> None:
    with runtime.engine.connect() as connection:
        assert connection.execute(TERMINATE, {"since": since}).scalar()
        connection.commit()
    runtime.engine.dispose()  # this process's own pooled sessions may have gone too


def delivered(runtime: Runtime, signal_id: object) -> bool:
    signal = runtime.signals.get(signal_id)  # type: ignore[arg-type]
    return signal is not None and signal.state is State.DELIVERED


def test_a_run_that_finds_its_connection_dead_is_retried_and_delivers(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    environment = _stores(runtime).env(**BASE_ENV, INNER_PLANE_AGENT_SCRIPT=json.dumps({}))
    since = now(runtime)
    [worker] = start_celery_workers(children, environment, log_dir, {"lane": "activation"}).values()
    first = publish(kind="task.completed", source="copilot", runtime=runtime).id
    wait_until(lambda: delivered(runtime, first), "the first signal delivered", 30)
    # The run has ended, its session back in the pool: terminated during the run's last steps
    # (they follow the delivery's commit), the session was dropped by that run, and the next
    # one took a new one and met nothing dead.
    worker.wait_for(" succeeded in ", 30)

    offset = len(worker.output())
    terminate_sessions_since(runtime, since)

    second = publish(kind="task.completed", source="copilot", runtime=runtime).id
    wait_until(lambda: delivered(runtime, second), "the second signal delivered", 60)
    # It took a retry: the run that met the dead connection failed, and its task went again.
    assert "Retry in" in worker.output()[offset:], worker.output()[offset:][-3000:]


def test_a_turn_whose_worker_lost_its_sessions_is_retried_and_answered(
    runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    environment = _stores(runtime).env(
        **BASE_ENV, INNER_PLANE_AGENT_SCRIPT=json.dumps({"reply": "here"})
    )
    since = now(runtime)
    workers = start_celery_workers(
        children, environment, log_dir, {"lane": "activation", "turns": "user_turns"}
    )
    first = publish(kind="task.completed", source="copilot", runtime=runtime).id
    wait_until(lambda: delivered(runtime, first), "the first signal delivered", 30)
    celery_bridge.sender(runtime.settings).send_task(
        celery_bridge.USER_TURN_TASK, args=("default", "warm up", "text"),
        queue=celery_bridge.USER_TURNS_QUEUE, task_id="turn-before",
    )  # fmt: skip
    wait_until(lambda: _answered(runtime, "turn-before"), "the first turn answered", 30)
    workers["turns"].wait_for(" succeeded in ", 30)  # as above: the turn's run has ended

    offset = len(workers["turns"].output())
    terminate_sessions_since(runtime, since)

    celery_bridge.sender(runtime.settings).send_task(
        celery_bridge.USER_TURN_TASK, args=("default", "still there?", "text"),
        queue=celery_bridge.USER_TURNS_QUEUE, task_id="turn-after",
    )  # fmt: skip
    wait_until(lambda: _answered(runtime, "turn-after"), "the turn after answered", 60)
    assert "Retry in" in workers["turns"].output()[offset:]


def _answered(runtime: Runtime, task_id: str) -> bool:
    turn = UserTurns(runtime.engine).get(uuid.uuid5(TURN_NAMESPACE, task_id))
    return turn is not None and turn.state == "done"
