"""A replay: the journal's recorded signals and user turns of a range, in their recorded time
order, through the virtual lanes under a candidate policy; compared with what the record holds.

Zero side effects: it reads through one READ ONLY transaction (:func:`journal.replay.snapshot`)
and calls nothing but pure functions; it sends no task, touches no Redis key, calls no model.
Every stream is read in keyset pages and every figure is a counter or a histogram, so memory
stays flat whatever the range holds (the per-delegate state is what the live plane holds too).

Stated rules where the record cannot answer:

- a signal's mode and priority under the candidate are what publishing it would give now: the
  candidate's rule, else the publisher's requested mode under the kind's rules (the recorded
  priority when no rule sets one);
- a signal is replayed at its recorded ``created_at``; one caused by an activation keeps its
  recorded time even if the candidate moves that activation;
- an activation lasts as long as the recorded one that delivered its signals (the longest); a
  batch none of whose signals the record saw delivered lasts the mean recorded duration
  (``signals.unrecorded_outcome`` counts those signals);
- a recorded activation is *reproduced* when the candidate runs one of the same delegate, with
  the same signals and user turn, starting within ``tolerance_s`` of it.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from inner_plane.attention.document import AttentionPolicy, PolicyDocument, SettingsDefaults
from inner_plane.config import Settings
from inner_plane.journal import replay as journal
from inner_plane.signals.kinds import KindRegistry, settle
from inner_plane.signals.model import Mode
from inner_plane.simulator.lanes import EPOCH, Observer, Plane, SimActivation, SimSignal, SimTurn
from inner_plane.simulator.report import Figures, per_kind_table, render_text

DEFAULT_TOLERANCE_S = 2.0
# How long fidelity keeps an unmatched activation of either side waiting for its match.
MATCH_HORIZON_S = 600.0
_PRUNE_EVERY = 20_000
# Recent recorded activations whose kinds are remembered (per-kind activation counts).
_RECENT_ACTIVATIONS = 5_000
# Unmatched activations of either side kept for the fidelity match, at most.
MAX_WAITING = 50_000

ActivationKey = tuple[str, frozenset[uuid.UUID], uuid.UUID | None]


def _hour(seconds: float) -> int:
    return int(seconds // 3600)


def _s(moment: datetime) -> float:
    return moment.timestamp()


@dataclass
class Fidelity:
    tolerance_s: float
    recorded: int = 0
    reproduced: int = 0
    waiting_recorded: dict[ActivationKey, float] = field(default_factory=dict)
    waiting_simulated: dict[ActivationKey, float] = field(default_factory=dict)

    def record(self, key: ActivationKey, started: float) -> None:
        self.recorded += 1
        if not self._match(self.waiting_simulated, key, started):
            self.waiting_recorded[key] = started

    def simulate(self, key: ActivationKey, started: float) -> None:
        if not self._match(self.waiting_recorded, key, started):
            self.waiting_simulated[key] = started

    def _match(self, waiting: dict[ActivationKey, float], key: ActivationKey, at: float) -> bool:
        other = waiting.get(key)
        if other is not None and abs(other - at) <= self.tolerance_s:
            del waiting[key]
            self.reproduced += 1
            return True
        return False

    def prune(self, now: float) -> None:
        for waiting in (self.waiting_recorded, self.waiting_simulated):
            stale = [k for k, at in waiting.items() if at < now - MATCH_HORIZON_S]
            for key in stale:
                del waiting[key]
            while len(waiting) > MAX_WAITING:  # a flood of unmatched ones: the oldest go
                del waiting[next(iter(waiting))]

    @property
    def share(self) -> float | None:
        return None if self.recorded == 0 else round(self.reproduced / self.recorded, 4)


class Candidate(Observer):
    """The candidate's figures, and its activations for the fidelity match."""

    def __init__(self, fidelity: Fidelity, batches: list[list[uuid.UUID]] | None = None) -> None:
        self.figures = Figures()
        self.fidelity = fidelity
        # Every activation's signal ids, for a test comparing batch membership (not constant
        # memory: never on by default).
        self.batches = batches

    def activation(self, activation: SimActivation) -> None:
        kinds = {s.kind for s in activation.signals}
        self.figures.count_activation(
            activation.delegate_id, activation.trigger.value, _hour(activation.started), kinds
        )
        self.figures.signals_in_activations += len(activation.signals)
        key: ActivationKey = (
            activation.delegate_id,
            frozenset(s.id for s in activation.signals),
            None if activation.turn is None else activation.turn.id,
        )
        self.fidelity.simulate(key, activation.started)
        if self.batches is not None and activation.preempted is None:
            self.batches.append([s.id for s in activation.signals])

    def delivered(self, activation: SimActivation) -> None:
        for signal in activation.signals:
            delay = activation.started - signal.arrived
            self.figures.delay.add(delay)
            self.figures.kind(signal.kind).delay.add(delay)

    def preempted(self, activation: SimActivation, reason: str) -> None:
        self.figures.preempted += 1
        if reason == "user turn waiting":
            self.figures.ran_into_user_turn += 1

    def budget_deferred(self, delegate_id: str, signals: int) -> None:
        self.figures.budget_deferrals += 1

    def window_wait(self, delegate_id: str, rule: str | None) -> None:
        return None


