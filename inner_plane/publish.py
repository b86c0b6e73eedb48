"""The publish path: validate, apply the kind's policy, deduplicate, journal, log, then hand the
new signals to the attention broker (wake scheduling).

Once :func:`publish` returns, the signal is in the journal. Dedup has two layers: a Redis
``SET NX`` marker per dedup key short-circuits repeats (no insert is attempted), and the
journal's unique constraints decide (INSERT ... ON CONFLICT DO NOTHING, by id and by (delegate,
source, dedup_key)). A marker hit is always confirmed against the journal, so a marker left by a
publisher that died before its insert never swallows a signal.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from opentelemetry.trace import Span, SpanKind

from inner_plane import logs, redis_keys, tracing
from inner_plane.attention.document import AttentionPolicy
from inner_plane.attention.live import policy_source
from inner_plane.attention.wakes import finish_wakes, send_wakes
from inner_plane.journal.signals.store import NewSignal, SignalIdentity
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.kinds import KindPolicy, KindRegistry, settle
from inner_plane.signals.model import (
    Mode,
    PublishResult,
    SignalDraft,
    SignalError,
    Trust,
    is_dedup_key,
)


class _Prepared:
    """One draft with its stable identity and the kind's policy applied, and its journal row.

    Built once per signal on the hot path: the draft is not copied (the derived dedup key and
    id live here) and the kind's policy is looked up once."""

    __slots__ = (
        "dedup_key", "delegate_id", "downgraded", "draft", "kind", "mode", "priority", "row",
        "signal_id", "span",
    )  # fmt: skip

    def __init__(
        self,
        draft: SignalDraft,
        registry: KindRegistry,
        now: datetime,
        attention: AttentionPolicy | None = None,
        origin: str | None = None,
        settled: dict[tuple[Any, ...], _Settled] | None = None,
    ) -> None:
        self.draft = draft
        self.delegate_id = draft.delegate_id
        self.kind = draft.kind
        self.span: Span | None = None
        # What the kind's policy (and the operator's rule for the delegate) make of the draft's
        # kind, mode, priority and expiry: the same for every draft of a call that asks the same,
        # so a batch settles each distinct ask once (``settled``, the call's memo).
        whose = None if attention is None else draft.delegate_id
        ask = (draft.kind, draft.mode, draft.priority, draft.expires_at, whose)
        known = None if settled is None else settled.get(ask)
        if known is None:
            known = _settle(draft, registry, now, attention)
            if settled is not None:
                settled[ask] = known
        policy, mode, priority, expires_at, downgraded = known
        dedup_key, signal_id = _identity(draft, policy.dedup_key_template)
        if signal_id is None:
            signal_id = uuid.uuid4()
        self.signal_id: uuid.UUID = signal_id
        self.dedup_key = dedup_key
        self.mode = mode
        self.priority = priority
        self.downgraded = downgraded
        self.row: NewSignal = {
            "id": signal_id,
            "delegate_id": draft.delegate_id,
            "kind": draft.kind,
            "source": draft.source,
            "mode": mode.value,
            "requested_mode": None if draft.mode is None else draft.mode.value,
            "priority": priority,
            "data": draft.data,
            "trust": draft.trust.value,
            "dedup_key": dedup_key,
            "max_attempts": policy.max_attempts,
            "caused_by": draft.caused_by,
            "occurred_at": draft.occurred_at,
            "available_at": draft.available_at,
            "expires_at": expires_at,
            # The publish span of the process that sent it (a Celery message's traceparent), or
            # this process's own (:func:`_open_spans`), or None (not traced).
            "traceparent": origin,
        }

    def result(self, deduplicated: bool, stored: SignalIdentity | None = None) -> PublishResult:
        """This publication's answer; a duplicate answers with the stored signal (a replay
        with another kind or mode learns what the journal holds, not what it sent)."""
        draft = self.draft
        if stored is not None:
            return PublishResult(
                id=self.signal_id,
                deduplicated=True,
                kind=stored["kind"],
                source=stored["source"],
                mode=Mode(stored["mode"]),
                priority=stored["priority"],
                delegate_id=stored["delegate_id"],
                trust=Trust(stored["trust"]),
            )
        return PublishResult(
            id=self.signal_id,
            deduplicated=deduplicated,
            kind=draft.kind,
            source=draft.source,
            mode=self.mode,
            priority=self.priority,
            delegate_id=draft.delegate_id,
            trust=draft.trust,
        )

    def log_fields(self, **more: Any) -> dict[str, Any]:
        draft = self.draft
        return {
            "id": self.signal_id,
            "kind": draft.kind,
            "source": draft.source,
            "mode": self.mode,
            "priority": self.priority,
            "delegate": draft.delegate_id,
            **more,
        }


