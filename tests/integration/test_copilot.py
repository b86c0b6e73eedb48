"""Copilot task reports: deduplicated per task and status, input-required ranked above
completion, bad reports refused with nothing stored (the Celery task for a runner in another
process: tests/acceptance/test_copilot_worker.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode, SignalError, Trust
from inner_plane.sources.copilot import (
    report_input_required,
    report_task,
    report_task_completed,
    report_task_failed,
)


def test_completion_carries_task_id_title_delegate_and_result(runtime: Runtime) -> None:
    result = report_task_completed("T-1", "Book flights", {"pnr": "XYZ"}, delegate_id="ana")
    stored = runtime.signals.get(result.id)
    assert stored is not None
    assert (stored.kind, stored.source, stored.delegate_id) == ("task.completed", "copilot", "ana")
    assert stored.data == {"task_id": "T-1", "title": "Book flights", "result": {"pnr": "XYZ"}}
    assert stored.dedup_key == "T-1:completed" and stored.trust is Trust.TRUSTED
    assert stored.mode is Mode.WAKE


def test_repeated_reports_of_one_task_and_status_make_one_signal(runtime: Runtime) -> None:
    first = report_task_completed("T-2", "Summarise inbox", "done")
    again = report_task_completed("T-2", "Summarise inbox", "done (resent)")
    asked = report_input_required("T-2", "Summarise inbox", "Which folder?")
    asked_again = report_input_required("T-2", "Summarise inbox", "Which folder?")
    failed = report_task_failed("T-2", "Summarise inbox", "timeout")
    assert again.id == first.id and again.deduplicated
    assert asked_again.id == asked.id and asked_again.deduplicated
    assert len({first.id, asked.id, failed.id}) == 3
    assert runtime.signals.count() == 3


def test_input_required_ranks_above_failure_and_completion(runtime: Runtime) -> None:
    done = report_task_completed("T-3", "Draft reply", "sent")
    failed = report_task_failed("T-4", "Renew domain", "card declined")
    asked = report_input_required("T-5", "Plan trip", "Which dates?")
    with runtime.engine.connect() as connection:
        order = [
            row[0]
            for row in connection.execute(
                text(
                    "SELECT id FROM signals WHERE state = 'pending' "
                    "ORDER BY priority DESC, seq"  # the claim order of the attention broker
                )
            )
        ]
    assert order == [asked.id, failed.id, done.id]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: report_task("finished", "T", "x"), "status"),
        (lambda: report_task_completed("", "x"), "data.task_id"),
        (lambda: report_task_completed("T", "   "), "data.title"),
        (lambda: report_task_completed("T", "x", delegate_id="no spaces"), "delegate_id"),
    ],
    ids=["status", "task-id", "title", "delegate"],
)
def test_bad_reports_raise_naming_the_field_and_store_nothing(
    runtime: Runtime, call: object, field: str
) -> None:
    with pytest.raises(SignalError) as error:
        call()  # type: ignore[operator]
    assert error.value.field == field
    assert runtime.signals.count() == 0
