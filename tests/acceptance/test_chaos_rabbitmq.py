"""The plane rides through a RabbitMQ restart (the RabbitMQ leg, tests/support/rabbitmq_leg.py).

A real `inner-plane up` on embedded PostgreSQL and Redis, with Celery's broker on a RabbitMQ vhost
of its own, under a steady load of wakes sent through the broker (publisher confirms: a send that
fails is sent again, the same wake). Mid-load the RabbitMQ node's app is stopped for 15 s and
started again (`rabbitmqctl stop_app` / `start_app`, as an operator restarts the broker). The node
is shared by every test session on the machine: it is always started again, in a finally, and
waited for. Judged from the journal after a bounded settle: nothing acknowledged lost, nothing
duplicated, no overlapping activations, nothing delivered twice, nothing stuck; `up` and every
child it runs went on without a restart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.acceptance.test_up import plane_processes, processes_mentioning
from tests.support.broker import SessionBroker, rabbitmq_leg, rabbitmqctl
from tests.support.chaos import Load, Plane, assert_load_clean
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.chaos,
    # A plane of its own to start (40 s on two loaded cores), a 15 s outage and the settle: about
    # 90 s in all. `up` alone may take minutes to be ready on two loaded cores.
    pytest.mark.slow(reason="a plane of its own, a 15 s RabbitMQ outage and the settle"),
    pytest.mark.timeout(900),
    pytest.mark.skipif(not rabbitmq_leg(), reason="runs in the RabbitMQ leg only"),
]

DELEGATES = [f"rabbit-{n}" for n in range(6)]
OUTAGE_S = 15
CHILDREN = ("signals-worker", "activation-worker", "user-turns-worker", "periodic-worker", "beat")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    broker = SessionBroker.start()  # a vhost of its own, deleted at the end
    assert broker.url is not None
    base = tmp_path_factory.mktemp("chaos-rabbitmq")
    data_dir = (base / "plane").resolve()
    try:
        started = Plane.start(data_dir, base, ready_s=300, INNER_PLANE_BROKER_URL=broker.url)
        try:
            yield started
        finally:
            started.stop()
            started.close()
            for pid in set(plane_processes(data_dir)) | set(processes_mentioning(str(data_dir))):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    finally:
        broker.stop()


@contextlib.contextmanager
def rabbitmq_stopped(seconds: float) -> Iterator[None]:
    """The node's app stopped for ``seconds``; started again and awaited whatever happens."""
    try:
        rabbitmqctl("stop_app")
        time.sleep(seconds)
        yield
    finally:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")


def test_a_rabbitmq_restart_mid_load_loses_nothing(plane: Plane) -> None:
    mark = len(plane.output())
    with Load(plane, DELEGATES) as load:
        time.sleep(3)
        with rabbitmq_stopped(OUTAGE_S):
            pass
        resumed = len(load.sent)
        wait_until(lambda: len(load.sent) >= resumed + 20, "sends to go through again", 120)
    assert load.failed_sends > 0, "no send was refused: the broker was never down"
    assert_load_clean(plane, DELEGATES, load)
    process = plane.up.process
    assert process is not None and process.poll() is None, plane.output()[-3000:]
    touched = [
        line
        for line in plane.supervisor_lines(mark)
        if any(f" {name} " in line for name in CHILDREN)
    ]
    assert touched == [], touched