_Settled = tuple[KindPolicy, Mode, int, datetime | None, bool]


def _settle(
    draft: SignalDraft, registry: KindRegistry, now: datetime, attention: AttentionPolicy | None
) -> _Settled:
    """The kind's policy for the draft and the (mode, priority, expires_at, downgraded) it
    settles on."""
    policy = registry.policy_for(draft.kind, draft.mode)
    requested, asked_priority = draft.mode, draft.priority
    if attention is not None:
        # An operator's rule outranks the publisher; the kind's own rules (forced modes,
        # interrupt permission) still apply to what the rule asks.
        rule = attention.for_kind(draft.delegate_id, draft.kind)
        requested = rule.mode or requested
        asked_priority = asked_priority if rule.priority is None else rule.priority
    return policy, *settle(policy, requested, asked_priority, draft.expires_at, now)


def _identity(draft: SignalDraft, template: str | None) -> tuple[str | None, uuid.UUID | None]:
    """The dedup key (given, or made by the kind's template from the data) and the id it
    derives; without a dedup key, the draft's own id (None: a random one is assigned)."""
    if draft.dedup_key is None and template is not None:
        key = _templated_key(template, draft.data)
        if key is not None:
            return key, derive_signal_id(draft.delegate_id, draft.source, key)
    return draft.dedup_key, draft.id


def _templated_key(template: str, data: dict[str, Any]) -> str | None:
    """The dedup key a kind's template makes of the data, or None if the data lacks its fields
    (then the signal is published without a dedup key)."""
    try:
        key = template.format(**data)
    except (KeyError, IndexError, ValueError):
        return None
    if key and not is_dedup_key(key):
        # The data's text is the publisher's: a control character or an overlong value still
        # makes one stable key, as its digest.
        return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return key or None


def log_rejected(raw: Any, error: SignalError, via: str) -> None:
    """One ``rejected`` line with whatever stable fields the bad input did carry."""
    fields: dict[str, Any] = {}
    if isinstance(raw, dict):
        for key, field in (
            ("id", "id"),
            ("kind", "kind"),
            ("source", "source"),
            ("mode", "mode"),
            ("priority", "priority"),
            ("delegate", "delegate_id"),
        ):
            value = raw.get(field)
            # Only what the input carried: a field it lacks is left out, not written empty.
            if isinstance(value, str | int) and value != "":
                fields[key] = value
    logs.emit("rejected", **fields, field=error.field, reason=error.reason, via=via)


def validate(raw: Any, via: str = "api") -> SignalDraft:
    """Parse one untrusted signal; log and raise SignalError if it is invalid."""
    try:
        draft = SignalDraft.parse(raw)
    except SignalError as error:
        log_rejected(raw, error, via)
        raise
    return draft


def with_stable_identity(draft: SignalDraft, registry: KindRegistry) -> SignalDraft:
    """Fill in the dedup key from the kind's template (if the data has its fields) and the id:
    derived from the dedup key, else random. Done before a signal leaves the process, so a
    redelivered Celery message is recognised as the same signal."""
    dedup_key, signal_id = _identity(draft, registry.policy_for(draft.kind).dedup_key_template)
    if dedup_key != draft.dedup_key or signal_id is None:
        return draft.model_copy(update={"dedup_key": dedup_key, "id": signal_id or uuid.uuid4()})
    return draft


# SET NX EX for every key of a batch in one command, answering one string with "1" where the
# marker is new and "0" where it existed: a pipeline of 1,000 SETs costs the client about four
# times more CPU than one script call.
_SET_NX_MANY = """
local ttl = ARGV[#KEYS + 1]
local fresh = {}
for i, key in ipairs(KEYS) do
  fresh[i] = redis.call('SET', key, ARGV[i], 'NX', 'EX', ttl) and '1' or '0'
end
return table.concat(fresh)
"""


