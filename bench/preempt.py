"""Pre-emption inside a streaming model call, with a real activation worker (issue 12).

A background activation's model call streams from the strict local Responses server and stalls
(headers sent, no events: a reasoning model thinking). The benchmark then sends a user turn by
task name to the ``user_turns`` queue, as a chat front-end in another process would (a
user-turns worker journals it; the journal's lane notice reaches the running lane), and
measures the time from the send to the moment the server sees the in-flight stream closed; then
it waits for the turn to be answered. Both instants are read on this process's monotonic clock
(the server runs here). Alternate rounds journal the turn in-process through the library instead,
which isolates the lane's part from the Celery hop to the user-turns worker.
As a baseline in the same minute it measures the same server's plain round trip (a request
answered at once), so the figure can be read against the cost of one HTTP exchange.

``bench.lane`` calls :func:`measure` and adds its figures to its final JSON line; alone,
``python -m bench.preempt [--quick]`` runs just this part on its own stores.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness import QUICK, summary
from bench.workers import lane_env, run_alone, running, send_user_turn, wait
from inner_plane import celery_bridge
from inner_plane.config import Settings
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.model_wire import Served, slow
from tests.support.processes import celery_worker
from tests.support.responses_wire import ResponsesServer, message
from tests.support.stores import Stores

ROUNDS = 10 if QUICK else 30
DELEGATE = "preempt"


def _has_user(body: dict[str, Any]) -> bool:
    """A user turn's call: the person's words come last (earlier turns in the history do not)."""
    items = body.get("input") or []
    return bool(items) and isinstance(items[-1], dict) and items[-1].get("role") == "user"


def measure(stores: Stores, settings: Settings, runtime: Runtime, log_dir: Path) -> dict[str, Any]:
    server = ResponsesServer(policy=lambda conversation: [message("Here I am.")])
    # Background calls (no user message) stall; the user's turn is answered at once.
    server.fault_for = lambda body: None if _has_user(body) else slow(stall_s=120)
    aborted_ms: list[float] = []
    journaled_ms: list[float] = []
    answered_ms: list[float] = []
    baseline_ms: list[float] = []
    env = lane_env(
        stores,
        INNER_PLANE_AGENT="openai",
        INNER_PLANE_OPENAI_BASE_URL=server.base_url,
        INNER_PLANE_OPENAI_MODEL="bench-model",
        INNER_PLANE_OPENAI_API_KEY="unused",
        # The continuity capsule's refresh is a background model call too: stalled here like an
        # activation's, it would be taken for the call a turn must abort (and a pre-empted
        # refresh's call ends on its own timeout), so the bench would wait for an abort that
        # is not the lane's to make.
        INNER_PLANE_CAPSULE_ENABLED="false",
    )
    workers = [
        celery_worker("bench-preempt", env, log_dir, queues="activation"),
        celery_worker("bench-turns", env, log_dir, queues=celery_bridge.USER_TURNS_QUEUE),
    ]
    with server.running(), running(workers, ready_s=60):
        journal = ActivationJournal(runtime.engine)
        # Alternating: by task name (the figure), or journaled in-process by the
        # library (the lane's own part, without the Celery hop to the user-turns worker).
        for n in range(ROUNDS * 2):
            by_task = n % 2 == 0
            publish(kind="task.completed", source="bench", delegate_id=DELEGATE, data={"n": n})

            def in_flight() -> Served | None:
                for served in reversed(server.served):
                    if not _has_user(served.body) and served.status == 200:
                        done = served.completed or served.closed_by_client_at is not None
                        return None if done else served
                return None

            stalled = wait(in_flight, 60, "a stalled background call", every_s=0.002)
            time.sleep(0.05)  # well inside the stall, as a turn would arrive
            sent = time.monotonic()
            if by_task:
                turn_id = send_user_turn(settings, DELEGATE, f"are you there? {n}")
            else:
                turn_id = user_turn(DELEGATE, f"are you there? {n}", "bench", runtime)
            wait(
                lambda s=stalled: s.closed_by_client_at is not None,
                30,
                "the abort",
                every_s=0.002,
            )
            assert stalled.closed_by_client_at is not None
            elapsed_ms = (stalled.closed_by_client_at - sent) * 1000
            (aborted_ms if by_task else journaled_ms).append(elapsed_ms)
            wait(
                lambda t=turn_id: (
                    (turn := journal.user_turn(t)) is not None and turn.state == "done"
                ),
                60,
                "the turn answered",
                every_s=0.02,  # a journal query: do not load the machine being measured
            )
            if by_task:
                answered_ms.append((time.monotonic() - sent) * 1000)
        # Baseline, same server, same minute: one request answered at once.
        with httpx.Client() as client:
            for _ in range(ROUNDS):
                t0 = time.monotonic()
                client.post(
                    f"{server.base_url}/responses",
                    json={"model": "m", "input": [{"role": "user", "content": "x"}]},
                ).raise_for_status()
                baseline_ms.append((time.monotonic() - t0) * 1000)
    aborted, journaled = summary(aborted_ms, 1), summary(journaled_ms, 1)
    answered, baseline = summary(answered_ms, 1), summary(baseline_ms, 2)
    print(f"user turn sent by task name -> in-flight call aborted, ms: {aborted} (p99 <= 250?)")
    print(f"user turn journaled in-process -> in-flight call aborted, ms: {journaled}")
    print(f"user turn sent by task name -> turn answered, ms: {answered}")
    print(f"baseline: one answered request to the same server, ms: {baseline}")
    return {
        "preempt_ms": aborted,
        "preempt_p99_ms": aborted["p99"],
        "preempt_journaled_ms": journaled,
        "preempt_journaled_p99_ms": journaled["p99"],
        "preempt_turn_answered_ms": answered,
        "preempt_baseline_request_ms": baseline,
    }


def main() -> None:
    run_alone("preempt", measure)


if __name__ == "__main__":
    main()
