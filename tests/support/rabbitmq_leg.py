"""`make test`'s RabbitMQ leg: the broker-relevant acceptance tests again, with Celery's broker
on RabbitMQ (a vhost of the session's own) instead of Redis.

    python -m tests.support.rabbitmq_leg [PYTEST_ARGS...]

Without a reachable RabbitMQ (and rabbitmqctl to create the vhost) it prints one line saying it
skipped the leg and exits 0; with CI=true it fails instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from urllib.parse import urlsplit

from tests.support.broker import (
    LEG_VARIABLE,
    delete_stale_vhosts,
    rabbitmq_reachable,
    rabbitmq_server,
)

# What depends on the broker: the publish path through a worker, the activation lane's workers
# (kill -9, SIGSTOP, redelivery, user turns, takeover after a crash), the deployment probes
# (Celery pings through the broker), `inner-plane status` (workers and queue depths through the
# broker), and RabbitMQ's own checks (quorum queues, kill -9).
LEG_TESTS = [
    "tests/acceptance/test_rabbitmq_broker.py",
    "tests/acceptance/test_celery_publish.py",
    "tests/acceptance/test_lane_workers.py",
    "tests/acceptance/test_takeover_workers.py",
    "tests/acceptance/test_deployment_healthchecks.py",
    "tests/acceptance/test_status.py",
]
# The plane riding through a RabbitMQ restart under load (`rabbitmqctl stop_app`, then
# `start_app`): it stops the whole node, every vhost's connections with it, so it runs alone,
# once the tests above are done.
RESTART_TESTS = ["tests/acceptance/test_chaos_rabbitmq.py"]
NO_TESTS_COLLECTED = 5  # pytest's exit code when the arguments select none of a file's tests


def main(argv: list[str]) -> int:
    server = urlsplit(rabbitmq_server())
    where = f"{server.hostname}:{server.port or 5672}"
    problem = None
    if not rabbitmq_reachable():
        problem = f"no RabbitMQ at {where}"
    elif shutil.which("rabbitmqctl") is None:
        problem = "rabbitmqctl is not on PATH (the leg creates a vhost of its own with it)"
    if problem is not None:
        if os.environ.get("CI") == "true":
            print(f"RabbitMQ leg FAILED: {problem}; CI=true requires it", flush=True)
            return 1
        print(f"RabbitMQ leg skipped: {problem} (CI=true requires it)", flush=True)
        return 0
    delete_stale_vhosts()
    tests = " ".join([*LEG_TESTS, *RESTART_TESTS])
    print(f"RabbitMQ leg: broker on RabbitMQ at {where}: {tests}", flush=True)
    env = {**os.environ, LEG_VARIABLE: "rabbitmq"}
    command = [sys.executable, "-m", "pytest", "-q", "-ra", *LEG_TESTS, *argv]
    leg = subprocess.call(command, env=env)
    print("RabbitMQ leg: the broker restart, alone: " + " ".join(RESTART_TESTS), flush=True)
    # A --basetemp of its own: its per-test table (DIR.tests.json) is not written over the leg's.
    alone = [f"{a}-restart" if a.startswith("--basetemp=") else a for a in argv]
    command = [sys.executable, "-m", "pytest", "-q", "-ra", *RESTART_TESTS, *alone]
    restart = subprocess.call(command, env=env)
    return leg or (0 if restart == NO_TESTS_COLLECTED else restart)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