def _fast_path_unavailable(error: redis.RedisError) -> None:
    # Redis is only the fast path; the journal's constraint still decides.
    logs.emit("dedup_fast_path_unavailable", reason=str(error)[:200])


def _marked_before(runtime: Runtime, prepared: Sequence[_Prepared]) -> set[uuid.UUID]:
    """The fast path: SET NX each keyed signal's dedup marker; return the ids whose marker
    already existed. A marker is only a hint (its publisher may have died before its insert):
    the caller confirms these against the journal."""
    keyed = [p for p in prepared if p.dedup_key is not None]
    if not keyed:
        return set()
    keys = [redis_keys.dedup(p.draft.delegate_id, p.draft.source, p.dedup_key) for p in keyed]  # type: ignore[arg-type]
    ttl = runtime.settings.dedup_ttl_s
    try:
        if len(keyed) == 1:
            fresh = [bool(runtime.redis.set(keys[0], str(keyed[0].signal_id), nx=True, ex=ttl))]
        else:
            flags = runtime.redis.eval(
                _SET_NX_MANY, len(keys), *keys, *(str(p.signal_id) for p in keyed), ttl
            )
            if isinstance(flags, bytes):  # a client without decode_responses
                flags = flags.decode()
            fresh = [flag == "1" for flag in flags]
    except redis.RedisError as error:
        _fast_path_unavailable(error)
        return set()
    return {p.signal_id for p, new in zip(keyed, fresh, strict=True) if not new}


_DOWNGRADED_REASON = "kind not permitted to interrupt"


def _prepare(
    drafts: Sequence[SignalDraft],
    runtime: Runtime,
    origins: Sequence[str | None] | None = None,
    via: str = "api",
) -> tuple[list[_Prepared], list[_Prepared]]:
    """Every draft prepared, and the unique ones: duplicates inside one call collapse onto the
    first occurrence. ``origins``: one traceparent per draft, the publish span of the process
    that sent it (a Celery message's headers), if any."""
    now = datetime.now(UTC)
    registry = runtime.registry
    attention = policy_source(runtime).current()
    rules = attention if attention.sets_modes else None
    settled: dict[tuple[Any, ...], _Settled] = {}
    if origins is None:
        prepared = [_Prepared(d, registry, now, rules, None, settled) for d in drafts]
    else:
        prepared = [
            _Prepared(d, registry, now, rules, o, settled)
            for d, o in zip(drafts, origins, strict=True)
        ]
    first: dict[uuid.UUID, _Prepared] = {}
    for p in prepared:
        first.setdefault(p.signal_id, p)
    unique = list(first.values()) if len(first) < len(prepared) else prepared
    if tracing.on:
        _open_spans(unique, via)
    return prepared, unique


def _open_spans(unique: Sequence[_Prepared], via: str) -> None:
    """A publish span for each signal that no sender traced: its traceparent goes on the row,
    so the activation that claims it links to it."""
    for p in unique:
        if p.row["traceparent"] is not None:
            continue  # its publish span is the sender's
        draft = p.draft
        p.span = tracing.start(
            "publish signals",
            SpanKind.PRODUCER,
            publish_span_attributes(draft, p.signal_id, p.mode.value, via),
        )
        p.row["traceparent"] = tracing.traceparent(p.span)


def publish_span_attributes(
    draft: SignalDraft, signal_id: uuid.UUID, mode: str, via: str
) -> dict[str, Any]:
    """A publish span's attributes (messaging conventions; the delegate as the conversation)."""
    return {
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": "signals",
        "messaging.message.id": str(signal_id),
        "gen_ai.conversation.id": draft.delegate_id,
        "inner_plane.signal.kind": draft.kind,
        "inner_plane.signal.source": draft.source,
        "inner_plane.signal.mode": mode,
        "inner_plane.via": via,
    }


def _close_spans(
    unique: Sequence[_Prepared],
    inserted: Collection[uuid.UUID],
    error: BaseException | None = None,
) -> None:
    for p in unique:
        if p.span is not None:
            if error is None:
                p.span.set_attribute("inner_plane.signal.deduplicated", p.signal_id not in inserted)
            else:
                tracing.failed(p.span, error)
            p.span.end()
            p.span = None


