"""The test session's Celery broker: Redis (the stores' Redis, the default) or RabbitMQ.

With ``INNER_PLANE_TEST_BROKER=rabbitmq`` (the RabbitMQ leg, see ``tests/support/rabbitmq_leg``)
the session gets a vhost of its own on the RabbitMQ at ``INNER_PLANE_TEST_RABBITMQ`` (default
``amqp://guest:guest@127.0.0.1:5672``), created with ``rabbitmqctl`` and deleted at the end, so
test runs sharing one RabbitMQ never see each other's queues.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from amqp.exceptions import NotFound
from kombu import Connection, Queue
from kombu.transport.native_delayed_delivery import MAX_NUMBER_OF_BITS_TO_USE, level_name

from inner_plane import celery_bridge

LEG_VARIABLE = "INNER_PLANE_TEST_BROKER"
RABBITMQ_VARIABLE = "INNER_PLANE_TEST_RABBITMQ"
DEFAULT_RABBITMQ = "amqp://guest:guest@127.0.0.1:5672"
VHOST_PREFIX = "inner_plane_test_"


def rabbitmq_leg() -> bool:
    return os.environ.get(LEG_VARIABLE, "redis") == "rabbitmq"


def rabbitmq_server() -> str:
    return os.environ.get(RABBITMQ_VARIABLE) or DEFAULT_RABBITMQ


def rabbitmq_reachable(url: str | None = None, timeout: float = 2.0) -> bool:
    parts = urlsplit(url or rabbitmq_server())
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout):
            return True
    except OSError:
        return False


def rabbitmqctl(*args: str) -> str:
    found = shutil.which("rabbitmqctl")
    assert found, "the RabbitMQ leg needs rabbitmqctl on PATH (to create its own vhost)"
    completed = subprocess.run(
        [found, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, f"rabbitmqctl {' '.join(args)}: {completed.stderr}"
    return completed.stdout


@dataclass
class SessionBroker:
    """A RabbitMQ vhost for this session (url None: the broker is the stores' Redis)."""

    url: str | None = None
    vhost: str | None = None

    @classmethod
    def start(cls) -> SessionBroker:
        if not rabbitmq_leg():
            return cls()
        vhost = f"{VHOST_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        rabbitmqctl("add_vhost", vhost)
        parts = urlsplit(rabbitmq_server())
        user = parts.username or "guest"
        rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        return cls(f"{parts.scheme}://{parts.netloc}/{vhost}", vhost)

    def stop(self) -> None:
        if self.vhost is not None:
            rabbitmqctl("delete_vhost", self.vhost)

    def purge(self) -> None:
        """Drop every queued message, the delayed-delivery levels' included (a Redis broker is
        emptied by flushing the stores' Redis)."""
        if self.url is None:
            return
        names = [
            *celery_bridge.ALL_QUEUES,
            *(level_name(level) for level in range(MAX_NUMBER_OF_BITS_TO_USE)),
        ]
        with Connection(self.url) as connection:
            channel = connection.channel()
            for name in names:
                try:
                    Queue(name, channel=channel).purge()
                except NotFound:  # not declared yet; the error closed the channel
                    channel = connection.channel()

    def messages(self, queue: str) -> int:
        """Messages in a queue, ready or delivered and not yet acknowledged."""
        assert self.url is not None
        vhost = self.vhost or urlsplit(self.url).path.removeprefix("/")
        output = rabbitmqctl(
            "list_queues", "-p", vhost, "name", "messages", "--no-table-headers", "--quiet"
        )
        for line in output.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == queue:
                return int(fields[1])
        return 0


def delete_stale_vhosts() -> None:
    """Vhosts of test sessions that died without cleaning up (their pid is gone)."""
    for name in rabbitmqctl("list_vhosts", "--no-table-headers", "--quiet").split():
        if not name.startswith(VHOST_PREFIX):
            continue
        pid = name.removeprefix(VHOST_PREFIX).split("_")[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(AssertionError):
                rabbitmqctl("delete_vhost", name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
