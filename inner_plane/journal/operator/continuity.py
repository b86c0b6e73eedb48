"""The operator's view of a delegate's continuity: its context window's state (never its items:
they are opaque and may be large), its token usage of the last days, and every version of its
continuity capsule with what changed from the version before."""

from __future__ import annotations

import difflib
from typing import Any

from sqlalchemy import Engine

from inner_plane.journal.conversation import capsule, usage, window
from inner_plane.journal.database import reading


def continuity(engine: Engine, delegate_id: str, days: int = 14) -> dict[str, Any]:
    with reading(engine) as connection:
        state = window.describe(connection, delegate_id)
        daily = usage.recent_days(connection, delegate_id, days)
        versions = capsule.versions(connection, delegate_id)
    shown: list[dict[str, Any]] = []
    for index, version in enumerate(versions):
        before = versions[index + 1]["text"] if index + 1 < len(versions) else ""
        diff = difflib.unified_diff(
            before.splitlines(),
            version["text"].splitlines(),
            f"version {version['version'] - 1}",
            f"version {version['version']}",
            lineterm="",
        )
        shown.append({**version, "diff": "\n".join(diff)})
    return {
        "delegate_id": delegate_id,
        "window": state,
        "usage_by_day": daily,
        "capsule_versions": shown,
    }
