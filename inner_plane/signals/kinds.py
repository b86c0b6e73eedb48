"""Kinds policy: the defaults each signal kind brings, and the rules no publisher can override.

A deployment adds kinds with :func:`KindRegistry.register` or a TOML file
(``INNER_PLANE_KINDS_FILE``) holding ``[kinds."external.ci.finished"]`` tables.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from inner_plane.signals.model import KIND_RE, Mode, SignalDraft


@dataclass(frozen=True)
class KindPolicy:
    kind: str
    mode: Mode = Mode.NEXT_TURN
    priority: int = 50
    max_attempts: int = 5
    ambient_ttl_s: int = 7 * 86_400
    interrupt_permitted: bool = False
    # Some kinds must never start a run whatever the publisher asks (memory.inserted).
    forced_mode: Mode | None = None
    # Template for a dedup key built from data fields, e.g. "{task_id}:{status}".
    dedup_key_template: str | None = None


@dataclass(frozen=True)
class Resolution:
    """The effective mode/priority of one draft, and whether the kind's rules changed it."""

    mode: Mode
    requested_mode: Mode | None
    priority: int
    max_attempts: int
    expires_at: datetime | None
    dedup_key: str | None
    downgraded: bool
    policy: KindPolicy


BUILTIN_KINDS: tuple[KindPolicy, ...] = (
    # Brand-new memories never wake the agent: that would loop extraction into activation.
    KindPolicy("memory.inserted", Mode.AMBIENT, 10, forced_mode=Mode.AMBIENT),
    KindPolicy("memory.consolidated", Mode.WAKE, 40),
    KindPolicy("memory.conflict", Mode.WAKE, 60),
    KindPolicy("memory.override", Mode.WAKE, 55),
    KindPolicy("memory.recalled", Mode.AMBIENT, 10),
    KindPolicy("task.completed", Mode.WAKE, 50, dedup_key_template="{task_id}:completed"),
    KindPolicy("task.input_required", Mode.WAKE, 70, dedup_key_template="{task_id}:input_required"),
    KindPolicy("task.failed", Mode.WAKE, 65, dedup_key_template="{task_id}:failed"),
    KindPolicy("timer.due", Mode.WAKE, 50, dedup_key_template="timer:{timer}:{scheduled_for}"),
    KindPolicy("system.alert", Mode.INTERRUPT, 95, interrupt_permitted=True),
    # A stranger's mail to the delegate's mailbox (docs/channels.md): untrusted, never wakes.
    KindPolicy("email.received", Mode.AMBIENT, 20, forced_mode=Mode.AMBIENT),
)


def settle(
    policy: KindPolicy,
    requested: Mode | None,
    priority: int | None,
    expires_at: datetime | None,
    now: datetime,
) -> tuple[Mode, int, datetime | None, bool]:
    """The effective (mode, priority, expires_at) the policy gives a signal, and whether the
    requested interrupt was downgraded to a wake."""
    mode = requested or policy.mode
    downgraded = False
    if policy.forced_mode is not None:
        mode = policy.forced_mode
    elif mode is Mode.INTERRUPT and not policy.interrupt_permitted:
        mode = Mode.WAKE
        downgraded = True
    if expires_at is None and mode is Mode.AMBIENT:
        expires_at = now + timedelta(seconds=policy.ambient_ttl_s)
    return mode, policy.priority if priority is None else priority, expires_at, downgraded


_UNKNOWN_CACHE = 1024


class KindRegistry:
    def __init__(self, policies: tuple[KindPolicy, ...] = BUILTIN_KINDS) -> None:
        self._policies: dict[str, KindPolicy] = {p.kind: p for p in policies}
        # The policies given to unknown kinds, built once per (kind, mode) rather than once per
        # signal (policies are frozen, so sharing them is safe); bounded, as any kind is accepted.
        self._unknown: dict[tuple[str, Mode], KindPolicy] = {}

    def register(self, policy: KindPolicy) -> None:
        if KIND_RE.fullmatch(policy.kind) is None:
            raise ValueError(f"kind {policy.kind!r} is not namespaced")
        if not 0 <= policy.priority <= 100:
            raise ValueError(f"kind {policy.kind!r}: priority must be 0..100")
        if policy.max_attempts < 1:
            raise ValueError(f"kind {policy.kind!r}: max_attempts must be at least 1")
        self._policies[policy.kind] = policy

    def get(self, kind: str) -> KindPolicy | None:
        return self._policies.get(kind)

    def policy_for(self, kind: str, requested: Mode | None = None) -> KindPolicy:
        known = self._policies.get(kind)
        if known is not None:
            return known
        # Unknown kinds are accepted: the mode given, else next-turn.
        key = (kind, requested or Mode.NEXT_TURN)
        policy = self._unknown.get(key)
        if policy is None:
            if len(self._unknown) >= _UNKNOWN_CACHE:
                self._unknown.clear()
            policy = self._unknown[key] = KindPolicy(*key)
        return policy

    def kinds(self) -> list[KindPolicy]:
        return sorted(self._policies.values(), key=lambda p: p.kind)

    def resolve(self, draft: SignalDraft, now: datetime) -> Resolution:
        policy = self.policy_for(draft.kind, draft.mode)
        mode, priority, expires_at, downgraded = settle(
            policy, draft.mode, draft.priority, draft.expires_at, now
        )
        return Resolution(
            mode=mode,
            requested_mode=draft.mode,
            priority=priority,
            max_attempts=policy.max_attempts,
            expires_at=expires_at,
            dedup_key=draft.dedup_key,
            downgraded=downgraded,
            policy=policy,
        )

    def load_file(self, path: Path) -> None:
        """Add kinds from a TOML file; raise ValueError naming the kind and field on bad entries."""
        try:
            document = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ValueError(f"{path}: {error}") from None
        for kind, table in document.get("kinds", {}).items():
            self.register(_policy_from_table(kind, table))


_FIELD_TYPES: dict[str, type] = {
    "priority": int,
    "max_attempts": int,
    "ambient_ttl_s": int,
    "interrupt_permitted": bool,
    "dedup_key_template": str,
}


def _policy_from_table(kind: str, table: dict[str, Any]) -> KindPolicy:
    allowed = {*_FIELD_TYPES, "mode", "forced_mode"}
    unknown = set(table) - allowed
    if unknown:
        raise ValueError(f"kind {kind!r}: unknown field(s) {sorted(unknown)}")
    values: dict[str, Any] = dict(table)
    for field, expected in _FIELD_TYPES.items():
        value = values.get(field)
        # bool is an int in Python: refuse it where a number is meant, and vice versa.
        if field in values and (
            not isinstance(value, expected) or (expected is int and isinstance(value, bool))
        ):
            raise ValueError(f"kind {kind!r}: {field} must be {expected.__name__}, not {value!r}")
    if values.get("ambient_ttl_s", 1) < 1:
        raise ValueError(f"kind {kind!r}: ambient_ttl_s must be at least 1")
    for field in ("mode", "forced_mode"):
        if field in values:
            try:
                values[field] = Mode(values[field])
            except ValueError:
                raise ValueError(
                    f"kind {kind!r}: {field} {values[field]!r} is not a mode"
                ) from None
    return replace(KindPolicy(kind), **values)


_default: KindRegistry | None = None


def default_registry() -> KindRegistry:
    """The process-wide registry: built-ins plus INNER_PLANE_KINDS_FILE, if set."""
    global _default
    if _default is None:
        from inner_plane.config import load_settings

        registry = KindRegistry()
        kinds_file = load_settings().kinds_file
        if kinds_file is not None:
            registry.load_file(kinds_file)
        _default = registry
    return _default
