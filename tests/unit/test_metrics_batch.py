"""A batch's records count exactly as the same records one at a time (the recorder takes a
batch from ``logs.emit_many`` in one call); a kind's namespace label is always a known one or
``other``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.services.metrics import (
    BUILTIN_NAMESPACES,
    Recorder,
    _signal_key,
    namespaces_of,
)
from inner_plane.signals.kinds import KindPolicy, KindRegistry
from inner_plane.signals.model import Mode


def _recorder() -> Recorder:
    # Never flushes during the test: the increments stay in memory to be compared.
    return Recorder("redis://127.0.0.1:1/0", flush_s=3600)


@pytest.mark.parametrize("with_unhashable_kind", [False, True])
def test_a_batch_counts_what_its_records_count_one_by_one(with_unhashable_kind: bool) -> None:
    entries: list[tuple[str, dict[str, Any]]] = [
        ("published", {"kind": "external.ci.done", "source": "external.ci"}),
        ("published", {"kind": "external.ci.done", "source": "external.ci"}),
        ("deduplicated", {"kind": "external.ci.done", "source": "external.ci"}),
        ("published", {"kind": "task.completed", "source": "copilot"}),
        ("rejected", {"kind": None, "source": "external.ci"}),
        ("rejected", {"kind": 7, "source": None}),
        ("completed", {"source": "lane", "duration_ms": 1200}),
        ("started", {"source": "lane", "waited_ms": 30}),
        ("unrelated", {"kind": "a.b"}),
    ]
    if with_unhashable_kind:
        entries.append(("published", {"kind": ["not", "hashable"], "source": "external.ci"}))
    one_by_one, batched = _recorder(), _recorder()
    for event, fields in entries:
        one_by_one(event, fields)
    batched.observe_many(entries)
    assert dict(batched._pending) == dict(one_by_one._pending)
    assert batched._pending["signals_published|namespace=external|source=external.ci"] == 2


@given(kind=st.one_of(st.text(max_size=40), st.none(), st.integers()), source=st.text(max_size=20))
def test_any_kind_counts_under_a_known_namespace_or_other(kind: Any, source: str) -> None:
    key = _signal_key("rejected", kind, source, BUILTIN_NAMESPACES)
    namespace = key.split("|namespace=", 1)[1].split("|", 1)[0]
    assert namespace in BUILTIN_NAMESPACES | {"other"}


def test_the_kinds_files_namespaces_are_known() -> None:
    registry = KindRegistry()
    registry.register(KindPolicy("billing.overdue", Mode.WAKE, 50))
    assert namespaces_of(registry) == BUILTIN_NAMESPACES | {"billing"}
    assert {"memory", "task", "timer", "system", "external"} <= BUILTIN_NAMESPACES