class Journaled:
    """Signals inserted in a statement or transaction: :meth:`announce` logs them, records their
    downgrades and schedules their wakes, once it committed (the operator sees only that)."""

    def __init__(
        self,
        runtime: Runtime,
        via: str,
        prepared: list[_Prepared],
        inserted: set[uuid.UUID],
        stored: dict[uuid.UUID, SignalIdentity],
        committed_at: float,
    ) -> None:
        self.runtime = runtime
        self.via = via
        self.prepared = prepared
        self.inserted = inserted
        # time.monotonic() when the statement that journaled them was answered: their wake
        # windows count from then (attention.wakes.countdown_left).
        self.committed_at = committed_at
        # What the journal holds for the duplicates: a replay answers with the stored signal.
        self.stored = stored

    def announce(self) -> list[PublishResult]:
        """Log every signal (published, downgraded or deduplicated), record the downgrades, and
        hand the new ones to the attention broker (wakes); answer each publication."""
        return self._announce(answer=True)[0]

    def announce_counted(self) -> int:
        """:meth:`announce` for a caller that needs no answers (the timer tick): the same lines,
        events and wakes; returns how many were duplicates."""
        return self._announce(answer=False)[1]

    def _announce(self, answer: bool) -> tuple[list[PublishResult], int]:
        via, inserted = self.via, self.inserted
        results: list[PublishResult] = []
        fresh: list[_Prepared] = []
        lines: list[tuple[str, dict[str, Any]]] = []
        logged: set[uuid.UUID] = set()
        first: dict[uuid.UUID, _Prepared] = {}
        deduplicated = 0
        for p in self.prepared:
            first.setdefault(p.signal_id, p)
            is_new = p.signal_id in inserted and p.signal_id not in logged
            if answer:
                if is_new:
                    result = p.result(False)
                elif p.signal_id in inserted:  # a repeat inside this call: the first one stands
                    result = first[p.signal_id].result(True)
                else:
                    result = p.result(True, self.stored.get(p.signal_id))
                results.append(result)
            if is_new:
                logged.add(p.signal_id)
                fresh.append(p)
                if p.downgraded:
                    lines.append(
                        (
                            "downgraded",
                            p.log_fields(requested="interrupt", reason=_DOWNGRADED_REASON),
                        )
                    )
                lines.append(("published", p.log_fields(trust=p.draft.trust, via=via)))
            else:
                deduplicated += 1
                lines.append(("deduplicated", p.log_fields(dedup_key=p.dedup_key, via=via)))
        # After the commit, with the newly journaled signals only (not duplicates): the
        # attention broker decides which of them open or join a wake window. A direct call, so
        # no import order can leave a process publishing without waking. The windows' round
        # trip to Redis is under way while the lines and events are written, and the activates
        # it decides go after them.
        wakes = send_wakes(self.runtime, fresh, self.committed_at) if fresh else None
        try:
            # One write and one flush for the whole batch; the same lines as one emit() each.
            logs.emit_many(lines)
            downgraded = [
                p.signal_id for p in self.prepared if p.downgraded and p.signal_id in inserted
            ]
            if downgraded:
                # Durable too: `signals show` explains why the signal did not interrupt.
                self.runtime.signals.add_events(downgraded, "downgraded", _DOWNGRADED_EVENT)
        finally:
            if wakes is not None:
                finish_wakes(self.runtime, wakes)
        return results, deduplicated


_DOWNGRADED_EVENT = "interrupt requested by a kind not permitted to interrupt; treated as wake"


