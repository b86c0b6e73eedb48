"""Beat wiring: the periodic work Celery Beat runs (timer tick, sweeper, retention)."""

from __future__ import annotations

from typing import Any

from inner_plane.config import Settings


def celery_beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """The ``beat_schedule`` of the Celery app."""
    return {}