@dataclass
class Durations:
    """The running mean of recorded activation durations: the stand-in for batches the record
    never ran."""

    total: float = 0.0
    n: int = 0

    def add(self, seconds: float) -> None:
        self.total += seconds
        self.n += 1

    def mean(self) -> float:
        return 1.0 if self.n == 0 else self.total / self.n


def candidate_policy(document: PolicyDocument, settings: Settings) -> AttentionPolicy:
    return AttentionPolicy.build(document, SettingsDefaults.of(settings))


def _merged(
    signals: Iterator[journal.RecordedSignal],
    turns: Iterator[journal.RecordedTurn],
    activations: Iterator[journal.RecordedActivation],
) -> Iterator[tuple[float, int, Any]]:
    """The three recorded streams as one, in time order (a recorded activation after the
    signals and turns of the same instant)."""
    import heapq

    def keyed(items: Iterator[Any], tag: int, attr: str) -> Iterator[tuple[float, int, Any]]:
        for item in items:
            yield getattr(item, attr).timestamp(), tag, item

    return heapq.merge(
        keyed(signals, 0, "created_at"),
        keyed(turns, 1, "created_at"),
        keyed(activations, 2, "started_at"),
        key=_order,
    )


def _order(entry: tuple[float, int, Any]) -> tuple[float, int]:
    return entry[0], entry[1]


