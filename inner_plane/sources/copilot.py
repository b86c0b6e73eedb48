"""Copilot tasks source: a task runner reports completion, a question, or a failure.

Each report carries the task id, title and delegate. The kinds registry gives the dedup key
(``{task_id}:completed`` ...), so repeated reports of one task and status make one signal with
one id, and the priority: ``task.input_required`` (70) ranks above ``task.failed`` (65) and
``task.completed`` (50), because a blocked task waits on the delegate.
"""

from __future__ import annotations

from typing import Any, Literal

from inner_plane.publish import log_rejected, publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import PublishResult, SignalError, Trust

SOURCE = "copilot"
Status = Literal["completed", "input_required", "failed"]
KINDS: dict[str, str] = {
    "completed": "task.completed",
    "input_required": "task.input_required",
    "failed": "task.failed",
}
DETAIL_FIELD: dict[str, str] = {
    "completed": "result",
    "input_required": "question",
    "failed": "error",
}


def report_task(
    status: str,
    task_id: str,
    title: str,
    delegate_id: str = "default",
    detail: Any = None,
    *,
    trust: Trust = Trust.TRUSTED,
    runtime: Runtime | None = None,
    via: str = SOURCE,
) -> PublishResult:
    """Publish one task report; raise SignalError (nothing stored) on bad input.

    ``detail`` is the result, the question or the error, by status. ``trust`` defaults to
    trusted (the runner is ours); pass ``Trust.UNTRUSTED`` when the detail quotes outside text.
    """
    problem: SignalError | None = None
    if status not in KINDS:
        problem = SignalError("status", "must be completed, input_required or failed")
    elif not isinstance(task_id, str) or not 1 <= len(task_id) <= 200:
        problem = SignalError("data.task_id", "must be a string of 1 to 200 characters")
    elif not isinstance(title, str) or not title.strip():
        problem = SignalError("data.title", "must be a non-empty string")
    if problem is not None:
        log_rejected(
            {"kind": KINDS.get(status), "source": SOURCE, "delegate_id": delegate_id}, problem, via
        )
        raise problem
    data: dict[str, Any] = {"task_id": task_id, "title": title}
    if detail is not None:
        data[DETAIL_FIELD[status]] = detail
    return publish(
        {
            "kind": KINDS[status],
            "source": SOURCE,
            "delegate_id": delegate_id,
            "data": data,
            "trust": trust,
        },
        runtime=runtime,
        via=via,
    )


def report_task_completed(
    task_id: str,
    title: str,
    result: Any = None,
    delegate_id: str = "default",
    **options: Any,
) -> PublishResult:
    return report_task("completed", task_id, title, delegate_id, result, **options)


def report_input_required(
    task_id: str,
    title: str,
    question: str,
    delegate_id: str = "default",
    **options: Any,
) -> PublishResult:
    return report_task("input_required", task_id, title, delegate_id, question, **options)


def report_task_failed(
    task_id: str,
    title: str,
    error: str,
    delegate_id: str = "default",
    **options: Any,
) -> PublishResult:
    return report_task("failed", task_id, title, delegate_id, error, **options)
