"""Tool effects with real activation workers: an activation killed (kill -9) after its tool set
a timer is rerun by another worker, and the rerun makes no second timer."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish
from inner_plane.runtime import Runtime, redis_client
from tests.support.processes import ChildProcess, celery_worker
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

SCRIPT = {
    "calls": [{"name": "set_timer", "arguments": {"purpose": "check the build", "every_s": 3600}}],
    "steps": 3,
    "step_s": 1.5,
}
ENV = {
    "INNER_PLANE_AGENT": "scripted",
    "INNER_PLANE_AGENT_SCRIPT": json.dumps(SCRIPT),
    "INNER_PLANE_BATCH_QUIET_MS": "50",
    "INNER_PLANE_BATCH_MAX_AGE_MS": "200",
    "INNER_PLANE_LEASE_TTL_S": "2",
    "INNER_PLANE_HEARTBEAT_S": "0.3",
}


def _timers(runtime: Runtime) -> list[Any]:
    with runtime.engine.connect() as connection:
        return list(connection.execute(text("SELECT id, effect_key, caused_by FROM timers")))


def test_a_rerun_after_kill_9_makes_one_timer(
    stores: Stores, runtime: Runtime, children: list[ChildProcess], log_dir: Any
) -> None:
    redis_client(stores.redis_url).flushdb()
    env = stores.env(**ENV)
    victim = celery_worker("victim", env, log_dir, queues="activation").start()
    children.append(victim)
    victim.wait_for(" ready.", 60)

    wake = publish(kind="task.completed", source="copilot", data={"task_id": "K9"}).id
    wait_until(lambda: _timers(runtime), "the tool's timer", 60)
    victim.kill()  # SIGKILL to the whole process group, mid-activation

    survivor = celery_worker("survivor", env, log_dir, queues="activation").start()
    children.append(survivor)
    survivor.wait_for(" ready.", 60)
    time.sleep(2.5)  # the dead holder's lease runs out
    sweep(runtime)  # beat's sweeper: the delegate has a stale claim and no live lease

    def delivered() -> bool:
        signal = runtime.signals.get(wake)
        return signal is not None and signal.state.value == "delivered"

    wait_until(delivered, "the rerun to deliver the signal", 90)
    with runtime.engine.connect() as connection:
        runs = (
            connection.execute(
                text("SELECT state FROM activations WHERE delegate_id = 'default' ORDER BY seq")
            )
            .scalars()
            .all()
        )
    assert runs[0] == "abandoned" and runs[-1] == "completed"
    [timer] = _timers(runtime)  # the rerun called set_timer again: same effect, no new timer
    assert timer.caused_by is not None
    assert "event=timer_effect_repeated" in survivor.output()
