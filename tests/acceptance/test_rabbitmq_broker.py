"""The plane on RabbitMQ: quorum queues, delayed wakes, and a kill -9 of an activation worker
with real `celery worker` processes. Runs in the RabbitMQ leg (tests/support/rabbitmq_leg.py),
which also runs the broker-relevant acceptance tests of the Redis leg against RabbitMQ."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from inner_plane import celery_bridge
from inner_plane.journal.lane.activations import ActivationRecord
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.sweeper import sweep
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.broker import SessionBroker, rabbitmq_leg, rabbitmqctl
from tests.support.processes import ChildProcess, start_celery_workers
from tests.support.stores import Stores
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(not rabbitmq_leg(), reason="runs in the RabbitMQ leg only"),
]

WORKER_ENV = {
    "INNER_PLANE_AGENT": "scripted",
    "INNER_PLANE_AGENT_SCRIPT": json.dumps({"steps": 4, "step_s": 0.25}),
    "INNER_PLANE_BATCH_QUIET_MS": "50",
    "INNER_PLANE_BATCH_MAX_AGE_MS": "300",
    "INNER_PLANE_LEASE_TTL_S": "2",
    "INNER_PLANE_HEARTBEAT_S": "0.3",
    "INNER_PLANE_RETRY_BASE_S": "0.2",
    "INNER_PLANE_RETRY_MAX_S": "1",
}
DELEGATES = [f"d{n}" for n in range(6)]


def start_activation_workers(
    children: list[ChildProcess], stores: Stores, log_dir: Path, names: list[str]
) -> list[ChildProcess]:
    env = stores.env(**WORKER_ENV)
    started = start_celery_workers(children, env, log_dir, dict.fromkeys(names, "activation"), 90)
    return list(started.values())


def every_activation(rt: Runtime) -> list[ActivationRecord]:
    journal = ActivationJournal(rt.engine)
    return [r for d in DELEGATES for r in journal.recent(d, 10_000)]


def overlaps(records: list[ActivationRecord]) -> int:
    """Pairs of one delegate's activations whose [started, finished] intervals overlap."""
    count = 0
    key = lambda r: r.delegate_id  # noqa: E731
    for _, group in itertools.groupby(sorted(records, key=key), key=key):
        ordered = sorted(group, key=lambda r: r.started_at)
        for earlier, later in itertools.pairwise(ordered):
            assert earlier.finished_at is not None, f"activation {earlier.id} never finished"
            if later.started_at < earlier.finished_at:
                count += 1
    return count


def states(rt: Runtime) -> dict[str, int]:
    with rt.engine.connect() as connection:
        rows = connection.execute(text("SELECT state, count(*) FROM signals GROUP BY state"))
        return {row[0]: row[1] for row in rows}


def test_plane_queues_are_durable_quorum_queues(stores: Stores, runtime: Runtime) -> None:
    assert stores.broker.vhost is not None
    assert celery_bridge.is_amqp(runtime.settings.effective_broker_url)
    celery_bridge.sender(runtime.settings)  # declares the queues and delayed delivery
    listing = rabbitmqctl(
        "list_queues", "-p", stores.broker.vhost, "name", "type", "durable",
        "--no-table-headers", "--quiet",
    )  # fmt: skip
    found = {line.split()[0]: line.split()[1:] for line in listing.splitlines() if line.strip()}
    for name in ("signals", "activation", "user_turns"):
        assert found[name] == ["quorum", "true"], (name, found.get(name))
    assert found["periodic"] == ["classic", "true"]
    assert "celery_delayed_0" in found  # the delayed-delivery levels a countdown goes through


def test_kill_9_of_an_activation_worker_loses_nothing_and_never_overlaps(
    stores: Stores, runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    victim, _ = start_activation_workers(children, stores, log_dir, ["rmq-victim", "rmq-peer"])
    published: list[uuid.UUID] = []

    def burst(round_: int) -> None:
        for delegate, n in itertools.product(DELEGATES, range(5)):
            draft = {"round": round_, "n": n}
            published.append(
                publish(kind="task.completed", source="burst", delegate_id=delegate, data=draft).id
            )

    burst(0)

    def victim_running() -> ActivationRecord | None:
        for record in every_activation(runtime):
            pid = int(record.holder.split(":")[1])
            with contextlib.suppress(ProcessLookupError):
                if record.state == "running" and os.getpgid(pid) == victim.pid:
                    return record
        return None

    killed = wait_until(victim_running, "an activation run by the victim", 60)
    victim.kill(signal.SIGKILL)  # its unacked message goes back to the quorum queue at once
    burst(1)
    start_activation_workers(children, stores, log_dir, ["rmq-survivor"])
    burst(2)

    def all_delivered() -> bool:
        sweep(runtime)  # what beat does every few seconds
        return states(runtime) == {"delivered": len(published)}

    wait_until(all_delivered, f"{len(published)} delivered", 120)
    wait_until(
        lambda: all(r.finished_at for r in every_activation(runtime)), "every run finished", 30
    )
    records = every_activation(runtime)
    assert overlaps(records) == 0
    by_id = {r.id: r for r in records}
    assert by_id[killed.id].state == "abandoned"
    delivered = [s for r in records if r.state == "completed" for s in r.signal_ids]
    assert sorted(delivered) == sorted(published), "a signal lost or delivered twice"
    queue = SessionBroker(runtime.settings.broker_url)
    wait_until(lambda: queue.messages("activation") == 0, "the activation queue to drain", 60)


def test_metrics_show_queue_depths_on_rabbitmq(stores: Stores, runtime: Runtime) -> None:
    """/metrics reads RabbitMQ's queue depths over AMQP (a passive queue.declare): the backlog
    alert and the dashboard's queue panel see a queue nobody consumes."""
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from inner_plane.http.app import create_app

    stores.broker.purge()
    for n in range(3):
        celery_bridge.send_publish(
            runtime.settings, {"kind": "task.completed", "source": "ci", "dedup_key": f"q-{n}"}
        )
    with TestClient(create_app(lambda: runtime, bind_host="127.0.0.1")) as client:
        scrape = client.get("/metrics").text
    depths = {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name == "inner_plane_queue_depth"
    }
    assert depths == {"signals": 3, "activation": 0, "user_turns": 0, "periodic": 0}
    stores.broker.purge()
