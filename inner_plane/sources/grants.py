"""What an external processor may publish, and the trust label its signals carry.

A processor publishes only kinds under ``external.<name>.``, for its delegates, up to its
highest mode; its source is always ``external.<name>`` (so it can neither speak as an internal
source nor collide with another source's dedup keys); its content is ``untrusted`` unless an
operator marked the processor trusted, and nothing in a request can raise that.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

from inner_plane import logs
from inner_plane.journal.processors import Processor
from inner_plane.publish import log_rejected, publish_drafts, validate
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode, PublishResult, Signal, SignalDraft, SignalError, Trust

MODE_RANK = {Mode.AMBIENT: 0, Mode.NEXT_TURN: 1, Mode.WAKE: 2, Mode.INTERRUPT: 3}
ANY_DELEGATE = "*"
# Fields an external processor may not set: ids are derived or random, and `caused_by` names an
# activation of the delegate itself.
NOT_ACCEPTED = ("id", "caused_by")
IDEMPOTENCY_KEY_RE = re.compile(r"[\x21-\x7e]{1,200}")
MAX_BATCH = 500


class GrantError(Exception):
    """The signal is valid but outside the processor's grant (reported as 403)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def source_of(processor: Processor) -> str:
    return f"external.{processor.name}"


def kind_prefix(name: str) -> str:
    return f"external.{name}."


def _prefixed(error: SignalError | GrantError, prefix: str) -> Any:
    if not prefix:
        return error
    return type(error)(f"{prefix}{error.field}", error.reason)


def _unstorable(value: Any, path: str) -> tuple[str, str] | None:
    """The first string PostgreSQL cannot store (NUL, lone surrogate) as (field, reason)."""
    if isinstance(value, str):
        if "\x00" in value:
            return path, "must not contain NUL characters"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path, "must be valid Unicode (no lone surrogates)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = _unstorable(key, where) or _unstorable(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _unstorable(item, f"{path}[{index}]")
            if found:
                return found
    return None


def admit_one(
    runtime: Runtime, processor: Processor, raw: Any, dedup_key: str | None = None
) -> SignalDraft:
    """Validate one signal from ``processor`` and apply its grant; raise SignalError (422) or
    GrantError (403), each logged once. Nothing is stored."""
    source = source_of(processor)
    if not isinstance(raw, dict):
        not_object = SignalError("signal", f"must be a JSON object, not {type(raw).__name__}")
        log_rejected(raw, not_object, source)
        raise not_object
    problem = next(
        (
            SignalError(f, "is not accepted from external processors")
            for f in NOT_ACCEPTED
            if f in raw
        ),
        None,
    )
    bad = _unstorable(raw, "")
    if problem is None and bad is not None:
        problem = SignalError(*bad)
    # An explicit null means "not given" for the fields the grant fills in.
    candidate = {k: v for k, v in raw.items() if not (k in ("source", "trust") and v is None)}
    candidate.setdefault("source", source)
    candidate.setdefault("trust", Trust.TRUSTED if processor.trusted else Trust.UNTRUSTED)
    if problem is None and dedup_key is not None:
        given = candidate.get("dedup_key")
        if given is not None and given != dedup_key:
            problem = SignalError("dedup_key", "conflicts with the Idempotency-Key header")
        candidate["dedup_key"] = dedup_key
    if problem is not None:
        log_rejected(candidate, problem, source)
        raise problem
    if candidate.get("dedup_key") is None:
        # The id is assigned here rather than by the publish path, which would copy the draft.
        candidate["id"] = uuid.uuid4()
    draft = validate(candidate, via=source)  # logs its own rejections
    try:
        return _within_grant(runtime, processor, draft)
    except GrantError as error:
        logs.emit(
            "forbidden",
            kind=draft.kind,
            source=source,
            mode=draft.mode,
            delegate=draft.delegate_id,
            field=error.field,
            reason=error.reason,
        )
        raise


def _within_grant(runtime: Runtime, processor: Processor, draft: SignalDraft) -> SignalDraft:
    source = source_of(processor)
    if draft.source != source:
        raise GrantError("source", f"must be {source!r} (the processor's own source)")
    if draft.trust is Trust.TRUSTED and not processor.trusted:
        raise GrantError("trust", "this processor is not trusted; its content is untrusted")
    if not draft.kind.startswith(processor.kind_prefix):
        raise GrantError("kind", f"must start with {processor.kind_prefix!r}")
    if ANY_DELEGATE not in processor.delegates and draft.delegate_id not in processor.delegates:
        raise GrantError("delegate_id", "this processor may not publish for that delegate")
    highest = Mode(processor.max_mode)
    if draft.mode is not None:
        if MODE_RANK[draft.mode] > MODE_RANK[highest]:
            raise GrantError("mode", f"above this processor's highest mode {highest.value!r}")
    else:
        # A kind's default never lifts a processor above its grant: cap it explicitly.
        default = runtime.registry.policy_for(draft.kind).mode
        if MODE_RANK[default] > MODE_RANK[highest]:
            draft = draft.model_copy(update={"mode": highest})
    return draft


def check_idempotency_key(value: str | None) -> str | None:
    if value is not None and IDEMPOTENCY_KEY_RE.fullmatch(value) is None:
        raise SignalError("Idempotency-Key", "must be 1 to 200 visible ASCII characters")
    return value


def admit(
    runtime: Runtime,
    processor: Processor,
    raws: Sequence[Any],
    idempotency_key: str | None,
    batch: bool,
) -> list[SignalDraft]:
    """Admit every signal of a request or none (errors name ``signals[i].field`` in a batch)."""
    check_idempotency_key(idempotency_key)
    if batch and len(raws) > MAX_BATCH:
        raise SignalError("signals", f"has {len(raws)} signals; at most {MAX_BATCH} per request")
    if batch and not raws:
        raise SignalError("signals", "must hold at least one signal")
    drafts = []
    for index, raw in enumerate(raws):
        prefix = f"signals[{index}]." if batch else ""
        key = None
        if idempotency_key is not None:
            key = f"{idempotency_key}#{index}" if batch else idempotency_key
        try:
            drafts.append(admit_one(runtime, processor, raw, key))
        except (SignalError, GrantError) as error:
            raise _prefixed(error, prefix) from None
    return drafts


def publish_for(
    runtime: Runtime,
    processor: Processor,
    raws: Sequence[Any],
    idempotency_key: str | None = None,
    batch: bool = False,
) -> list[tuple[PublishResult, Trust]]:
    """Admit and journal a request's signals in one transaction (all or nothing)."""
    drafts = admit(runtime, processor, raws, idempotency_key, batch)
    results = publish_drafts(drafts, runtime, via=source_of(processor))
    return [(result, result.trust) for result in results]


def status_for(runtime: Runtime, processor: Processor, signal_id: uuid.UUID) -> Signal | None:
    """A signal this processor published, or None (another source's signals stay invisible)."""
    signal = runtime.signals.get(signal_id)
    if signal is None or signal.source != source_of(processor):
        return None
    return signal


def published_view(result: PublishResult, trust: Trust) -> dict[str, Any]:
    """What HTTP and MCP answer for one accepted signal (the PublishedSignal shape), built
    directly: it runs once per signal of every batch."""
    return {
        "id": str(result.id),
        "deduplicated": result.deduplicated,
        "kind": result.kind,
        "delegate_id": result.delegate_id,
        "mode": result.mode.value,
        "priority": result.priority,
        "trust": trust.value,
    }
