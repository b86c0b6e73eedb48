"""What a replay reports, counted in constant memory: activations (total, per delegate, per hour,
per trigger), signals per activation, the delay from publish to activation start (a log-bucket
histogram: p50/p95/p99 and a distribution), interrupts, budget deferrals, activations a user
turn pre-empted, per kind; for the record and for the candidate alike."""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Delay buckets: 1 ms to ~12 days, 2% apart (a quantile is off by at most 2%).
_RATIO = 1.02
_FIRST = 0.001
_EDGES = [_FIRST * _RATIO**i for i in range(int(math.log(1e6 / _FIRST, _RATIO)) + 2)]
# The coarse distribution printed and drawn.
DISTRIBUTION_EDGES = (0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
MAX_KINDS = 200
MAX_DELEGATES_SHOWN = 50


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(_EDGES) + 1))
    n: int = 0
    total: float = 0.0

    def add(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect.bisect_left(_EDGES, seconds)] += 1
        self.n += 1
        self.total += seconds

    def merge(self, other: Histogram) -> None:
        counts = self.counts
        for index, count in enumerate(other.counts):
            if count:
                counts[index] += count
        self.n += other.n
        self.total += other.total

    def quantile(self, q: float) -> float | None:
        if self.n == 0:
            return None
        rank = q * (self.n - 1)
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen > rank:
                if index == 0:
                    return 0.0
                return round(_EDGES[min(index, len(_EDGES) - 1)], 4)
        return round(_EDGES[-1], 4)

    def distribution(self) -> list[dict[str, Any]]:
        """Counts per coarse bucket (``le``: upper edge in seconds; null: above the last)."""
        out: list[dict[str, Any]] = []
        coarse = [0] * (len(DISTRIBUTION_EDGES) + 1)
        for index, count in enumerate(self.counts):
            if count:
                edge = _EDGES[min(index, len(_EDGES) - 1)]
                coarse[bisect.bisect_left(DISTRIBUTION_EDGES, edge)] += count
        for index, count in enumerate(coarse):
            le = DISTRIBUTION_EDGES[index] if index < len(DISTRIBUTION_EDGES) else None
            out.append({"le": le, "count": count})
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "signals": self.n,
            "p50": self.quantile(0.5),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
            "mean": None if self.n == 0 else round(self.total / self.n, 4),
            "distribution": self.distribution(),
        }


@dataclass
class KindFigures:
    delay: Histogram = field(default_factory=Histogram)
    activations: int = 0
    interrupts: int = 0


@dataclass
class Figures:
    """One side of the comparison."""

    activations: int = 0
    per_delegate: Counter[str] = field(default_factory=Counter)
    per_hour: Counter[int] = field(default_factory=Counter)  # hours since the epoch
    per_trigger: Counter[str] = field(default_factory=Counter)
    signals_in_activations: int = 0
    delay: Histogram = field(default_factory=Histogram)
    interrupts: int = 0
    budget_deferrals: int = 0
    # Background runs held by the daily token budget and by the quiet hours.
    token_budget_deferrals: int = 0
    quiet_hours_deferrals: int = 0
    ran_into_user_turn: int = 0
    preempted: int = 0
    kinds: dict[str, KindFigures] = field(default_factory=dict)

    def kind(self, name: str) -> KindFigures:
        found = self.kinds.get(name)
        if found is None:
            if len(self.kinds) >= MAX_KINDS:
                name = "(other kinds)"
                found = self.kinds.get(name)
            if found is None:
                found = self.kinds[name] = KindFigures()
        return found

    def add_delay(self, kind: str, seconds: float) -> None:
        """A delivered signal's delay from publish to activation start, overall and per kind."""
        if seconds < 0:
            seconds = 0.0
        index = bisect.bisect_left(_EDGES, seconds)
        for histogram in (self.delay, self.kind(kind).delay):
            histogram.counts[index] += 1
            histogram.n += 1
            histogram.total += seconds

    def count_activation(
        self, delegate_id: str, trigger: str, hour: int, kinds: Iterable[str]
    ) -> None:
        self.activations += 1
        self.per_delegate[delegate_id] += 1
        self.per_hour[hour] += 1
        self.per_trigger[trigger] += 1
        if trigger == "interrupt":
            self.interrupts += 1
        for kind in kinds:
            self.kind(kind).activations += 1

    def merge(self, other: Figures) -> None:
        """Add the figures of other delegates (a replay's other share)."""
        self.activations += other.activations
        self.per_delegate.update(other.per_delegate)
        self.per_hour.update(other.per_hour)
        self.per_trigger.update(other.per_trigger)
        self.signals_in_activations += other.signals_in_activations
        self.delay.merge(other.delay)
        self.interrupts += other.interrupts
        self.budget_deferrals += other.budget_deferrals
        self.token_budget_deferrals += other.token_budget_deferrals
        self.quiet_hours_deferrals += other.quiet_hours_deferrals
        self.ran_into_user_turn += other.ran_into_user_turn
        self.preempted += other.preempted
        for name, theirs in other.kinds.items():
            mine = self.kind(name)
            mine.delay.merge(theirs.delay)
            mine.activations += theirs.activations
            mine.interrupts += theirs.interrupts

    def public(self) -> dict[str, Any]:
        return {
            "activations": {
                "total": self.activations,
                # The busiest, ties by name (the same whatever order they were counted in).
                "per_delegate": dict(
                    heapq.nsmallest(MAX_DELEGATES_SHOWN, self.per_delegate.items(), key=_busiest)
                ),
                "delegates": len(self.per_delegate),
                "per_hour": {
                    datetime.fromtimestamp(h * 3600, UTC).strftime("%Y-%m-%dT%H:00Z"): n
                    for h, n in sorted(self.per_hour.items())
                },
                "per_trigger": dict(sorted(self.per_trigger.items())),
            },
            "signals_per_activation": None
            if self.activations == 0
            else round(self.signals_in_activations / self.activations, 3),
            "delay_s": self.delay.summary(),
            "interrupts": self.interrupts,
            "budget_deferrals": self.budget_deferrals,
            "token_budget_deferrals": self.token_budget_deferrals,
            "quiet_hours_deferrals": self.quiet_hours_deferrals,
            "ran_into_user_turn": self.ran_into_user_turn,
            "preempted": self.preempted,
        }


