"""The simulator's virtual lanes (pure): they decide with the live lane's own functions (never a
copy), and replay bursts, windows per kind, interrupts, user turns with their precedence, the
wake budget and pre-emption as the live lane does."""

from __future__ import annotations

import ast
import uuid
from datetime import UTC, datetime
from pathlib import Path

from inner_plane.activation import Trigger
from inner_plane.attention import policy as attention_policy
from inner_plane.attention.document import AttentionPolicy, SettingsDefaults, parse_document
from inner_plane.lane import decide
from inner_plane.signals.kinds import BUILTIN_KINDS
from inner_plane.signals.model import Mode
from inner_plane.simulator import lanes
from inner_plane.simulator.lanes import Observer, Plane, SimActivation, SimSignal, SimTurn

SIMULATOR = Path(lanes.__file__).parent
LIVE_DECISIONS = {
    name
    for module in (decide, attention_policy)
    for name, value in vars(module).items()
    if callable(value) and getattr(value, "__module__", "") == module.__name__
}


def test_the_simulator_decides_with_the_live_functions_and_defines_none_of_its_own() -> None:
    assert lanes.decide is decide
    assert {"decide", "takes_user_turn", "preemption", "wait_before_claim"} <= LIVE_DECISIONS
    for path in SIMULATOR.glob("*.py"):
        tree = ast.parse(path.read_text())
        defined = {
            node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)
        }
        assert not defined & LIVE_DECISIONS, (path.name, defined & LIVE_DECISIONS)


class Seen(Observer):
    def __init__(self) -> None:
        self.activations: list[SimActivation] = []
        self.cut: list[str] = []
        self.deferred = 0
        self.reasons: list[str] = []

    def activation(self, activation: SimActivation) -> None:
        self.activations.append(activation)

    def preempted(self, activation: SimActivation, reason: str) -> None:
        self.cut.append(reason)

    def budget_deferred(self, delegate_id: str, signals: int, reason: str = "budget") -> None:
        self.deferred += signals
        self.reasons.append(reason)


BASE = SettingsDefaults(quiet_ms=500, max_age_ms=2000, batch_limit=100, wake_budget_per_hour=60)


def plane(text: str = "", duration: float = 1.0) -> tuple[Plane, Seen]:
    document = parse_document(text, [k.kind for k in BUILTIN_KINDS], BASE)
    seen = Seen()
    return Plane(AttentionPolicy.build(document, BASE), seen, lambda: duration), seen


def signal(at: float, kind: str = "task.completed", mode: Mode = Mode.WAKE, seq: int = 0,
           priority: int = 50, recorded_s: float | None = 1.0) -> SimSignal:  # fmt: skip
    return SimSignal(seq, str(uuid.uuid4()), kind, mode, priority, at, at, recorded_s)


def test_a_burst_is_one_batch_after_the_quiet_period() -> None:
    sim, seen = plane()
    for n in range(5):
        sim.signal("d", signal(100.0 + n * 0.1, seq=n))
    sim.finish(1e9)
    [one] = seen.activations
    assert len(one.signals) == 5 and one.trigger is Trigger.WAKE
    assert abs(one.started - 100.9) < 1e-6  # quiet 0.5 s after the newest


def test_a_trickle_closes_at_its_maximum_age_and_the_rest_drains() -> None:
    sim, seen = plane()
    for n in range(10):
        sim.signal("d", signal(100.0 + n * 0.3, seq=n))
    sim.finish(1e9)
    first, *rest = seen.activations
    assert abs(first.started - 102.0) < 1e-6  # the oldest's maximum age
    assert sum(len(a.signals) for a in seen.activations) == 10 and rest


def test_a_kind_rule_holds_its_kind_and_a_deploy_failure_goes_at_once() -> None:
    sim, seen = plane(
        '[[rules]]\nkind = "task.*"\nquiet_ms = 60000\nmax_age_ms = 120000\n'
        '[[rules]]\nkind = "external.deploy.failed"\nquiet_ms = 0\nmax_age_ms = 0\n'
    )
    sim.signal("d", signal(100.0, seq=1))
    sim.signal("d", signal(110.0, "external.deploy.failed", seq=2))
    sim.finish(1e9)
    [one] = seen.activations
    assert abs(one.started - 110.0) < 1e-6 and len(one.signals) == 2


def test_interrupts_run_at_once_and_a_user_turn_goes_first_with_its_context() -> None:
    sim, seen = plane()
    sim.signal("d", signal(100.0, "system.alert", Mode.INTERRUPT, seq=1))
    sim.signal("e", signal(100.0, "external.notes.saved", Mode.NEXT_TURN, seq=2))
    sim.user_turn("e", SimTurn(str(uuid.uuid4()), 101.0, 2.0))
    sim.finish(1e9)
    by_delegate = {a.delegate_id: a for a in seen.activations}
    assert by_delegate["d"].trigger is Trigger.INTERRUPT and by_delegate["d"].started == 100.0
    turn = by_delegate["e"]
    assert turn.trigger is Trigger.USER_TURN and len(turn.signals) == 1
    assert turn.ends - turn.started == 2.0


