"""The publish path: validate, apply the kind's policy, deduplicate, journal, log.

Once :func:`publish` returns, the signal is in the journal. Dedup has two layers: a Redis
``SET NX`` marker short-circuits repeats cheaply, and the journal's unique constraints decide.
A Redis hit is always confirmed against the journal, so a marker left by a publisher that died
before its insert never swallows a signal.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import redis

from inner_plane import logs, redis_keys
from inner_plane.runtime import Runtime, get_runtime
from inner_plane.signals.kinds import KindRegistry, Resolution
from inner_plane.signals.model import (
    Mode,
    PublishResult,
    SignalDraft,
    SignalError,
    derive_signal_id,
)

# Called with the newly journaled signals (not duplicates), after the commit. The attention
# broker registers here to schedule wakes; the publish path itself knows nothing about lanes.
AfterPublish = Callable[[Runtime, Sequence[PublishResult]], None]
_after_publish: list[AfterPublish] = []


def on_published(callback: AfterPublish) -> AfterPublish:
    if callback not in _after_publish:
        _after_publish.append(callback)
    return callback


class _Prepared:
    __slots__ = ("draft", "resolution", "row", "signal_id")

    def __init__(self, draft: SignalDraft, resolution: Resolution) -> None:
        self.draft = draft
        self.resolution = resolution
        self.signal_id: uuid.UUID = draft.id or uuid.uuid4()
        self.row: dict[str, Any] = {
            "id": self.signal_id,
            "delegate_id": draft.delegate_id,
            "kind": draft.kind,
            "source": draft.source,
            "mode": resolution.mode.value,
            "requested_mode": None if draft.mode is None else draft.mode.value,
            "priority": resolution.priority,
            "data": draft.data,
            "trust": draft.trust.value,
            "dedup_key": resolution.dedup_key,
            "max_attempts": resolution.max_attempts,
            "caused_by": draft.caused_by,
            "occurred_at": draft.occurred_at,
            "available_at": draft.available_at,
            "expires_at": resolution.expires_at,
        }

    def result(self, deduplicated: bool) -> PublishResult:
        return PublishResult(
            id=self.signal_id,
            deduplicated=deduplicated,
            kind=self.draft.kind,
            source=self.draft.source,
            mode=self.resolution.mode,
            priority=self.resolution.priority,
            delegate_id=self.draft.delegate_id,
        )

    def log_fields(self) -> dict[str, Any]:
        return logs.signal_fields(
            self.signal_id,
            self.draft.kind,
            self.draft.source,
            self.resolution.mode,
            self.resolution.priority,
            self.draft.delegate_id,
        )


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
            fields[key] = value if isinstance(value, str | int) else None
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
    if draft.dedup_key is None:
        template = registry.policy_for(draft.kind).dedup_key_template
        if template is not None:
            try:
                key = template.format(**draft.data)
            except (KeyError, IndexError, ValueError):
                # The data lacks the template's fields: publish without a dedup key.
                key = None
            if key:
                return draft.model_copy(
                    update={
                        "dedup_key": key,
                        "id": derive_signal_id(draft.delegate_id, draft.source, key),
                    }
                )
    if draft.id is None:
        return draft.model_copy(update={"id": uuid.uuid4()})
    return draft


def prepare(draft: SignalDraft, runtime: Runtime, now: datetime) -> _Prepared:
    draft = with_stable_identity(draft, runtime.registry)
    return _Prepared(draft, runtime.registry.resolve(draft, now))


# SET NX EX for every key of a batch in one command (1 where the marker is new): a pipeline of
# 1,000 SETs costs the client about four times more CPU than one script call.
_SET_NX_MANY = """
local ttl = ARGV[#KEYS + 1]
local fresh = {}
for i, key in ipairs(KEYS) do
  fresh[i] = redis.call('SET', key, ARGV[i], 'NX', 'EX', ttl) and 1 or 0
end
return fresh
"""


def _redis_seen(runtime: Runtime, prepared: Sequence[_Prepared]) -> set[uuid.UUID]:
    """Ids whose dedup marker already existed (candidates for duplicates)."""
    keyed = [p for p in prepared if p.draft.dedup_key is not None]
    if not keyed:
        return set()
    ttl = runtime.settings.dedup_ttl_s
    keys = [
        redis_keys.dedup(p.draft.delegate_id, p.draft.source, p.draft.dedup_key)
        for p in keyed
        if p.draft.dedup_key is not None
    ]
    try:
        if len(keyed) == 1:
            answers: list[Any] = [
                runtime.redis.set(keys[0], str(keyed[0].signal_id), nx=True, ex=ttl)
            ]
        else:
            script = runtime.redis.register_script(_SET_NX_MANY)
            answers = list(script(keys=keys, args=[*(str(p.signal_id) for p in keyed), ttl]))
    except redis.RedisError as error:
        # Redis is only the fast path; the journal's constraint still decides.
        logs.emit("dedup_fast_path_unavailable", reason=str(error)[:200])
        return set()
    return {p.signal_id for p, fresh in zip(keyed, answers, strict=True) if not fresh}


def publish_drafts(
    drafts: Sequence[SignalDraft], runtime: Runtime | None = None, via: str = "api"
) -> list[PublishResult]:
    """Journal already-validated drafts in one transaction; return one result per draft."""
    runtime = runtime or get_runtime()
    now = datetime.now(UTC)
    prepared = [prepare(d, runtime, now) for d in drafts]

    # Duplicates inside the same call collapse onto the first occurrence.
    first: dict[uuid.UUID, _Prepared] = {}
    for p in prepared:
        first.setdefault(p.signal_id, p)
    unique = list(first.values())

    seen = _redis_seen(runtime, unique)
    known = runtime.signals.existing_ids(seen) if seen else set()
    to_insert = [p for p in unique if p.signal_id not in known]
    inserted = runtime.signals.insert([p.row for p in to_insert])

    results: list[PublishResult] = []
    fresh: list[PublishResult] = []
    logged: set[uuid.UUID] = set()
    for p in prepared:
        is_new = p.signal_id in inserted and p.signal_id not in logged
        result = p.result(deduplicated=not is_new)
        results.append(result)
        fields = p.log_fields()
        if is_new:
            logged.add(p.signal_id)
            fresh.append(result)
            if p.resolution.downgraded:
                logs.emit(
                    "downgraded",
                    **fields,
                    requested="interrupt",
                    reason="kind not permitted to interrupt",
                )
            logs.emit("published", **fields, trust=p.draft.trust, via=via)
        else:
            logs.emit("deduplicated", **fields, dedup_key=p.draft.dedup_key, via=via)
    downgraded = [p.signal_id for p in to_insert if p.resolution.downgraded]
    if downgraded:
        # Durable too: `signals show` explains why the signal did not interrupt.
        runtime.signals.add_events(
            [d for d in downgraded if d in inserted],
            "downgraded",
            "interrupt requested by a kind not permitted to interrupt; treated as wake",
        )
    if fresh:
        for callback in _after_publish:
            callback(runtime, fresh)
    return results


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
    "Mode",
    "PublishResult",
    "SignalDraft",
    "SignalError",
    "on_published",
    "publish",
    "publish_drafts",
    "publish_many",
    "validate",
    "wire_form",
    "with_stable_identity",
]