def simulate(
    engine: Engine,
    registry: KindRegistry,
    settings: Settings,
    document: PolicyDocument,
    since: datetime,
    until: datetime,
    delegate_id: str | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    label: str = "candidate",
    batches: list[list[uuid.UUID]] | None = None,
) -> dict[str, Any]:
    """The report (see the module's rules). ``batches``: if given, filled with the signal ids
    of every activation the candidate runs (tests)."""
    policy = candidate_policy(document, settings)
    fidelity = Fidelity(tolerance_s)
    candidate = Candidate(fidelity, batches)
    recorded = Figures()
    durations = Durations()
    plane = Plane(policy, candidate, durations.mean)
    matched_rules: set[str] = set()
    seen_pairs: set[tuple[str, str]] = set()
    # Which kinds each recent recorded activation delivered (per-kind activation counts).
    recorded_kinds: dict[uuid.UUID, tuple[float, set[str]]] = {}
    replayed = ambient = turns = 0
    unrecorded_signals = 0
    handled = 0
    sets_modes = policy.sets_modes
    with journal.snapshot(engine) as connection:
        streams = _merged(
            journal.signals(connection, since, until, delegate_id),
            journal.user_turns(connection, since, until, delegate_id),
            journal.activations(connection, since, until, delegate_id),
        )
        for moment, tag, item in streams:
            handled += 1
            if handled % _PRUNE_EVERY == 0:
                fidelity.prune(moment)
            if len(recorded_kinds) > _RECENT_ACTIVATIONS:
                # The oldest first (insertion order): a batch's signals arrive close together.
                for key in list(itertools.islice(recorded_kinds, _RECENT_ACTIVATIONS // 10)):
                    del recorded_kinds[key]
            if tag == 2:
                _recorded_activation(item, recorded, fidelity, recorded_kinds)
                continue
            if tag == 1:
                turns += 1
                plane.user_turn(
                    item.delegate_id,
                    SimTurn(item.id, moment, _duration(item, durations)),
                )
                continue
            signal: journal.RecordedSignal = item
            pair = (signal.delegate_id, signal.kind)
            if pair not in seen_pairs and len(seen_pairs) < 100_000:
                seen_pairs.add(pair)
                matched_rules.update(r.label for r in policy.matching(*pair))
            mode, priority = _under_candidate(signal, registry, policy, sets_modes)
            recorded_s = _duration(signal, durations)
            if signal.activation_started is not None and signal.mode != "ambient":
                delay = _s(signal.activation_started) - moment
                recorded.delay.add(delay)
                recorded.kind(signal.kind).delay.add(delay)
                if signal.activation_id is not None:
                    entry = recorded_kinds.setdefault(signal.activation_id, (moment, set()))
                    if signal.kind not in entry[1]:
                        entry[1].add(signal.kind)
                        recorded.kind(signal.kind).activations += 1
            if mode is Mode.AMBIENT:
                ambient += 1
                continue
            replayed += 1
            if recorded_s is None:
                unrecorded_signals += 1
            plane.signal(
                signal.delegate_id,
                SimSignal(
                    signal.seq, signal.id, signal.kind, mode, priority, moment, moment, recorded_s
                ),
            )
        budget = journal.budget_deferrals(connection, since, until, delegate_id)
    recorded.budget_deferrals = budget
    plane.finish(math.inf)
    for delegate in plane.lanes:
        for rule in policy.matching(delegate, None):
            matched_rules.add(rule.label)
    never = [label_ for label_ in policy.rule_labels() if label_ not in matched_rules]
    rec, cand = recorded.public(), candidate.figures.public()
    report: dict[str, Any] = {
        "fidelity": fidelity.share,
        "range": {
            "since": since.isoformat(),
            "until": until.isoformat(),
            "delegate": delegate_id,
        },
        "policy": {"candidate": label, "rules": policy.rule_labels()},
        "signals": {
            "replayed": replayed,
            "ambient": ambient,
            "unrecorded_outcome": unrecorded_signals,
            "rule": "a batch no recorded activation delivered lasts the mean recorded duration",
        },
        "user_turns": turns,
        "recorded": rec,
        "candidate": cand,
        "model_calls": {
            "recorded": recorded.activations,
            "candidate": candidate.figures.activations,
            "avoided": recorded.activations - candidate.figures.activations,
        },
        "per_kind": per_kind_table(recorded, candidate.figures),
        "rules_never_matched": never,
        "fidelity_detail": {
            "recorded": fidelity.recorded,
            "reproduced": fidelity.reproduced,
            "tolerance_s": tolerance_s,
        },
    }
    return report


def _recorded_activation(
    item: journal.RecordedActivation,
    recorded: Figures,
    fidelity: Fidelity,
    recorded_kinds: dict[uuid.UUID, tuple[float, set[str]]],
) -> None:
    started = _s(item.started_at)
    recorded.count_activation(item.delegate_id, item.trigger, _hour(started), set())
    recorded.signals_in_activations += len(item.signal_ids)
    if item.state == "interrupted":
        recorded.preempted += 1
        if item.trigger != "user_turn":
            recorded.ran_into_user_turn += 1
    fidelity.record((item.delegate_id, frozenset(item.signal_ids), item.turn_id), started)


def _duration(
    item: journal.RecordedSignal | journal.RecordedTurn, durations: Durations
) -> float | None:
    if item.activation_started is None or item.activation_finished is None:
        return None
    seconds = max(0.0, (item.activation_finished - item.activation_started).total_seconds())
    durations.add(seconds)
    return seconds


def _under_candidate(
    signal: journal.RecordedSignal,
    registry: KindRegistry,
    policy: AttentionPolicy,
    sets_modes: bool,
) -> tuple[Mode, int]:
    """The mode and priority publishing the signal would give under the candidate."""
    try:
        requested = None if signal.requested_mode is None else Mode(signal.requested_mode)
    except ValueError:
        requested = None
    priority: int | None = signal.priority
    if sets_modes:
        rule = policy.for_kind(signal.delegate_id, signal.kind)
        requested = rule.mode or requested
        if rule.priority is not None:
            priority = rule.priority
    kind_policy = registry.policy_for(signal.kind, requested)
    mode, final_priority, _expires, _downgraded = settle(
        kind_policy, requested, priority, None, EPOCH
    )
    return mode, final_priority


def text_report(report: dict[str, Any]) -> str:
    return render_text(report)
