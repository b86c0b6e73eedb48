"""Sources: ``inner_plane.report_task`` for a Copilot task runner in another process."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.exceptions import Reject

from inner_plane import celery_bridge as names
from inner_plane.signals.model import SignalError
from inner_plane.sources.copilot import report_task
from workers.tasks.signals import RETRY, leaving_receipts


@shared_task(name=names.REPORT_TASK_TASK, acks_late=True, serializer="json", bind=True, **RETRY)
def report_copilot_task(
    self: Any,
    status: str,
    task_id: str,
    title: str,
    delegate_id: str = "default",
    detail: Any = None,
) -> dict[str, Any]:
    try:
        with leaving_receipts(self.request.id):
            return report_task(status, task_id, title, delegate_id, detail, via="celery").public()
    except SignalError as error:
        # Bad input never succeeds on retry: drop it (already logged as rejected).
        raise Reject(str(error), requeue=False) from None
