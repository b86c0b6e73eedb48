"""Takeover after a crash, with real activation workers (issue 12).

Two activation workers and a user-turns worker run the scripted agent (a background activation
takes seconds, a user turn none). Each round: a background activation runs; its worker is
killed (kill -9 of the whole worker, as the OS or an OOM kill would); right after, a user turn
for that delegate is sent by task name; the figure is the time from the kill to the turn being
answered (journal ``done``), read on this process's clock. The surviving worker takes the lease
over at once because the dead holder's liveness lock went with its connection; before, it waited
for the lease TTL (``INNER_PLANE_LEASE_TTL_S``, kept at its default of 30 s here) and the
sweeper. A fresh worker replaces the killed one before the next round.

Baseline in the same minute: the same turn sent to the same workers with no crash.

``bench.lane`` calls :func:`measure` and adds its figures to its final JSON line; alone,
``python -m bench.takeover [--quick]`` runs just this part on its own stores.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import QUICK, summary
from bench.workers import lane_env, run_alone, running, send_user_turn, wait
from inner_plane.config import Settings
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.processes import ChildProcess, celery_worker
from tests.support.stores import Stores

ROUNDS = 5 if QUICK else 12
DELEGATE = "takeover"
SCRIPT = {"steps": 200, "step_s": 0.05, "user_turn_steps": 0, "reply": "here"}
POLL_S = 0.01  # how often the journal is read while waiting


def _parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def _turn_answered(settings: Settings, journal: ActivationJournal, n: int, sent: float) -> float:
    turn_id = send_user_turn(settings, DELEGATE, f"are you there? {n}")
    turn = wait(
        lambda: t if (t := journal.user_turn(turn_id)) is not None and t.state == "done" else None,
        120,
        "the turn answered",
        every_s=POLL_S,
    )
    took = time.monotonic() - sent
    record = journal.get(turn.activation_id) if turn.activation_id else None
    if record is not None and turn.finished_at is not None and took > 2:
        # Where a slow answer spent its time, from the journal's clock.
        waited = (record.started_at - turn.created_at).total_seconds()
        ran = (turn.finished_at - record.started_at).total_seconds()
        print(
            f"  slow turn {n}: {took:.2f} s; journaled -> started {waited:.2f} s, ran {ran:.2f} s"
        )
    return took


def measure(stores: Stores, settings: Settings, runtime: Runtime, log_dir: Path) -> dict[str, Any]:
    env = lane_env(
        stores, INNER_PLANE_AGENT="scripted", INNER_PLANE_AGENT_SCRIPT=json.dumps(SCRIPT)
    )
    journal = ActivationJournal(runtime.engine)
    count = 0
    run = uuid.uuid4().hex[:6]  # fresh log files: a " ready." of an earlier run must not count

    def activation_worker() -> ChildProcess:
        nonlocal count
        count += 1
        return celery_worker(f"bench-takeover-{run}-{count}", env, log_dir, queues="activation")

    takeover_s: list[float] = []
    baseline_s: list[float] = []
    turns = celery_worker(f"bench-takeover-{run}-turns", env, log_dir, queues="user_turns")
    with running([activation_worker(), activation_worker(), turns], ready_s=90) as workers:
        for n in range(ROUNDS):
            # Baseline: no crash, idle delegate.
            wait(
                lambda: not any(r.state == "running" for r in journal.recent(DELEGATE, 5)),
                60,
                "idle",
                every_s=POLL_S,
            )
            baseline_s.append(_turn_answered(settings, journal, 2 * n, time.monotonic()))

            publish(kind="task.completed", source="bench", delegate_id=DELEGATE, data={"n": n})
            running_now = wait(
                lambda: next(
                    (
                        r
                        for r in journal.recent(DELEGATE, 5)
                        if r.state == "running" and not r.turn_id
                    ),
                    None,
                ),
                60,
                "a running background activation",
                every_s=POLL_S,
            )
            holder = int(running_now.holder.split(":")[1])
            # The holder is an activation worker's pool process (or the worker itself).
            [victim] = [w for w in workers if w.pid in (holder, _parent(holder))]
            killed = time.monotonic()
            victim.kill(signal.SIGKILL)
            takeover_s.append(_turn_answered(settings, journal, 2 * n + 1, killed))
            workers.remove(victim)
            replacement = activation_worker().start()
            workers.append(replacement)
            replacement.wait_for(" ready.", 90)
    taken, baseline = summary(takeover_s, 2), summary(baseline_s, 2)
    print(f"kill -9 of the holder -> user turn answered, s: {taken} (p99 <= 5?)")
    print(f"baseline: user turn answered with no crash, s: {baseline}")
    print(f"lease TTL these workers ran with: {settings.lease_ttl_s} s")
    return {
        "takeover_after_kill_s": taken,
        "takeover_after_kill_p99_s": taken["p99"],
        "takeover_baseline_turn_s": baseline,
        "takeover_lease_ttl_s": settings.lease_ttl_s,
    }


def main() -> None:
    run_alone("takeover", measure)


if __name__ == "__main__":
    main()
