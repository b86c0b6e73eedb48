"""The simulator against real `celery worker` processes.

- Fidelity: a history recorded under policy P (several delegates, bursts, trickles, timers, a
  user turn, an interrupt) replayed under P reproduces every recorded activation: the same
  batches, each start within the tolerance.
- Prediction: the same script replayed live under P' agrees with what the simulator predicted
  for P' from the P history (activation counts within 5%, p50 delay within 10% or 100 ms, batch
  membership for at least 90% of the signals).

The script's gaps keep every batch boundary at least a second away from the next signal, so the
outcome does not depend on how late a loaded machine runs a task.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from inner_plane.attention import live, versions
from inner_plane.attention.document import SettingsDefaults, parse_document
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime
from inner_plane.simulator.replay import simulate
from tests.acceptance.test_lane_workers import _stores, start_workers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

P = "[defaults]\nquiet_ms = 2000\nmax_age_ms = 5000\nwake_budget_per_hour = 1000\n"
P_PRIME = (
    P
    + '[[rules]]\nkind = "task.*"\nquiet_ms = 6000\nmax_age_ms = 12000\n'
    + '[[rules]]\nkind = "memory.*"\nquiet_ms = 500\nmax_age_ms = 1000\n'
    + '[[rules]]\nkind = "external.never.*"\nquiet_ms = 1\n'
)


@pytest.fixture(autouse=True)
def fresh_sources() -> Iterator[None]:
    live._sources.clear()
    yield
    live._sources.clear()


def script(run: str) -> list[tuple[float, Callable[[int], Any]]]:
    """(offset, action(index)) steps; every signal carries its script index in ``data.i``."""

    def burst(delegate: str, kind: str, n: int) -> Callable[[int], Any]:
        def act(i: int) -> Any:
            return publish_many(
                [
                    {
                        "kind": kind,
                        "source": "script",
                        "delegate_id": delegate,
                        "data": {"i": i * 100 + k, "task_id": f"{run}-{i}-{k}"},
                    }
                    for k in range(n)
                ]
            )

        return act

    def one(delegate: str, kind: str, **more: Any) -> Callable[[int], Any]:
        def act(i: int) -> Any:
            return publish(
                kind=kind,
                source="script",
                delegate_id=delegate,
                data={
                    "i": i * 100,
                    "task_id": f"{run}-{i}",
                    "timer": f"{run}-{i}",
                    "scheduled_for": str(i),
                },
                **more,
            )

        return act

    def turn(delegate: str) -> Callable[[int], Any]:
        return lambda i: user_turn(delegate, f"turn {i}", "sms")

    return [
        (0.0, burst("d1", "task.completed", 8)),
        (0.0, burst("d2", "memory.consolidated", 5)),
        (1.0, one("d3", "timer.due")),
        (4.0, one("d1", "task.completed")),
        (4.3, one("d1", "task.completed")),
        (4.6, one("d1", "task.completed")),
        (7.0, one("d3", "timer.due")),
        (8.0, one("d2", "external.notes.saved", mode="next-turn")),
        (9.0, turn("d2")),
        (11.0, one("d3", "system.alert", mode="interrupt")),
        (12.0, one("d1", "memory.conflict")),
        (13.5, one("d1", "memory.conflict")),
        (15.0, one("d1", "memory.conflict")),
        (16.5, one("d1", "memory.conflict")),
        (18.0, one("d1", "memory.conflict")),
    ]


def play(run: str) -> int:
    steps = script(run)
    began = time.monotonic()
    for index, (offset, act) in enumerate(steps):
        delay = began + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        act(index)
    return len(steps)


def settled(rt: Runtime, since: datetime) -> bool:
    with rt.engine.connect() as connection:
        open_signals = connection.execute(
            text(
                "SELECT count(*) FROM signals WHERE created_at >= :s "
                "AND state NOT IN ('delivered', 'dismissed', 'expired', 'dead')"
            ),
            {"s": since},
        ).scalar()
        open_turns = connection.execute(
            text("SELECT count(*) FROM user_turns WHERE state IN ('queued', 'running')")
        ).scalar()
        running = connection.execute(
            text("SELECT count(*) FROM activations WHERE state = 'running'")
        ).scalar()
    return open_signals == 0 and open_turns == 0 and running == 0


def script_index(rt: Runtime, since: datetime, until: datetime) -> dict[uuid.UUID, int]:
    with rt.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT id, (data->>'i')::int AS i FROM signals "
                "WHERE created_at >= :s AND created_at < :u"
            ),
            {"s": since, "u": until},
        ).all()
    return {row.id: row.i for row in rows}


def recorded_batches(rt: Runtime, since: datetime, until: datetime) -> list[list[uuid.UUID]]:
    with rt.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT signal_ids FROM activations WHERE started_at >= :s AND started_at < :u "
                "AND state <> 'interrupted' ORDER BY started_at"
            ),
            {"s": since, "u": until},
        ).all()
    return [list(row.signal_ids) for row in rows]


def membership(
    batches: list[list[uuid.UUID]], index: dict[uuid.UUID, int]
) -> dict[int, frozenset[int]]:
    """Each signal's script index -> the script indices of its batch."""
    out: dict[int, frozenset[int]] = {}
    for batch in batches:
        members = frozenset(index[s] for s in batch if s in index)
        for member in members:
            out[member] = members
    return out


