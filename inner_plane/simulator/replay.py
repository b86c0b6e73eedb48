"""A replay: the journal's recorded signals and user turns of a range, in their recorded time
order, through the virtual lanes under a candidate policy; compared with what the record holds.

Zero side effects: it reads through one READ ONLY transaction (:func:`journal.replay.snapshot`)
and calls nothing but pure functions; it sends no task, touches no Redis key, calls no model.
Every stream is read in keyset pages and every figure is a counter or a histogram, so memory
stays flat whatever the range holds (the per-delegate state is what the live plane holds too).

Lanes are independent, so ``workers`` processes may share the replay by delegate: each reads its
share of the delegates in the same exported snapshot (forked, it inherits everything else), and
the partial reports (sums, unions, histograms) merge into the one a single process gives.

Stated rules where the record cannot answer:

- a signal's mode and priority under the candidate are what publishing it would give now: the
  candidate's rule, else the publisher's requested mode under the kind's rules (the recorded
  priority when no rule sets one);
- a signal is replayed at its recorded ``created_at``; one caused by an activation keeps its
  recorded time even if the candidate moves that activation;
- an activation lasts as long as the recorded one that delivered its signals (the longest); a
  batch none of whose signals the record saw delivered lasts the mean recorded duration of the
  range (:func:`journal.replay.mean_duration`; ``signals.unrecorded_outcome`` counts those
  signals);
- a recorded activation is *reproduced* when the candidate runs one of the same delegate, with
  the same signals and user turn, starting within ``tolerance_s`` of it.
"""

from __future__ import annotations

import gc
import itertools
import math
import multiprocessing
import os
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from sqlalchemy import Engine

from inner_plane.attention.document import AttentionPolicy, PolicyDocument, SettingsDefaults
from inner_plane.config import Settings
from inner_plane.journal import replay as journal
from inner_plane.signals.kinds import KindRegistry, settle
from inner_plane.signals.model import Mode
from inner_plane.simulator.lanes import (
    EPOCH,
    Observer,
    Plane,
    SimActivation,
    SimSignal,
    SimTurn,
    Spending,
)
from inner_plane.simulator.report import Figures, per_kind_table, render_text

DEFAULT_TOLERANCE_S = 2.0
# How long fidelity keeps an unmatched activation of either side waiting for its match.
MATCH_HORIZON_S = 600.0
_PRUNE_EVERY = 20_000
# Recent recorded activations whose kinds are remembered (per-kind activation counts).
_RECENT_ACTIVATIONS = 5_000
# Unmatched activations of either side kept for the fidelity match, at most.
MAX_WAITING = 50_000
# Processes a replay is split across by default, at most.
MAX_WORKERS = 4

# (delegate, its signal ids sorted and comma-separated, its user turn's id)
ActivationKey = tuple[str, str, str | None]