def _busiest(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def per_kind_table(recorded: Figures, candidate: Figures) -> list[dict[str, Any]]:
    rows = []
    for name in sorted(set(recorded.kinds) | set(candidate.kinds)):
        before = recorded.kinds.get(name, KindFigures())
        after = candidate.kinds.get(name, KindFigures())
        rows.append(
            {
                "kind": name,
                "signals": max(before.delay.n, after.delay.n),
                "activations": {"recorded": before.activations, "candidate": after.activations},
                "delay_p50_s": {
                    "recorded": before.delay.quantile(0.5),
                    "candidate": after.delay.quantile(0.5),
                },
                "delay_p95_s": {
                    "recorded": before.delay.quantile(0.95),
                    "candidate": after.delay.quantile(0.95),
                },
            }
        )
    return rows


def render_text(report: dict[str, Any]) -> str:
    """The report as a terminal table."""
    rec, cand = report["recorded"], report["candidate"]
    lines = [
        f"replayed {report['signals']['replayed']} signals, {report['user_turns']} user turns "
        f"({report['range']['since']} .. {report['range']['until']}"
        + (f", delegate {report['range']['delegate']}" if report["range"]["delegate"] else "")
        + ")",
        f"candidate: {report['policy']['candidate']}",
        "",
        f"{'':34}{'recorded':>14}{'candidate':>14}",
    ]

    def row(label: str, a: Any, b: Any) -> None:
        lines.append(f"{label:34}{_cell(a):>14}{_cell(b):>14}")

    row("activations", rec["activations"]["total"], cand["activations"]["total"])
    row("signals per activation", rec["signals_per_activation"], cand["signals_per_activation"])
    for q in ("p50", "p95", "p99"):
        row(f"delay {q} (s)", rec["delay_s"][q], cand["delay_s"][q])
    row("interrupts", rec["interrupts"], cand["interrupts"])
    row("wakes deferred by the budget", rec["budget_deferrals"], cand["budget_deferrals"])
    row(
        "  by the daily token budget",
        rec["token_budget_deferrals"],
        cand["token_budget_deferrals"],
    )
    row("  by the quiet hours", rec["quiet_hours_deferrals"], cand["quiet_hours_deferrals"])
    row("activations a user turn cut", rec["ran_into_user_turn"], cand["ran_into_user_turn"])
    for trigger in sorted(
        set(rec["activations"]["per_trigger"]) | set(cand["activations"]["per_trigger"])
    ):
        row(
            f"  trigger {trigger}",
            rec["activations"]["per_trigger"].get(trigger, 0),
            cand["activations"]["per_trigger"].get(trigger, 0),
        )
    calls = report["model_calls"]
    verb = "avoided" if calls["avoided"] >= 0 else "added"
    lines += [
        "",
        f"model calls {verb}: {abs(calls['avoided'])} "
        f"({calls['recorded']} -> {calls['candidate']})",
    ]
    lines += ["", "delay distribution (signals per bucket, s)"]
    for before, after in zip(
        rec["delay_s"]["distribution"], cand["delay_s"]["distribution"], strict=True
    ):
        label = "<= " + str(before["le"]) if before["le"] is not None else "> 3600"
        row(f"  {label}", before["count"], after["count"])
    lines += ["", f"{'kind':34}{'acts rec':>10}{'acts cand':>10}{'p50 rec':>10}{'p50 cand':>10}"]
    for item in report["per_kind"]:
        lines.append(
            f"{item['kind'][:33]:34}{item['activations']['recorded']:>10}"
            f"{item['activations']['candidate']:>10}{_cell(item['delay_p50_s']['recorded']):>10}"
            f"{_cell(item['delay_p50_s']['candidate']):>10}"
        )
    if report["rules_never_matched"]:
        lines += [
            "",
            "rules of the candidate that never matched: "
            + ", ".join(report["rules_never_matched"]),
        ]
    fidelity = report["fidelity"]
    lines += [
        "",
        f"fidelity: {fidelity if fidelity is not None else 'n/a'} "
        f"({report['fidelity_detail']['reproduced']} of {report['fidelity_detail']['recorded']} "
        "recorded activations reproduced by the candidate)",
        f"signals without a recorded outcome: {report['signals']['unrecorded_outcome']} "
        f"({report['signals']['rule']})",
    ]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
