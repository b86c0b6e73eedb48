"""The grant rules in-process (what the HTTP API and MCP share): refusals are logged once, with
the stable fields, and nothing is stored."""

from __future__ import annotations

import pytest

from inner_plane.runtime import Runtime
from inner_plane.signals.model import SignalError
from inner_plane.sources import grants, processors


def test_forbidden_and_rejected_are_logged_once_and_store_nothing(
    runtime: Runtime, context_log
) -> None:
    processor, _ = processors.add(runtime, "ci")
    with pytest.raises(grants.GrantError) as forbidden:
        grants.publish_for(runtime, processor, [{"kind": "external.other.x"}])
    assert forbidden.value.field == "kind"
    [line] = context_log.lines("forbidden")
    for part in ("kind=external.other.x", "source=external.ci", "field=kind", "delegate=default"):
        assert part in line

    with pytest.raises(SignalError) as rejected:
        grants.publish_for(runtime, processor, [{"kind": "external.ci.x", "id": "x"}])
    assert rejected.value.field == "id"
    with pytest.raises(SignalError):
        grants.publish_for(runtime, processor, [{"kind": "external.ci.x", "priority": -1}])
    assert len(context_log.lines("rejected")) == 2
    assert runtime.signals.count() == 0


def test_batch_limits(runtime: Runtime) -> None:
    processor, _ = processors.add(runtime, "ci")
    too_many = [{"kind": "external.ci.x"}] * (grants.MAX_BATCH + 1)
    with pytest.raises(SignalError) as error:
        grants.publish_for(runtime, processor, too_many, batch=True)
    assert error.value.field == "signals" and str(grants.MAX_BATCH) in error.value.reason
    assert runtime.signals.count() == 0
