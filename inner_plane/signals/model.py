"""The inner signal: what a subprocessor reports, validated before anything is stored."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.unreadable import UNREADABLE_DATA

MAX_DATA_BYTES = 64 * 1024
# Nesting and width caps: far above any real report, far below what breaks a reader (the JSON
# parser allows ~990 levels, pydantic's serialiser 256).
MAX_DATA_DEPTH = 32
MAX_DATA_KEYS = 2_000  # object keys in the whole document
# Identifier patterns end in \Z, never $ (which admits a trailing newline), so that .match and
# .fullmatch alike test the whole string. The *_PATTERN forms are for JSON Schema (ECMA-262,
# where $ without the m flag is the end of the input).
KIND_PATTERN = r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+$"
IDENTIFIER_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
KIND_RE = re.compile(KIND_PATTERN.removesuffix("$") + r"\Z")
IDENTIFIER_RE = re.compile(IDENTIFIER_PATTERN.removesuffix("$") + r"\Z")
MAX_DEDUP_KEY = 512
# Characters a dedup key may not hold: every control character (C0, DEL, C1), the Unicode line
# and paragraph separators, and lone surrogates (PostgreSQL cannot store them).
DEDUP_KEY_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

# The window every timestamp's UTC instant must fall in: [1970-01-01, 9000-01-01) UTC. Any
# instant in it survives PostgreSQL's timestamptz, Python's datetime (years 1..9999) and the
# plane's own arithmetic (backoff, TTLs, budgets) with millennia to spare; an offset can never
# push a value in it out of Python's range when read back in another zone.
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)  # exclusive


class Mode(StrEnum):
    AMBIENT = "ambient"
    NEXT_TURN = "next-turn"
    WAKE = "wake"
    INTERRUPT = "interrupt"


class Trust(StrEnum):
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class State(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    DELIVERED = "delivered"
    DISMISSED = "dismissed"
    EXPIRED = "expired"
    DEAD = "dead"


class SignalError(ValueError):
    """A signal failed validation. ``field`` names the offending field, ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _kind(value: str) -> str:
    if KIND_RE.fullmatch(value) is None:
        raise ValueError(
            "must be a namespaced kind: at least two dot-separated segments of "
            "[a-z][a-z0-9_-]*, for example 'task.completed'"
        )
    if len(value) > 128:
        raise ValueError("must be at most 128 characters")
    return value


def _identifier(value: str) -> str:
    if IDENTIFIER_RE.fullmatch(value) is None:
        raise ValueError(
            f"must be 1 to 128 characters of letters, digits and '._:-' (got {value[:40]!r})"
        )
    return value


def is_identifier(value: object) -> bool:
    """True if value is a whole identifier (delegate, source, timer name, channel)."""
    return isinstance(value, str) and IDENTIFIER_RE.fullmatch(value) is not None


Kind = Annotated[str, AfterValidator(_kind)]
Identifier = Annotated[str, AfterValidator(_identifier)]


# PostgreSQL text and jsonb cannot hold U+0000; refuse it here rather than fail at the insert.
_NUL = "must not contain NUL (U+0000) characters"


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def within_window(value: datetime) -> bool:
    """True if an aware datetime's UTC instant is in [EARLIEST_INSTANT, LATEST_INSTANT).

    Aware comparison works on day and second counts without building a UTC datetime, so values
    whose UTC instant Python cannot even represent (``9999-12-31T23:59:59-00:01``) are refused,
    not an OverflowError."""
    if value.utcoffset() is None:
        return False
    return EARLIEST_INSTANT <= value < LATEST_INSTANT


def _aware(name: str) -> AfterValidator:
    """Refuses a naive timestamp and one outside the window; bound to the field only when it
    is given (not for None)."""

    def check(value: datetime) -> datetime:
        offset = value.utcoffset()
        if offset is None:
            raise ValueError(f"{name} must be timezone-aware (add an offset such as +00:00)")
        if not EARLIEST_INSTANT <= value < LATEST_INSTANT:
            raise ValueError(
                "must fall between 1970-01-01T00:00:00Z and 9000-01-01T00:00:00Z (UTC instant)"
            )
        # In UTC: PostgreSQL refuses offsets beyond +-15:59 that Python accepts (+18:00).
        return value if not offset else value.astimezone(UTC)

    return AfterValidator(check)


