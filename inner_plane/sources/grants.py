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
from inner_plane.activation.storable import first_unstorable
from inner_plane.journal.processors import Processor
from inner_plane.publish import log_rejected, publish_drafts, validate
from inner_plane.runtime import Runtime
from inner_plane.signals.ids import random_signal_ids
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


class _Grant:
    """What a processor's grant allows, worked out once per request: every signal of a batch
    is checked against these facts (and each kind's default mode is looked up once)."""

    def __init__(self, runtime: Runtime, processor: Processor) -> None:
        self.registry = runtime.registry
        self.source = source_of(processor)
        self.trusted = processor.trusted
        self.trust = Trust.TRUSTED if processor.trusted else Trust.UNTRUSTED
        self.kind_prefix = processor.kind_prefix
        self.delegates = None if ANY_DELEGATE in processor.delegates else set(processor.delegates)
        self.highest = Mode(processor.max_mode)
        self.highest_rank = MODE_RANK[self.highest]
        self.default_above: dict[str, bool] = {}  # kind -> its default mode is above the grant

    def check(self, draft: SignalDraft) -> SignalDraft:
        """The draft within this grant (its default mode capped), or GrantError."""
        source = self.source
        if draft.source != source:
            raise GrantError("source", f"must be {source!r} (the processor's own source)")
        if draft.trust is Trust.TRUSTED and not self.trusted:
            raise GrantError("trust", "this processor is not trusted; its content is untrusted")
        if not draft.kind.startswith(self.kind_prefix):
            raise GrantError("kind", f"must start with {self.kind_prefix!r}")
        if self.delegates is not None and draft.delegate_id not in self.delegates:
            raise GrantError("delegate_id", "this processor may not publish for that delegate")
        if draft.mode is not None:
            if MODE_RANK[draft.mode] > self.highest_rank:
                raise GrantError(
                    "mode", f"above this processor's highest mode {self.highest.value!r}"
                )
            return draft
        above = self.default_above.get(draft.kind)
        if above is None:
            default = self.registry.policy_for(draft.kind).mode
            above = self.default_above[draft.kind] = MODE_RANK[default] > self.highest_rank
        if above:
            # A kind's default never lifts a processor above its grant: cap it explicitly.
            return draft.model_copy(update={"mode": self.highest})
        return draft

    def admit(
        self, raw: Any, dedup_key: str | None, plain_text: bool, new_id: uuid.UUID | None = None
    ) -> SignalDraft:
        """Validate one signal and apply the grant; raise SignalError (422) or GrantError
        (403), each logged once. ``plain_text``: the caller knows no string of ``raw`` holds a
        NUL or a lone surrogate (its JSON text had no \\u escape), so that walk is skipped.
        ``new_id``: the id it takes if it has no dedup key (else a random one)."""
        source = self.source
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
        if problem is None and not plain_text:
            bad = first_unstorable(raw, "")
            if bad is not None:
                problem = SignalError(*bad)
        # An explicit null means "not given" for the fields the grant fills in.
        candidate = dict(raw)
        for filled in ("source", "trust"):
            if filled in candidate and candidate[filled] is None:
                del candidate[filled]
        candidate.setdefault("source", source)
        candidate.setdefault("trust", self.trust)
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
            candidate["id"] = new_id or uuid.uuid4()
        draft = validate(candidate, via=source)  # logs its own rejections
        try:
            return self.check(draft)
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


def admit_one(
    runtime: Runtime, processor: Processor, raw: Any, dedup_key: str | None = None
) -> SignalDraft:
    """Validate one signal from ``processor`` and apply its grant; raise SignalError (422) or
    GrantError (403), each logged once. Nothing is stored."""
    return _Grant(runtime, processor).admit(raw, dedup_key, plain_text=False)


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
    plain_text: bool = False,
) -> list[SignalDraft]:
    """Admit every signal of a request or none (errors name ``signals[i].field`` in a batch),
    in one pass: the grant is worked out once for the request. ``plain_text``: see
    :meth:`_Grant.admit`."""
    check_idempotency_key(idempotency_key)
    if batch and len(raws) > MAX_BATCH:
        raise SignalError("signals", f"has {len(raws)} signals; at most {MAX_BATCH} per request")
    if batch and not raws:
        raise SignalError("signals", "must hold at least one signal")
    grant = _Grant(runtime, processor)
    drafts = []
    new_ids = random_signal_ids(len(raws)) if idempotency_key is None else [None] * len(raws)
    for index, raw in enumerate(raws):
        key = None
        if idempotency_key is not None:
            key = f"{idempotency_key}#{index}" if batch else idempotency_key
        try:
            drafts.append(grant.admit(raw, key, plain_text, new_ids[index]))
        except (SignalError, GrantError) as error:
            raise _prefixed(error, f"signals[{index}]." if batch else "") from None
    return drafts


def publish_for(
    runtime: Runtime,
    processor: Processor,
    raws: Sequence[Any],
    idempotency_key: str | None = None,
    batch: bool = False,
    plain_text: bool = False,
) -> list[tuple[PublishResult, Trust]]:
    """Admit and journal a request's signals in one transaction (all or nothing)."""
    drafts = admit(runtime, processor, raws, idempotency_key, batch, plain_text)
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
