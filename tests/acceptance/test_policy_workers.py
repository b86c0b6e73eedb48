"""The attention policy with real `celery worker` processes: a version applied while they run
changes their next decisions without a restart, a rollback restores the old decisions, and the
versions are visible on the activations and the signal events."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from inner_plane.attention import live, versions
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.acceptance.test_lane_workers import _stores, start_workers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

# The workers' settings (BASE_ENV) written out: deciding as the settings do, but as v1.
AS_SETTINGS = "[defaults]\nquiet_ms = 50\nmax_age_ms = 300\n"
HOLD_TASKS = AS_SETTINGS + '[[rules]]\nkind = "task.*"\nquiet_ms = 600000\nmax_age_ms = 600000\n'


@pytest.fixture(autouse=True)
def fresh_sources() -> Iterator[None]:
    live._sources.clear()
    yield
    live._sources.clear()


def signal_event(rt: Runtime, signal_id: object, event: str) -> tuple[str, int | None] | None:
    with rt.engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT reason, policy_version FROM signal_events "
                "WHERE signal_id = :s AND event = :e ORDER BY id DESC LIMIT 1"
            ),
            {"s": signal_id, "e": event},
        ).first()
    return None if row is None else (row.reason, row.policy_version)


def state(rt: Runtime, signal_id: object) -> str:
    found = rt.signals.get(signal_id)  # type: ignore[arg-type]
    assert found is not None
    return str(found.state.value)


def activation_of(rt: Runtime, signal_id: object, delegate: str) -> tuple[int | None, list[str]]:
    for record in ActivationJournal(rt.engine).recent(delegate, 100):
        if signal_id in record.signal_ids:
            return record.policy_version, [str(i) for i in record.signal_ids]
    raise AssertionError("no activation holds the signal")


def test_apply_and_rollback_change_running_workers_decisions(runtime, children, log_dir) -> None:
    start_workers(children, _stores(runtime), log_dir, ["p1", "p2"], {"steps": 1})
    v1 = versions.apply(runtime, AS_SETTINGS, "test")
    first = publish(kind="task.completed", source="copilot", data={"task_id": "a"}).id
    wait_until(lambda: state(runtime, first) == "delivered", "delivered under v1", 60)
    assert activation_of(runtime, first, "default")[0] == v1

    # Applied while the workers run: their next decision holds task.* signals.
    applied_at = time.monotonic()
    v2 = versions.apply(runtime, HOLD_TASKS, "test")
    held = {
        delegate: publish(
            kind="task.completed", source="copilot", delegate_id=delegate, data={"task_id": "b"}
        ).id
        for delegate in ("default", "other")
    }
    for signal_id in held.values():
        wait_until(
            lambda s=signal_id: (signal_event(runtime, s, "deferred") or ("", None))[1] == v2,
            "held by v2",
            60,
        )
        reason, _ = signal_event(runtime, signal_id, "deferred") or ("", None)
        assert f"policy v{v2}, rule `task.*`" in reason
    picked_up_s = time.monotonic() - applied_at
    for signal_id in held.values():
        assert state(runtime, signal_id) == "pending"

    # Rolled back: the next wake decides under v1's document again, as v3, and takes the held
    # signal along (its window is the settings' one again).
    v3 = versions.rollback(runtime, v1, "test")
    assert v3 == v2 + 1
    for delegate, signal_id in held.items():
        nudge = publish(kind="memory.consolidated", source="memory", delegate_id=delegate).id
        wait_until(lambda s=signal_id: state(runtime, s) == "delivered", "released by v3", 60)
        version, members = activation_of(runtime, signal_id, delegate)
        assert version == v3 and str(nudge) in members
    print(f"policy pickup (apply -> both workers' decisions under v2): {picked_up_s:.2f} s")