def _timestamp_text(value: Any) -> Any:
    # A number would be read as Unix seconds: an ambiguity a wire format should not have.
    if not isinstance(value, str | datetime):
        raise ValueError(
            f"must be an ISO 8601 timestamp string with an offset, not {type(value).__name__}"
        )
    return value


_TIMESTAMP = BeforeValidator(_timestamp_text)


def _dedup_key(value: str) -> str:
    if value.isascii() and value.isprintable():  # the common case, decided in C
        return value
    found = DEDUP_KEY_FORBIDDEN.search(value)
    if found is not None:
        if found.group() == "\x00":
            raise ValueError(_NUL)
        raise ValueError(
            f"must not contain control characters, line separators or lone surrogates "
            f"(found U+{ord(found.group()):04X})"
        )
    return value


def is_dedup_key(value: str) -> bool:
    return 1 <= len(value) <= MAX_DEDUP_KEY and DEDUP_KEY_FORBIDDEN.search(value) is None


DedupKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_DEDUP_KEY), AfterValidator(_dedup_key)
]


def data_shape_problem(value: Any) -> str | None:
    """Why a JSON document is too deep or too wide, or None. Iterative: a document nested
    thousands deep is measured without recursion."""
    keys = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DATA_DEPTH:
            return f"is nested more than {MAX_DATA_DEPTH} levels deep"
        if isinstance(node, dict):
            keys += len(node)
            if keys > MAX_DATA_KEYS:
                return f"has more than {MAX_DATA_KEYS} object keys in all"
            children = node.values()
        else:
            children = node
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return None


# allow_nan=False: NaN and Infinity are not JSON, and PostgreSQL's jsonb refuses them. Built once:
# json.dumps with these options builds an encoder per call, half the cost of a small document.
_DATA_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class SignalDraft(BaseModel):
    """What a publisher sends. Mode and priority may be left to the kind's policy."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    kind: Kind
    source: Identifier
    delegate_id: Identifier = "default"
    mode: Mode | None = None
    # Strict: true and "50" are not priorities.
    priority: Annotated[int, Strict()] | None = Field(default=None, ge=0, le=100)
    data: dict[str, Any] = Field(default_factory=dict)
    trust: Trust = Trust.TRUSTED
    dedup_key: DedupKey | None = None
    id: uuid.UUID | None = None
    occurred_at: Annotated[datetime, _TIMESTAMP, _aware("occurred_at")] | None = None
    available_at: Annotated[datetime, _TIMESTAMP, _aware("available_at")] | None = None
    expires_at: Annotated[datetime, _TIMESTAMP, _aware("expires_at")] | None = None
    caused_by: uuid.UUID | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _data_is_object(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"must be a JSON object, not {type(value).__name__}")
        return value

    @field_validator("data")
    @classmethod
    def _data_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            text = _DATA_ENCODER.encode(value)
            size = len(text.encode())
        except (TypeError, ValueError) as error:
            raise ValueError(f"must be JSON-serialisable ({error})") from None
        except RecursionError:
            raise ValueError(f"is nested more than {MAX_DATA_DEPTH} levels deep") from None
        # Brackets bound the depth and colons the keys from above (strings may hold more): the
        # exact walk runs only for a document these cheap counts cannot clear.
        if text.count("{") + text.count("[") > MAX_DATA_DEPTH or text.count(":") > MAX_DATA_KEYS:
            problem = data_shape_problem(value)
            if problem is not None:
                raise ValueError(problem)
        if "\\u0000" in text and _has_nul(value):  # the text test is cheap; the walk is exact
            raise ValueError(_NUL)
        if size > MAX_DATA_BYTES:
            raise ValueError(f"is {size} bytes serialized; the limit is {MAX_DATA_BYTES}")
        return value

    @model_validator(mode="after")
    def _stable_id(self) -> SignalDraft:
        if self.dedup_key is not None:
            derived = derive_signal_id(self.delegate_id, self.source, self.dedup_key)
            if self.id is None:
                object.__setattr__(self, "id", derived)
            elif self.id != derived:
                raise ValueError(
                    "id must be derived from (delegate_id, source, dedup_key) when a dedup_key is "
                    "given; omit it"
                )
        return self

    @classmethod
    def parse(cls, raw: Any) -> SignalDraft:
        """Validate untrusted input; raise SignalError naming the first bad field."""
        if isinstance(raw, SignalDraft):
            return raw
        if not isinstance(raw, dict):
            raise SignalError("signal", f"must be a JSON object, not {type(raw).__name__}")
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            loc = ".".join(str(part) for part in first.get("loc", ())) or "signal"
            message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            if first.get("type") == "extra_forbidden":
                message = "is not a signal field"
            raise SignalError(loc, message) from None


class Signal(BaseModel):
    """A journaled signal, as read back from the journal."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    delegate_id: str
    kind: str
    source: str
    mode: Mode
    requested_mode: Mode | None = None
    priority: int
    data: dict[str, Any]
    trust: Trust
    dedup_key: str | None
    state: State
    attempts: int
    max_attempts: int
    last_error: str | None
    caused_by: uuid.UUID | None
    occurred_at: datetime
    created_at: datetime
    available_at: datetime
    expires_at: datetime | None
    updated_at: datetime
    claimed_by: uuid.UUID | None = None
    disposition: str | None = None
    disposition_reason: str | None = None
    settled_at: datetime | None = None
    # Its publish span (W3C traceparent) when traced: read with the row, so the activation that
    # claims it links to it without a query of its own; never part of the public form.
    traceparent: str | None = Field(default=None, exclude=True, repr=False)

    def public(self) -> dict[str, Any]:
        """JSON-ready form used by the CLI, the HTTP API and the activation records. Never fails
        on what the journal holds: data nested past pydantic's serialiser is copied by the
        json module, and past that too it is replaced by a note."""
        try:
            # warnings off: a row read as stored (journal.signals._to_signal) may hold a value
            # its field's type does not describe; it is shown as it is.
            return self.model_dump(mode="json", warnings=False)
        except (ValueError, RecursionError):
            dumped = self.model_dump(mode="json", exclude={"data"}, warnings=False)
            try:
                dumped["data"] = json.loads(json.dumps(self.data, default=str))
            except (ValueError, RecursionError):
                dumped["data"] = {UNREADABLE_DATA: "data nested too deep to serialise"}
            return dumped


