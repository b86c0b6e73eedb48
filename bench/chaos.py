"""The plane outliving its faults (issue 31), on a real `inner-plane up` with embedded stores and
the scripted agent (an activation takes about half a second).

- ``claims_recovered_after_kill_*``: a wake for a quiet delegate; once its activation runs, the
  activation worker's pool child holding it is killed (kill -9) and nothing more is sent for that
  delegate. The figure is the time from the kill to the signal delivered by a later run: the
  activate Celery redelivers (the task is rejected when its worker is lost), or the next sweep
  (every 2 s here) when that one came before PostgreSQL saw the holder's connection close, sees
  the dead holder's liveness lock free and recovers its claims, although its lease (TTL 60 s
  here) has most of its time left. (``tests/acceptance/test_chaos.py`` kills the whole worker,
  so that only the sweeper can recover.)
- ``plane_back_after_pg_restart_s``: `pg_ctl -D <data dir>/pg restart -m fast` from outside
  `up`; the time from the restart's start until a wake sent right after it is delivered (the
  next activation completed), the worst of the rounds.
- ``lost_after_redis_kill``: acknowledged wakes (10 a second over 8 delegates) never delivered
  after kill -9 of the embedded Redis mid-load and a 90 s settle, summed over the rounds (before
  receipts: about one in 77 per kill); ``wakes_through_redis_kills`` is how many were sent.
- ``publication_back_after_signals_worker_kill_s``: the signals worker killed while a wake it
  popped sits unread in its socket (the broker holds it nowhere); the time from the kill to the
  wake delivered, journaled from its receipt (``INNER_PLANE_RECEIPT_GRACE_S`` 10 s here, then
  the next sweep), the worst of the rounds. Before receipts it was never delivered.

Baseline in the same run: the same wake with no fault (sent to delivered).

    python -m bench.chaos [--quick]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from typing import Any

from bench.harness import QUICK, data_dir, emit, summary
from tests.support.chaos import (
    Load,
    Plane,
    judge,
    kill_signals_worker_holding_a_wake,
    running_activation,
    send_wake,
    wait_delivered,
)

KILL_ROUNDS = 5 if QUICK else 12
RESTART_ROUNDS = 2 if QUICK else 4
REDIS_ROUNDS = 2 if QUICK else 4
LOAD_DELEGATES = [f"bench-chaos-{n}" for n in range(8)]
DELEGATE = "bench-chaos"
POLL_S = 0.01


def _quiet(plane: Plane, timeout: float = 120) -> None:
    """Nothing running or waiting for the delegate (between rounds)."""
    deadline = time.monotonic() + timeout
    while running_activation(plane.engine, DELEGATE) is not None:
        if time.monotonic() > deadline:
            raise SystemExit("the delegate never went quiet")
        time.sleep(0.1)


def _baseline(plane: Plane) -> float:
    _quiet(plane)
    sent = time.monotonic()
    task = send_wake(plane, DELEGATE)
    wait_delivered(plane, task, 120)
    return time.monotonic() - sent


def _kill_round(plane: Plane) -> float | None:
    """Seconds from the kill to the delivery; None if the run ended before it was caught."""
    _quiet(plane)
    task = send_wake(plane, DELEGATE)
    deadline = time.monotonic() + 60
    run = None
    while run is None and time.monotonic() < deadline:
        run = running_activation(plane.engine, DELEGATE)
        time.sleep(POLL_S)
    if run is None:
        return None
    killed = time.monotonic()
    try:
        os.kill(int(run.holder.split(":")[1]), signal.SIGKILL)
    except ProcessLookupError:
        return None
    wait_delivered(plane, task, 180)
    return time.monotonic() - killed


def _restart_round(plane: Plane) -> float:
    _quiet(plane)
    started = time.monotonic()
    done = plane.pg_ctl_restart()
    if done.returncode != 0:
        raise SystemExit(f"pg_ctl restart failed; see {plane.data_dir / 'pg_ctl.log'}")
    task = send_wake(plane, DELEGATE)
    wait_delivered(plane, task, 180)
    return time.monotonic() - started


def _redis_round(plane: Plane) -> tuple[int, int]:
    """Wakes lost, and sent, through one kill -9 of Redis mid-load."""
    mark = len(plane.output())
    with Load(plane, LOAD_DELEGATES) as load:
        time.sleep(3)
        os.kill(plane.redis_pid(), signal.SIGKILL)
        plane.up.wait_for("!! embedded Redis is back", timeout=60, after=mark)
        time.sleep(3)
    verdict = judge(plane.engine, LOAD_DELEGATES, load.sent, settle_s=90)
    return len(verdict.lost), len(load.sent)


def _popped_round(plane: Plane) -> float:
    task, killed = kill_signals_worker_holding_a_wake(plane, DELEGATE)
    wait_delivered(plane, task, 180)
    return time.monotonic() - killed


def main() -> None:
    base = data_dir("chaos")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(base)
    base.mkdir(parents=True)
    plane = Plane.start((base / "plane").resolve(), base)
    figures: dict[str, Any] = {}
    try:
        baseline = [_baseline(plane) for _ in range(KILL_ROUNDS)]
        recovered: list[float] = []
        misses = 0
        while len(recovered) < KILL_ROUNDS and misses < 3 * KILL_ROUNDS:
            took = _kill_round(plane)
            if took is None:
                misses += 1
                continue
            recovered.append(took)
            print(f"  kill {len(recovered)}: delivered {took:.2f} s after the kill", flush=True)
        back = []
        for n in range(RESTART_ROUNDS):
            back.append(_restart_round(plane))
            print(f"  pg_ctl restart {n + 1}: plane back in {back[-1]:.2f} s", flush=True)
        lost, through = 0, 0
        for n in range(REDIS_ROUNDS):
            round_lost, round_sent = _redis_round(plane)
            lost, through = lost + round_lost, through + round_sent
            print(f"  Redis kill -9 {n + 1}: {round_lost} of {round_sent} wakes lost", flush=True)
        popped = []
        for n in range(REDIS_ROUNDS):
            popped.append(_popped_round(plane))
            print(
                f"  signals worker killed holding a wake {n + 1}: "
                f"delivered {popped[-1]:.2f} s after"
            )
        verdict = judge(plane.engine, [DELEGATE, *LOAD_DELEGATES], [], settle_s=60)
        kills, base_s = summary(recovered, 2), summary(baseline, 2)
        figures = {
            "claims_recovered_after_kill_p50_s": kills["p50"],
            "claims_recovered_after_kill_p99_s": kills["p99"],
            "kills": kills["n"],
            "baseline_delivered_p50_s": base_s["p50"],
            "baseline_delivered_p99_s": base_s["p99"],
            "plane_back_after_pg_restart_s": round(max(back), 2),
            "plane_back_after_pg_restart_each_s": [round(b, 2) for b in back],
            "lost_after_redis_kill": lost,
            "wakes_through_redis_kills": through,
            "redis_kills": REDIS_ROUNDS,
            "publication_back_after_signals_worker_kill_s": round(max(popped), 2),
            "receipt_grace_s": 10,
            "lease_ttl_s": 60,
            "sweep_interval_s": 2,
            "stuck_after": sum(verdict.stuck.values()),
            "overlapping": len(verdict.overlapping),
            "double_deliveries": len(verdict.double_deliveries),
        }
        print(
            f"kill -9 mid-run, no new traffic: delivered p50 {kills['p50']} s, p99 "
            f"{kills['p99']} s (baseline, no kill: p50 {base_s['p50']} s); lease TTL 60 s",
            flush=True,
        )
        print(f"pg_ctl restart -m fast: plane back within {max(back):.2f} s (rounds: {len(back)})")
        print(f"Redis kill -9 under load: {lost} of {through} acknowledged wakes lost")
        print(
            f"signals worker killed holding a popped wake: delivered within {max(popped):.2f} s "
            "(from its receipt)",
            flush=True,
        )
    finally:
        plane.stop()
        plane.close()
    emit(figures)


if __name__ == "__main__":
    main()