def _hour(seconds: float) -> int:
    return int(seconds // 3600)


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
        signals = activation.signals
        kinds = {s.kind for s in signals}
        self.figures.count_activation(
            activation.delegate_id, activation.trigger.value, _hour(activation.started), kinds
        )
        self.figures.signals_in_activations += len(signals)
        ids = signals[0].id if len(signals) == 1 else ",".join(sorted(s.id for s in signals))
        key: ActivationKey = (
            activation.delegate_id,
            ids,
            None if activation.turn is None else activation.turn.id,
        )
        self.fidelity.simulate(key, activation.started)
        if self.batches is not None and activation.preempted is None:
            self.batches.append([uuid.UUID(s.id) for s in signals])

    def delivered(self, activation: SimActivation) -> None:
        started, add_delay = activation.started, self.figures.add_delay
        for signal in activation.signals:
            add_delay(signal.kind, started - signal.arrived)

    def preempted(self, activation: SimActivation, reason: str) -> None:
        self.figures.preempted += 1
        if reason == "user turn waiting":
            self.figures.ran_into_user_turn += 1

    def budget_deferred(self, delegate_id: str, signals: int, reason: str = "budget") -> None:
        if reason.startswith("quiet hours"):
            self.figures.quiet_hours_deferrals += 1
        elif reason.startswith("token budget"):
            self.figures.token_budget_deferrals += 1
        else:
            self.figures.budget_deferrals += 1

    def window_wait(self, delegate_id: str, rule: str | None) -> None:
        return None


def candidate_policy(document: PolicyDocument, settings: Settings) -> AttentionPolicy:
    return AttentionPolicy.build(document, SettingsDefaults.of(settings))


class Publishing:
    """The mode and priority publishing a recorded signal would give it under the candidate
    (:func:`under_candidate`), remembered per distinct input: a journal holds few."""

    def __init__(self, registry: KindRegistry, policy: AttentionPolicy) -> None:
        self.registry = registry
        self.policy = policy
        self.by_delegate = policy.sets_modes
        self.known: dict[tuple[str | None, str, str | None, int], tuple[Mode, int]] = {}

    def __call__(
        self, delegate_id: str, kind: str, requested: str | None, priority: int
    ) -> tuple[Mode, int]:
        key = (delegate_id if self.by_delegate else None, kind, requested, priority)
        found = self.known.get(key)
        if found is None:
            if len(self.known) > 100_000:
                self.known.clear()
            found = self.known[key] = under_candidate(
                delegate_id, kind, requested, priority, self.registry, self.policy
            )
        return found


class _Replay:
    """One replay's running state: the candidate's virtual plane and the record's figures."""

    def __init__(
        self,
        registry: KindRegistry,
        policy: AttentionPolicy,
        tolerance_s: float,
        batches: list[list[uuid.UUID]] | None,
        fallback_s: float,
    ) -> None:
        self.policy = policy
        self.fidelity = Fidelity(tolerance_s)
        self.candidate = Candidate(self.fidelity, batches)
        self.recorded = Figures()
        self.plane = Plane(policy, self.candidate, lambda: fallback_s)
        self.publishing = Publishing(registry, policy)
        self.matched_rules: set[str] = set()
        self.seen_pairs: set[tuple[str, str]] = set()
        # Which kinds each recent recorded activation delivered (per-kind activation counts):
        # one kind as itself, more as a set.
        self.recorded_kinds: dict[str, str | set[str]] = {}
        self.replayed = self.ambient = self.turns = self.unrecorded = 0

    def run(
        self,
        signals: Iterator[journal.RecordedSignal],
        user_turns: Iterator[journal.RecordedTurn],
        activations: Iterator[journal.RecordedActivation],
    ) -> None:
        """The three recorded streams merged in time order (at one instant: signals, then user
        turns, then recorded activations), each row handled as it comes."""
        never = math.inf
        signal = next(signals, None)
        turn = next(user_turns, None)
        activation = next(activations, None)
        signal_at = never if signal is None else signal[7]
        turn_at = never if turn is None else turn[2]
        activation_at = never if activation is None else activation[3]
        on_signal, on_turn, on_activation = self.signal, self.user_turn, self.activation
        handled = 0
        while signal is not None or turn is not None or activation is not None:
            handled += 1
            if handled % _PRUNE_EVERY == 0:
                self.prune(min(signal_at, turn_at, activation_at))
            if signal is not None and signal_at <= turn_at and signal_at <= activation_at:
                on_signal(signal)
                signal = next(signals, None)
                signal_at = never if signal is None else signal[7]
            elif turn is not None and turn_at <= activation_at:
                on_turn(turn)
                turn = next(user_turns, None)
                turn_at = never if turn is None else turn[2]
            else:
                assert activation is not None
                on_activation(activation)
                activation = next(activations, None)
                activation_at = never if activation is None else activation[3]

    def prune(self, now: float) -> None:
        self.fidelity.prune(now)
        recorded_kinds = self.recorded_kinds
        if len(recorded_kinds) > _RECENT_ACTIVATIONS:
            # The oldest first (insertion order): a batch's signals arrive close together.
            for key in list(itertools.islice(recorded_kinds, len(recorded_kinds) // 2)):
                del recorded_kinds[key]

    def signal(self, row: journal.RecordedSignal) -> None:
        (seq, signal_id, delegate, kind, recorded_mode, requested, priority, moment,
         activation_id, a_started, a_finished) = row  # fmt: skip
        pair = (delegate, kind)
        if pair not in self.seen_pairs and len(self.seen_pairs) < 100_000:
            self.seen_pairs.add(pair)
            self.matched_rules.update(r.label for r in self.policy.matching(delegate, kind))
        mode, final_priority = self.publishing(delegate, kind, requested, priority)
        recorded_s: float | None = None
        if a_started is not None:
            if a_finished is not None:
                recorded_s = max(0.0, a_finished - a_started)
            if recorded_mode != "ambient":
                self.recorded.add_delay(kind, a_started - moment)
                if activation_id is not None:
                    # One kind (the usual batch) is kept as itself, more as a set.
                    recorded_kinds = self.recorded_kinds
                    seen = recorded_kinds.get(activation_id)
                    if seen is None:
                        recorded_kinds[activation_id] = kind
                        self.recorded.kind(kind).activations += 1
                    elif isinstance(seen, str):
                        if seen != kind:
                            recorded_kinds[activation_id] = {seen, kind}
                            self.recorded.kind(kind).activations += 1
                    elif kind not in seen:
                        seen.add(kind)
                        self.recorded.kind(kind).activations += 1
        if mode is Mode.AMBIENT:
            self.ambient += 1
            return
        self.replayed += 1
        if recorded_s is None:
            self.unrecorded += 1
        self.plane.signal(
            delegate,
            SimSignal(seq, signal_id, kind, mode, final_priority, moment, moment, recorded_s),
        )

    def user_turn(self, row: journal.RecordedTurn) -> None:
        self.turns += 1
        turn_id, delegate, moment, a_started, a_finished = row
        turn_s: float | None = None
        if a_started is not None and a_finished is not None:
            turn_s = max(0.0, a_finished - a_started)
        self.plane.user_turn(delegate, SimTurn(turn_id, moment, turn_s))

    def activation(self, row: journal.RecordedActivation) -> None:
        delegate, trigger, state, started, signal_ids, turn_id = row
        recorded = self.recorded
        recorded.count_activation(delegate, trigger, _hour(started), ())
        if signal_ids:
            recorded.signals_in_activations += signal_ids.count(",") + 1
        if state == "interrupted":
            recorded.preempted += 1
            if trigger != "user_turn":
                recorded.ran_into_user_turn += 1
        self.fidelity.record((delegate, signal_ids, turn_id), started)


@dataclass
class Partial:
    """What the replay of one share of the delegates found: merged with the other shares'
    (:meth:`merge`), the report of the whole (every figure is a sum, a union or a histogram)."""

    recorded: Figures
    candidate: Figures
    recorded_activations: int
    reproduced: int
    replayed: int
    ambient: int
    turns: int
    unrecorded: int
    matched_rules: set[str]
    batches: list[list[uuid.UUID]] | None

    def merge(self, other: Partial) -> None:
        self.recorded.merge(other.recorded)
        self.candidate.merge(other.candidate)
        self.recorded_activations += other.recorded_activations
        self.reproduced += other.reproduced
        self.replayed += other.replayed
        self.ambient += other.ambient
        self.turns += other.turns
        self.unrecorded += other.unrecorded
        self.matched_rules |= other.matched_rules
        if self.batches is not None and other.batches is not None:
            self.batches.extend(other.batches)


@dataclass(frozen=True)
class _Job:
    """One share's replay: everything it reads is in the snapshot (``exported``) or here."""

    exported: str
    url: str
    registry: KindRegistry
    policy: AttentionPolicy
    since: datetime
    until: datetime
    delegate_id: str | None
    after: int | None
    tolerance_s: float
    want_batches: bool
    fallback_s: float
    time_zones: dict[str, str] | None
    spent: dict[tuple[str, int], float] | None

    def run(self, part: journal.Part) -> Partial:
        batches: list[list[uuid.UUID]] | None = [] if self.want_batches else None
        replay = _Replay(self.registry, self.policy, self.tolerance_s, batches, self.fallback_s)
        plane = replay.plane
        if self.time_zones is not None:
            plane.time_zones = self.time_zones
        if self.spent is not None:
            spent = self.spent
            plane.spending = Spending(lambda d, day: spent.get((d, day), 0.0))
        since, until, delegate = self.since, self.until, self.delegate_id
        with journal.joined(self.exported, self.url) as reader:
            replay.run(
                journal.signals(reader, since, until, delegate, after=self.after, part=part),
                journal.user_turns(reader, since, until, delegate, part=part),
                journal.activations(reader, since, until, delegate, part=part),
            )
        plane.finish(math.inf)
        matched = replay.matched_rules
        for lane in plane.lanes:
            for rule in self.policy.matching(lane, None):
                matched.add(rule.label)
        return Partial(
            replay.recorded,
            replay.candidate.figures,
            replay.fidelity.recorded,
            replay.fidelity.reproduced,
            replay.replayed,
            replay.ambient,
            replay.turns,
            replay.unrecorded,
            matched,
            batches,
        )


def _share(job: _Job, part: journal.Part, out: Connection) -> None:
    """A child process's share (forked: ``job`` is inherited, only the result is pickled)."""
    # Nothing inherited is ever collected here: no finalizer of the parent's objects (a
    # connection's, say) runs in this process.
    gc.freeze()
    try:
        result: tuple[str, Any] = ("ok", job.run(part))
    except BaseException:  # handed to the parent, which raises it
        result = ("error", traceback.format_exc())
    out.send(result)
    out.close()


def _in_shares(job: _Job, workers: int) -> Partial:
    """The replay split by delegate across ``workers`` processes (this one runs share 0), each
    reading its share in the snapshot's history; their partial reports merged."""
    context = multiprocessing.get_context("fork")
    children = []
    for n in range(1, workers):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(
            target=_share, args=(job, (n, workers), send), name=f"simulate-{n}", daemon=True
        )
        child.start()
        send.close()
        children.append((child, receive))
    try:
        merged = job.run((0, workers))
        for child, receive in children:
            try:
                status, value = receive.recv()
            except EOFError:
                child.join()
                raise RuntimeError(
                    f"simulator process {child.name} ended without a result "
                    f"(exit code {child.exitcode})"
                ) from None
            if status != "ok":
                raise RuntimeError(f"simulator process {child.name} failed:\n{value}")
            merged.merge(value)
    finally:
        for child, receive in children:
            receive.close()
            if child.is_alive():
                child.join(timeout=1.0)
            if child.is_alive():
                child.terminate()
                child.join()
    return merged


def default_workers() -> int:
    """Processes a replay uses by default: the CPU count, at most :data:`MAX_WORKERS`."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


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
    workers: int = 1,
) -> dict[str, Any]:
    """The report (see the module's rules). ``batches``: if given, filled with the signal ids
    of every activation the candidate runs (tests). ``workers``: processes the replay is split
    across by delegate (lanes are independent; each reads its share in the same snapshot);
    the report is the same whatever the number. One delegate, or a small range, runs here."""
    policy = candidate_policy(document, settings)
    with journal.snapshot(engine) as snap:
        deferrals = journal.budget_deferrals(snap, since, until, delegate_id)
        after = None if delegate_id is not None else journal.first_signal_seq(snap, since)
        fallback_s = journal.mean_duration(snap, since, until, delegate_id, after=after)
        spent = (
            journal.tokens_per_activation(snap, since, until, delegate_id)
            if policy.needs_tokens
            else None
        )
        job = _Job(
            snap.exported,
            snap.reader.url,
            registry,
            policy,
            since,
            until,
            delegate_id,
            after,
            tolerance_s,
            batches is not None,
            1.0 if fallback_s is None else fallback_s,
            journal.time_zones(snap) if policy.needs_zones else None,
            spent,
        )
        if workers > 1 and delegate_id is None:
            partial = _in_shares(job, workers)
        else:
            partial = job.run(journal.WHOLE)
    recorded, candidate = partial.recorded, partial.candidate
    (
        recorded.budget_deferrals,
        recorded.token_budget_deferrals,
        recorded.quiet_hours_deferrals,
    ) = deferrals
    if batches is not None and partial.batches is not None:
        batches.extend(partial.batches)
    matched_rules = partial.matched_rules
    never = [label_ for label_ in policy.rule_labels() if label_ not in matched_rules]
    share = (
        None
        if partial.recorded_activations == 0
        else round(partial.reproduced / partial.recorded_activations, 4)
    )
    return {
        "fidelity": share,
        "range": {
            "since": since.isoformat(),
            "until": until.isoformat(),
            "delegate": delegate_id,
        },
        "policy": {"candidate": label, "rules": policy.rule_labels()},
        "signals": {
            "replayed": partial.replayed,
            "ambient": partial.ambient,
            "unrecorded_outcome": partial.unrecorded,
            "rule": "a batch no recorded activation delivered lasts the mean recorded duration",
        },
        "user_turns": partial.turns,
        "recorded": recorded.public(),
        "candidate": candidate.public(),
        "model_calls": {
            "recorded": recorded.activations,
            "candidate": candidate.activations,
            "avoided": recorded.activations - candidate.activations,
        },
        "per_kind": per_kind_table(recorded, candidate),
        "rules_never_matched": never,
        "fidelity_detail": {
            "recorded": partial.recorded_activations,
            "reproduced": partial.reproduced,
            "tolerance_s": tolerance_s,
        },
    }


def under_candidate(
    delegate_id: str,
    kind: str,
    requested_mode: str | None,
    recorded_priority: int,
    registry: KindRegistry,
    policy: AttentionPolicy,
) -> tuple[Mode, int]:
    """The mode and priority publishing the signal would give under the candidate: the
    candidate's rule, else the publisher's requested mode under the kind's rules."""
    try:
        requested = None if requested_mode is None else Mode(requested_mode)
    except ValueError:
        requested = None
    priority: int | None = recorded_priority
    if policy.sets_modes:
        rule = policy.for_kind(delegate_id, kind)
        requested = rule.mode or requested
        if rule.priority is not None:
            priority = rule.priority
    kind_policy = registry.policy_for(kind, requested)
    mode, final_priority, _expires, _downgraded = settle(
        kind_policy, requested, priority, None, EPOCH
    )
    return mode, final_priority


def text_report(report: dict[str, Any]) -> str:
    return render_text(report)