def stored_signal(values: Mapping[str, Any]) -> Signal:
    """A journal row (by column name) as a Signal. A row the model refuses (a mode or trust no
    code writes, data that is not an object: written behind the model's back) is still returned,
    as stored, so that a list or a show never fails on it; :func:`stored_problem` names what is
    wrong with it."""
    fields = {name: value for name, value in values.items() if name != "seq"}
    try:
        return Signal.model_validate(fields)
    except ValidationError:
        for name, kind in (("mode", Mode), ("requested_mode", Mode), ("trust", Trust),
                           ("state", State)):  # fmt: skip
            if fields.get(name) is not None:
                with contextlib.suppress(ValueError, TypeError):
                    fields[name] = kind(fields[name])
        return Signal.model_construct(**fields)


def stored_problem(signal: Signal) -> str | None:
    """Why a journaled signal falls outside what the intake accepts (so the journal holds it only
    because something wrote it behind the model's back), or None. The lane quarantines such a
    signal alone instead of letting it stop the delegate's work."""
    typed: tuple[tuple[str, object, type], ...] = (
        ("mode", signal.mode, Mode),
        ("trust", signal.trust, Trust),
        ("state", signal.state, State),
        ("data", signal.data, dict),
    )
    for field, stored, expected in typed:
        if not isinstance(stored, expected):
            return f"{field} {str(stored)[:60]!r} is not a valid {field}"
    if KIND_RE.fullmatch(signal.kind) is None:
        return f"kind {signal.kind[:60]!r} is not a namespaced kind"
    for name, value in (("source", signal.source), ("delegate_id", signal.delegate_id)):
        if IDENTIFIER_RE.fullmatch(value) is None:
            return f"{name} {value[:60]!r} is not an identifier"
    for name, stamp in (
        ("occurred_at", signal.occurred_at),
        ("available_at", signal.available_at),
        ("expires_at", signal.expires_at),
    ):
        if stamp is not None and not within_window(stamp):
            return f"{name} {stamp.isoformat()} is outside 1970-01-01..9000-01-01 UTC"
    if UNREADABLE_DATA in signal.data:
        return f"data unreadable: {signal.data[UNREADABLE_DATA]}"
    problem = data_shape_problem(signal.data)
    return None if problem is None else f"data {problem}"


class PublishResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    deduplicated: bool
    kind: str
    source: str
    mode: Mode
    priority: int
    delegate_id: str
    trust: Trust = Trust.TRUSTED

    def public(self) -> dict[str, Any]:
        return {"id": str(self.id), "deduplicated": self.deduplicated}
