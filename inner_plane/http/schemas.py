"""Request and response shapes of the HTTP API, as documented in its OpenAPI document.

The request models document the wire format; the signal itself is validated by the one
validator every publisher shares (``SignalDraft`` via ``inner_plane.publish.validate``), so the
API cannot drift from what the journal accepts.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from inner_plane.signals.model import IDENTIFIER_PATTERN, KIND_PATTERN, MAX_DEDUP_KEY, Mode, Trust
from inner_plane.sources.grants import MAX_BATCH


class ExternalSignal(BaseModel):
    """One signal from an external processor."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(
        pattern=KIND_PATTERN,
        max_length=128,
        description="external.<processor>.<event>; must start with the processor's prefix",
    )
    source: str | None = Field(
        default=None,
        pattern=IDENTIFIER_PATTERN,
        description="Omit it: always external.<processor> (anything else is 403)",
    )
    delegate_id: str = Field(
        default="default", pattern=IDENTIFIER_PATTERN, description="One of the granted delegates"
    )
    mode: Mode | None = Field(
        default=None, description="Requested awareness mode, at most the processor's highest mode"
    )
    priority: int | None = Field(default=None, ge=0, le=100)
    data: dict[str, Any] = Field(
        default_factory=dict, description="JSON object, at most 64 KiB serialized"
    )
    trust: Trust | None = Field(
        default=None,
        description="Defaults to the processor's level; an untrusted processor cannot send trusted",
    )
    dedup_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DEDUP_KEY,
        description="Repeats with the same key make one signal (Idempotency-Key sets it)",
    )
    occurred_at: datetime | None = Field(default=None, description="With a UTC offset")
    available_at: datetime | None = Field(default=None, description="Not before (with offset)")
    expires_at: datetime | None = Field(default=None, description="Drop after (with offset)")


class SignalBatch(BaseModel):
    """Several signals, journaled all or nothing."""

    model_config = ConfigDict(extra="forbid")

    signals: list[ExternalSignal] = Field(min_length=1, max_length=MAX_BATCH)


class PublishedSignal(BaseModel):
    id: uuid.UUID
    deduplicated: bool = Field(description="True if an earlier identical publication stands")
    kind: str
    delegate_id: str
    mode: Mode = Field(description="Effective mode after the kind's policy and the grant")
    priority: int
    trust: Trust


class PublishedBatch(BaseModel):
    signals: list[PublishedSignal]


class Health(BaseModel):
    status: str
    journal: str
