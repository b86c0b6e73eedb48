"""[inner-context] lines: stable fields first, logfmt quoting, JSON form."""

from __future__ import annotations

import io
import json
import shlex
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from inner_plane import logs
from inner_plane.signals.model import Mode


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    saved = (logs._stream, logs._format)
    out = io.StringIO()
    logs.configure(log_format="logfmt", stream=out)
    yield out
    logs._stream, logs._format = saved


SIGNAL_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def emit_sample(**extra: object) -> None:
    logs.emit(
        "published",
        delegate="default",
        priority=40,
        mode=Mode.WAKE,
        source="memory",
        kind="memory.consolidated",
        id=SIGNAL_ID,
        **extra,
    )


def test_logfmt_line_starts_with_the_tag_and_keeps_stable_order(stream: io.StringIO) -> None:
    emit_sample(via="celery")
    assert stream.getvalue() == (
        "[inner-context] event=published id=12345678-1234-5678-1234-567812345678 "
        "kind=memory.consolidated source=memory mode=wake priority=40 delegate=default "
        "via=celery\n"
    )


def test_one_line_per_event(stream: io.StringIO) -> None:
    emit_sample(reason="line one\nline two")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert 'reason="line one\\nline two"' in lines[0]


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("plain", "plain"),
        ("two words", '"two words"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a=b", '"a=b"'),
        ("back\\slash", '"back\\\\slash"'),
        ("", '""'),
        (None, ""),
        (7, "7"),
        (["a", "b"], "a,b"),
        ("naïve", "naïve"),
    ],
)
def test_logfmt_quoting(stream: io.StringIO, value: object, rendered: str) -> None:
    logs.emit("rejected", reason=value)
    assert stream.getvalue() == f"[inner-context] event=rejected reason={rendered}\n"


def test_logfmt_values_split_back_into_fields(stream: io.StringIO) -> None:
    emit_sample(reason='data: is 70000 bytes "serialized"; the limit is 65536')
    body = stream.getvalue().removeprefix("[inner-context] ").strip()
    fields = dict(part.split("=", 1) for part in shlex.split(body))
    assert fields["reason"] == 'data: is 70000 bytes "serialized"; the limit is 65536'
    assert fields["kind"] == "memory.consolidated"


def test_json_format_has_every_field(stream: io.StringIO) -> None:
    logs.configure(log_format="json")
    when = datetime(2026, 1, 1, tzinfo=UTC)
    emit_sample(reason='a "quoted" reason', at=when)
    record = json.loads(stream.getvalue())
    assert record == {
        "log": "inner-context",
        "event": "published",
        "id": str(SIGNAL_ID),
        "kind": "memory.consolidated",
        "source": "memory",
        "mode": "wake",
        "priority": 40,
        "delegate": "default",
        "reason": 'a "quoted" reason',
        "at": "2026-01-01T00:00:00+00:00",
    }
    assert list(record)[:8] == ["log", *logs.STABLE_FIELDS]


def test_emit_returns_the_ordered_fields(stream: io.StringIO) -> None:
    fields = logs.emit("deduplicated", source="s", id=SIGNAL_ID, extra=1)
    assert list(fields) == ["event", "id", "source", "extra"]
    assert fields["id"] == str(SIGNAL_ID)


def test_format_line_is_pure() -> None:
    assert logs.format_line({"event": "x", "kind": "a.b"}, "logfmt") == (
        "[inner-context] event=x kind=a.b"
    )
    assert json.loads(logs.format_line({"event": "x"}, "json")) == {
        "log": "inner-context",
        "event": "x",
    }
