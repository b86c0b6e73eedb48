"""The inner signal: what a subprocessor reports, validated before anything is stored."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

MAX_DATA_BYTES = 64 * 1024
KIND_RE = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+$")
IDENTIFIER_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_DEDUP_KEY = 512

# Fixed namespace: ids derived from (delegate, source, dedup_key) are the same on every machine.
SIGNAL_ID_NAMESPACE = uuid.UUID("6f1c5d1e-3b0a-4e0e-9a55-2d7f3c1b9e41")


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
    if not KIND_RE.match(value):
        raise ValueError(
            "must be a namespaced kind: at least two dot-separated segments of "
            "[a-z][a-z0-9_-]*, for example 'task.completed'"
        )
    if len(value) > 128:
        raise ValueError("must be at most 128 characters")
    return value


def _identifier(value: str) -> str:
    if not IDENTIFIER_RE.match(value):
        raise ValueError(
            f"must be 1 to 128 characters of letters, digits and '._:-' (got {value[:40]!r})"
        )
    return value


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


_NAMESPACE_BYTES = SIGNAL_ID_NAMESPACE.bytes
# uuid5's version and variant bits, applied to the 128-bit integer directly.
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID5_SET = (5 << 76) | (0x8000 << 48)


def derive_signal_id(delegate_id: str, source: str, dedup_key: str) -> uuid.UUID:
    """Stable id for a deduplicated signal: a re-sent callback gets the same id everywhere.

    Exactly ``uuid.uuid5(SIGNAL_ID_NAMESPACE, "delegate/source/dedup_key")``, in half the time
    (it runs for every signal with a dedup key)."""
    digest = hashlib.sha1(_NAMESPACE_BYTES + f"{delegate_id}/{source}/{dedup_key}".encode())
    number = int.from_bytes(digest.digest()[:16])
    return uuid.UUID(int=(number & _UUID5_CLEAR) | _UUID5_SET)


def _aware(name: str) -> AfterValidator:
    """Refuses a naive timestamp; bound to the field only when it is given (not for None)."""

    def check(value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware (add an offset such as +00:00)")
        return value

    return AfterValidator(check)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(_NUL)
    return value


DedupKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_DEDUP_KEY), AfterValidator(_no_nul)
]


class SignalDraft(BaseModel):
    """What a publisher sends. Mode and priority may be left to the kind's policy."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    kind: Kind
    source: Identifier
    delegate_id: Identifier = "default"
    mode: Mode | None = None
    priority: int | None = Field(default=None, ge=0, le=100)
    data: dict[str, Any] = Field(default_factory=dict)
    trust: Trust = Trust.TRUSTED
    dedup_key: DedupKey | None = None
    id: uuid.UUID | None = None
    occurred_at: Annotated[datetime, _aware("occurred_at")] | None = None
    available_at: Annotated[datetime, _aware("available_at")] | None = None
    expires_at: Annotated[datetime, _aware("expires_at")] | None = None
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
            # allow_nan=False: NaN and Infinity are not JSON, and PostgreSQL's jsonb refuses them.
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            size = len(text.encode())
        except (TypeError, ValueError) as error:
            raise ValueError(f"must be JSON-serialisable ({error})") from None
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

    def public(self) -> dict[str, Any]:
        """JSON-ready form used by the CLI and the HTTP API."""
        return self.model_dump(mode="json")


class PublishResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    deduplicated: bool
    kind: str
    source: str
    mode: Mode
    priority: int
    delegate_id: str

    def public(self) -> dict[str, Any]:
        return {"id": str(self.id), "deduplicated": self.deduplicated}