def test_a_user_turn_cuts_a_background_activation_and_takes_its_signals() -> None:
    sim, seen = plane(duration=30.0)
    sim.signal("d", signal(100.0, seq=1, recorded_s=30.0))
    sim.user_turn("d", SimTurn(str(uuid.uuid4()), 110.0, 1.0))
    sim.finish(1e9)
    background, turn = seen.activations
    assert seen.cut == ["user turn waiting"]
    assert turn.trigger is Trigger.USER_TURN and turn.started == 110.0
    assert [s.id for s in turn.signals] == [s.id for s in background.signals]


def test_the_wake_budget_defers_until_the_oldest_start_leaves_the_hour() -> None:
    sim, seen = plane('[[rules]]\ndelegate = "d"\nwake_budget_per_hour = 2\n')
    for n in range(3):
        sim.signal("d", signal(100.0 + n * 100, seq=n))
    sim.finish(1e9)
    starts = [a.started for a in seen.activations]
    assert len(starts) == 3 and seen.deferred == 1
    # As live: the deferred signal becomes available then, and waits its quiet period from there.
    assert abs(starts[2] - (starts[0] + 3600 + 0.5)) < 1e-6


def test_claims_follow_priority_then_age_up_to_the_batch_limit() -> None:
    sim, seen = plane('[[rules]]\ndelegate = "d"\nbatch_limit = 2\n')
    low = signal(100.0, seq=1, priority=10)
    highs = [signal(100.0, seq=2 + n, priority=90) for n in range(2)]
    for item in (low, *highs):
        sim.signal("d", item)
    sim.finish(1e9)
    first, second = seen.activations
    assert first.signals == highs and second.signals == [low]
    assert second.trigger is Trigger.DRAIN


def test_a_kind_batch_limit_caps_that_kind_in_each_batch_and_the_rest_drains() -> None:
    sim, seen = plane('[[rules]]\nkind = "task.*"\nbatch_limit = 2\n')
    for n in range(5):
        sim.signal("d", signal(100.0 + n * 0.01, seq=n))
    sim.signal("d", signal(100.05, kind="timer.due", seq=9))
    sim.finish(1e9)
    sizes = [sorted(s.kind for s in a.signals) for a in seen.activations]
    assert sizes[0] == ["task.completed", "task.completed", "timer.due"]
    assert [len(a.signals) for a in seen.activations] == [3, 2, 1]
    assert all(sum(s.kind == "task.completed" for s in a.signals) <= 2 for a in seen.activations)


def test_quiet_hours_hold_background_wakes_in_the_persons_zone_but_not_interrupts() -> None:
    # 23:00 UTC is 00:00 in Paris (winter): inside "22:00-07:00" there; 07:00 Paris is 06:00 UTC.
    night = datetime(2026, 1, 5, 23, 0, tzinfo=UTC).timestamp()
    sim, seen = plane('[defaults]\nquiet_hours = "22:00-07:00"\n')
    sim.time_zones = {"d": "Europe/Paris"}
    sim.signal("d", signal(night))
    sim.signal("e", signal(night + 1, kind="system.alert", mode=Mode.INTERRUPT))
    sim.finish(1e12)
    by_delegate = {a.delegate_id: a for a in seen.activations}
    assert by_delegate["e"].started == night + 1  # an interrupt is never held
    morning = datetime(2026, 1, 6, 6, 0, tzinfo=UTC).timestamp()
    # Released at the end of the quiet hours, the window then waits its quiet period, as live.
    assert by_delegate["d"].started == morning + 0.5
    assert seen.reasons == ["quiet hours 22:00-07:00 (Europe/Paris)"]


def test_the_daily_token_budget_holds_wakes_until_the_next_utc_day() -> None:
    day = datetime(2026, 1, 5, 10, 0, tzinfo=UTC).timestamp()
    sim, seen = plane("[defaults]\ndaily_token_budget = 1000\n")
    sim.spending = lanes.Spending(lambda delegate, d: 600.0)
    for n in range(3):
        sim.signal("d", signal(day + n * 100))
    sim.finish(1e12)
    starts = [a.started for a in seen.activations]
    # 600 tokens after the first, 1,200 after the second: the third waits for midnight UTC.
    assert starts[:2] == [day + 0.5, day + 100.5]
    assert starts[2] == datetime(2026, 1, 6, tzinfo=UTC).timestamp() + 0.5
    assert seen.reasons and seen.reasons[0].startswith("token budget: 1200 tokens")