def record(rt: Runtime, policy: str, run: str) -> tuple[datetime, datetime]:
    versions.apply(rt, policy, "test")
    since = datetime.now(UTC) - timedelta(milliseconds=200)
    play(run)
    wait_until(lambda: settled(rt, since), f"run {run} settled", 120)
    until = datetime.now(UTC) + timedelta(milliseconds=200)
    return since, until


def test_fidelity_and_prediction(runtime: Runtime, children, log_dir) -> None:
    start_workers(children, _stores(runtime), log_dir, ["s1", "s2"], {"steps": 1, "reply": "ok"})
    kinds = [k.kind for k in runtime.registry.kinds()]
    base = SettingsDefaults.of(runtime.settings)

    since_p, until_p = record(runtime, P, "p")
    time.sleep(3)  # nothing of run p is still in a window when run p' starts
    since_q, until_q = record(runtime, P_PRIME, "q")

    # Fidelity: P over its own history reproduces every recorded activation.
    report_p = simulate(
        runtime.engine, runtime.registry, runtime.settings, parse_document(P, kinds, base),
        since_p, until_p,
    )  # fmt: skip
    detail = report_p["fidelity_detail"]
    assert report_p["fidelity"] == 1.0, report_p["fidelity_detail"]
    assert detail["recorded"] >= 9
    assert report_p["recorded"]["interrupts"] == report_p["candidate"]["interrupts"] == 1
    assert report_p["recorded"]["activations"]["per_trigger"].get("user_turn") == 1
    assert len(report_p["recorded"]["activations"]["per_delegate"]) == 3

    # Prediction: P' over the P history, against P' live over the same script.
    predicted_batches: list[list[uuid.UUID]] = []
    predicted = simulate(
        runtime.engine, runtime.registry, runtime.settings, parse_document(P_PRIME, kinds, base),
        since_p, until_p, batches=predicted_batches,
    )  # fmt: skip
    observed = simulate(
        runtime.engine, runtime.registry, runtime.settings, parse_document(P_PRIME, kinds, base),
        since_q, until_q,
    )  # fmt: skip
    assert observed["fidelity"] == 1.0, observed["fidelity_detail"]
    want = observed["recorded"]["activations"]["total"]
    got = predicted["candidate"]["activations"]["total"]
    assert abs(got - want) <= 0.05 * want, (got, want)
    live_p50 = observed["recorded"]["delay_s"]["p50"]
    predicted_p50 = predicted["candidate"]["delay_s"]["p50"]
    assert abs(predicted_p50 - live_p50) <= max(0.1 * live_p50, 0.1), (predicted_p50, live_p50)
    predicted_members = membership(predicted_batches, script_index(runtime, since_p, until_p))
    live_members = membership(
        recorded_batches(runtime, since_q, until_q), script_index(runtime, since_q, until_q)
    )
    agree = sum(1 for i, members in live_members.items() if predicted_members.get(i) == members)
    assert live_members and agree >= 0.9 * len(live_members), (predicted_members, live_members)
    # Split across processes by delegate (each reading its share in the same snapshot), the
    # replay reports the same, figure for figure, and the same batches.
    for document, since, until, alone in (
        (P, since_p, until_p, report_p),
        (P_PRIME, since_p, until_p, predicted),
        (P_PRIME, since_q, until_q, observed),
    ):
        for workers in (2, 3):
            split_batches: list[list[uuid.UUID]] = []
            split = simulate(
                runtime.engine, runtime.registry, runtime.settings,
                parse_document(document, kinds, base), since, until, batches=split_batches,
                workers=workers,
            )  # fmt: skip
            assert split == alone, workers
            if alone is predicted:
                assert sorted(map(sorted, split_batches)) == sorted(map(sorted, predicted_batches))
    # The report names what the candidate changes, and the rule that never matched.
    assert predicted["rules_never_matched"] == ["external.never.*"]
    assert predicted["model_calls"]["recorded"] == report_p["recorded"]["activations"]["total"]
