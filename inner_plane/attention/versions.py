"""The operator's actions on the attention policy, shared by the CLI and the operator API: show
the version in force, diff a candidate against it, apply one (validated first: a refused file
changes nothing), list the history, roll back to an earlier version. Every change records who
made it."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from inner_plane.attention.document import (
    AttentionPolicy,
    SettingsDefaults,
    parse_document,
    render_document,
    settings_policy,
)
from inner_plane.attention.live import policy_source, stored_policy
from inner_plane.journal import policy as journal
from inner_plane.runtime import Runtime


@dataclass(frozen=True)
class Shown:
    version: int | None
    applied_by: str | None
    applied_at: str | None
    document: str  # a file apply and simulate accept

    def public(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "applied_by": self.applied_by,
            "applied_at": self.applied_at,
            "document": self.document,
        }


def validate(runtime: Runtime, source: str | bytes) -> AttentionPolicy:
    """A candidate document as a policy; raises ``PolicyError`` naming each field and why."""
    base = SettingsDefaults.of(runtime.settings)
    document = parse_document(source, (k.kind for k in runtime.registry.kinds()), base)
    return AttentionPolicy.build(document, base)


def in_force(runtime: Runtime) -> AttentionPolicy:
    stored = journal.version_in_force(runtime.engine)
    base = SettingsDefaults.of(runtime.settings)
    if stored is None:
        return settings_policy(base)
    return stored_policy(stored.document, stored.version, base)


def show(runtime: Runtime) -> Shown:
    stored = journal.version_in_force(runtime.engine)
    policy = in_force(runtime)
    return Shown(
        version=policy.version,
        applied_by=None if stored is None else stored.applied_by,
        applied_at=None if stored is None else stored.applied_at.isoformat(),
        document=render_document(policy),
    )


def diff(runtime: Runtime, source: str | bytes) -> str:
    """A unified diff from the version in force to the candidate, both written out in full
    (so layout and omitted defaults make no difference); empty if they decide alike."""
    current = in_force(runtime)
    candidate = validate(runtime, source)
    before = render_document(current).splitlines(keepends=True)[1:]
    after = render_document(candidate).splitlines(keepends=True)[1:]
    label = "settings" if current.version is None else f"v{current.version}"
    return "".join(difflib.unified_diff(before, after, f"in force ({label})", "candidate"))


def apply(runtime: Runtime, source: str | bytes, applied_by: str) -> int:
    """Validate and put in force; returns the new version. Running workers pick it up within a
    few seconds (the lane at its next decision)."""
    validate(runtime, source)
    text = source.decode() if isinstance(source, bytes) else source
    version = journal.apply(runtime.engine, text, applied_by)
    policy_source(runtime).refresh()
    return version


def rollback(runtime: Runtime, version: int, applied_by: str) -> int | None:
    """Put ``version``'s document back in force as a new version; None if there is none."""
    new = journal.rollback(runtime.engine, version, applied_by)
    if new is not None:
        policy_source(runtime).refresh()
    return new


def history(runtime: Runtime, limit: int = 50) -> list[dict[str, Any]]:
    in_force_version = in_force(runtime).version
    return [
        {
            "version": v.version,
            "applied_by": v.applied_by,
            "applied_at": v.applied_at.isoformat(),
            "note": v.note,
            "in_force": v.version == in_force_version,
            "rules": len(stored_policy(v.document, v.version, _ANY_BASE).document.rules),
        }
        for v in journal.history(runtime.engine, limit)
    ]


# Counting a stored version's rules needs no settings.
_ANY_BASE = SettingsDefaults(0, 0, 1, 1)
