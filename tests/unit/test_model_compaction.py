"""A context too long for the model loses its oldest history first, in a fixed order, and the
parts that carry the activation's meaning are never dropped."""

from __future__ import annotations

from inner_plane.agent.model_calls import retry_after_s
from inner_plane.agent.tool_loop import Segment, compact


def _segments() -> list[Segment]:
    def item(section: str) -> Segment:
        return Segment([{"role": "developer", "content": section}], section)

    return [
        item("instructions"),
        item("standing_memory"),
        item("time"),
        item("recall"),
        item("ambient"),
        item("inner_context"),
        item("conversation"),
        item("conversation"),
        item("user"),
        Segment([{"type": "function_call"}, {"type": "function_call_output"}], "step", 0),
        Segment([{"type": "function_call"}, {"type": "function_call_output"}], "step", 1),
    ]


def test_drops_go_oldest_first_and_stop_at_what_must_stay() -> None:
    segments = _segments()
    order = []
    while (record := compact(segments, 2, "too long")) is not None:
        order.append([(d["section"], d["step"]) for d in record["dropped"]])
        assert record["kind"] == "dropped_oldest" and record["reason"] == "too long"
    assert order == [
        [("step", 0)],
        [("conversation", None)],
        [("conversation", None)],
        [("ambient", None)],
        [("recall", None)],
    ]
    kept = [s.section for s in segments]
    assert kept == ["instructions", "standing_memory", "time", "inner_context", "user", "step"]


def test_retry_after_forms() -> None:
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None