class DraftRows:
    """Validated drafts as journal rows (stable ids, the kind's policy applied) for a caller that
    inserts them in a statement of its own, one that may leave some out: the timer tick journals
    a moment only where the same statement moves its timer's cursor. No Redis marker is read or
    set: the journal's constraints alone decide (ON CONFLICT DO NOTHING)."""

    def __init__(
        self, drafts: Sequence[SignalDraft], runtime: Runtime | None = None, via: str = "api"
    ) -> None:
        self.runtime = runtime or get_runtime()
        self.via = via
        self.prepared, self.unique = _prepare(drafts, self.runtime, via=via)

    def rows(self) -> list[NewSignal]:
        return [p.row for p in self.unique]

    def journaled(self, kept: Collection[uuid.UUID], inserted: set[uuid.UUID]) -> Journaled:
        """What the statement did, to announce once it committed: of the rows it ``kept`` (by
        id), ``inserted`` are new and the others duplicates (answered with the stored signal);
        a row left out was not published by this call and is not announced."""
        committed_at = time.monotonic()
        prepared = [p for p in self.prepared if p.signal_id in kept]
        lost = [
            p.signal_id for p in self.unique if p.signal_id in kept and p.signal_id not in inserted
        ]
        stored = self.runtime.signals.identities(lost) if lost else {}
        if tracing.on:
            _close_spans(self.unique, inserted)
        return Journaled(self.runtime, self.via, prepared, inserted, stored, committed_at)


def publish_drafts(
    drafts: Sequence[SignalDraft],
    runtime: Runtime | None = None,
    via: str = "api",
    origins: Sequence[str | None] | None = None,
) -> list[PublishResult]:
    """Journal already-validated drafts in one transaction; return one result per draft.
    ``origins``: one traceparent per draft, of the sender's publish span (see :func:`_prepare`).
    """
    runtime = runtime or get_runtime()
    prepared, unique = _prepare(drafts, runtime, origins, via)
    try:
        return _journal(runtime, via, prepared, unique)
    except BaseException as error:
        if tracing.on:
            _close_spans(unique, (), error)
        raise


def _journal(
    runtime: Runtime, via: str, prepared: list[_Prepared], unique: list[_Prepared]
) -> list[PublishResult]:

    # Repeats short-circuit on Redis: a marked signal that the journal confirms is not inserted
    # again. Everything else is inserted; ON CONFLICT DO NOTHING decides races and lost markers.
    marked = _marked_before(runtime, unique)
    stored = runtime.signals.identities(marked) if marked else {}
    to_insert = [p for p in unique if p.signal_id not in stored] if stored else unique
    inserted = runtime.signals.insert([p.row for p in to_insert]) if to_insert else set()
    committed_at = time.monotonic()
    if len(inserted) < len(to_insert):
        # Duplicates the journal's constraints caught: answer with what it holds.
        lost = [p.signal_id for p in to_insert if p.signal_id not in inserted]
        stored.update(runtime.signals.identities(lost))
    if tracing.on:
        _close_spans(unique, inserted)
    return Journaled(runtime, via, prepared, inserted, stored, committed_at).announce()


def publish(
    signal: dict[str, Any] | SignalDraft | None = None,
    /,
    *,
    runtime: Runtime | None = None,
    via: str = "api",
    **fields: Any,
) -> PublishResult:
    """Publish one inner signal in-process and return its id and whether it was a duplicate.

    ``publish(kind="task.completed", source="copilot", data={...})`` or ``publish({...})``.
    Raises :class:`SignalError` (nothing stored) if the signal is invalid.
    """
    raw: Any = signal if signal is not None else fields
    draft = validate(raw, via)
    return publish_drafts([draft], runtime, via)[0]


def publish_many(
    signals: Iterable[dict[str, Any] | SignalDraft],
    *,
    runtime: Runtime | None = None,
    via: str = "api",
) -> list[PublishResult]:
    """Publish many signals in one transaction. All are validated first: if any is invalid,
    SignalError (with its index) is raised and nothing is stored."""
    drafts: list[SignalDraft] = []
    for index, raw in enumerate(signals):
        try:
            drafts.append(validate(raw, via))
        except SignalError as error:
            raise SignalError(f"signals[{index}].{error.field}", error.reason) from None
    return publish_drafts(drafts, runtime, via)


def wire_form(draft: SignalDraft) -> dict[str, Any]:
    """JSON-ready dict of the fields a draft actually set (what a Celery message carries)."""
    return draft.model_dump(mode="json", exclude_none=True, exclude_defaults=False)


__all__ = [
    "DraftRows",
    "Journaled",
    "Mode",
    "PublishResult",
    "SignalDraft",
    "SignalError",
    "publish",
    "publish_drafts",
    "publish_many",
    "publish_span_attributes",
    "validate",
    "wire_form",
    "with_stable_identity",
]
