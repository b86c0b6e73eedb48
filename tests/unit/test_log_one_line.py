"""One record, one line: whatever text a field holds, an [inner-context] line is exactly one line
(by every line-splitting rule: str.splitlines, which also splits on U+0085, U+2028, U+2029, FS,
GS, RS, VT and FF) and parses back to the same values, in logfmt and in JSON."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inner_plane import logs
from inner_plane.signals.model import Mode, Trust

# Every code point, lone surrogates included, with the troublesome ones drawn often.
TROUBLE = '\r\n\x00\x1b\x0b\x0c\x1c\x1d\x1e\x7f\x85\x9b\u2028\u2029\ud800\udfff "=\\'
any_text = st.text(alphabet=st.characters(codec=None) | st.sampled_from(TROUBLE), max_size=40)
FORMATS = ("logfmt", "json")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    saved = (logs._stream, logs._format)
    out = io.StringIO()
    logs.configure(stream=out)
    yield out
    logs._stream, logs._format = saved


def _records(text: str, log_format: str) -> list[dict[str, object]]:
    lines = text.splitlines()
    assert text.endswith("\n") and "\r" not in text
    if log_format == "json":
        return [json.loads(line) for line in lines]
    return [dict(logs.parse_logfmt(line)) for line in lines]


@contextmanager
def captured(log_format: str) -> Iterator[io.StringIO]:
    saved = (logs._stream, logs._format)
    out = io.StringIO()
    logs.configure(log_format=log_format, stream=out)
    try:
        yield out
    finally:
        logs._stream, logs._format = saved


@settings(max_examples=300, deadline=None)
@given(
    log_format=st.sampled_from(FORMATS),
    event=any_text.filter(bool),
    fields=st.dictionaries(st.sampled_from(("id", "kind", "source", "reason", "x")), any_text),
)
def test_any_text_in_any_field_is_one_line_that_parses_back(
    log_format: str, event: str, fields: dict[str, str]
) -> None:
    with captured(log_format) as stream:
        logs.emit(event, **fields)
    written = stream.getvalue()
    assert len(written.splitlines()) == 1, written
    written.encode("utf-8")  # writable to any UTF-8 stream: no lone surrogate left raw
    [record] = _records(written, log_format)
    assert record["event"] == event
    for key, value in fields.items():
        assert record[key] == value


@settings(max_examples=150, deadline=None)
@given(
    log_format=st.sampled_from(FORMATS),
    values=st.lists(any_text, min_size=1, max_size=8),
)
def test_a_batch_is_one_line_per_record(log_format: str, values: list[str]) -> None:
    with captured(log_format) as stream:
        logs.emit_many([("published", {"kind": "a.b", "reason": value}) for value in values])
    records = _records(stream.getvalue(), log_format)
    assert [r["reason"] for r in records] == values


@pytest.mark.parametrize("log_format", FORMATS)
def test_a_forged_published_line_stays_inside_its_field(
    stream: io.StringIO, log_format: str
) -> None:
    forged = "x\r[inner-context] event=published id=1 kind=a.b trust=trusted\u2028\x85"
    logs.configure(log_format=log_format)
    logs.emit("rejected", reason=forged)
    [line] = stream.getvalue().splitlines()
    assert "\r" not in line and "\u2028" not in line and "\x85" not in line
    [record] = _records(stream.getvalue(), log_format)
    assert record["event"] == "rejected" and record["reason"] == forged


def test_list_values_are_escaped_too(stream: io.StringIO) -> None:
    logs.configure(log_format="logfmt")
    logs.emit("rejected", labels=["a\nb", "c"])
    [line] = stream.getvalue().splitlines()
    assert logs.parse_logfmt(line)["labels"] == "a\nb,c"


@pytest.mark.parametrize(
    "line",
    ["no tag", "[inner-context] novalue", '[inner-context] a="open', '[inner-context] a="x"b'],
)
def test_the_parser_refuses_what_the_writer_never_writes(line: str) -> None:
    with pytest.raises(ValueError):
        logs.parse_logfmt(line)


# Values that are equal yet print differently (True == 1, 0.0 == -0.0), enums, UUIDs and odd text:
# a batch's lines, whose texts are shared between records, must be exactly what emit() writes.
any_value = st.one_of(
    any_text,
    st.sampled_from([True, False, 0, 1, 0.0, -0.0, 1.0, None, Mode.WAKE, Trust.TRUSTED]),
    st.uuids(),
    st.integers(),
)


@settings(max_examples=200, deadline=None)
@given(
    log_format=st.sampled_from(FORMATS),
    records=st.lists(
        st.tuples(
            st.sampled_from(["published", "deduplicated", "x y"]),
            st.one_of(st.uuids(), any_value),
            st.dictionaries(
                st.sampled_from(("kind", "source", "mode", "priority", "via", "z")),
                any_value,
                max_size=5,
            ),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_a_batch_writes_what_one_emit_per_record_writes(
    log_format: str, records: list[tuple[str, object, dict[str, object]]]
) -> None:
    entries = [(event, {"id": ident, **fields}) for event, ident, fields in records]
    with captured(log_format) as one_by_one:
        for event, fields in entries:
            logs.emit(event, **fields)
    with captured(log_format) as batched:
        logs.emit_many(entries)
    assert batched.getvalue() == one_by_one.getvalue()


@pytest.mark.parametrize("log_format", FORMATS)
@pytest.mark.parametrize("pair", [(0.0, -0.0), (True, 1), (1, 1.0), (Mode.WAKE, "wake")])
def test_equal_values_that_print_differently_keep_their_own_text(
    log_format: str, pair: tuple[object, object]
) -> None:
    entries = [
        ("published", {"id": uuid.uuid4(), "kind": "a.b", "priority": value}) for value in pair
    ]
    with captured(log_format) as one_by_one:
        for event, fields in entries:
            logs.emit(event, **fields)
    with captured(log_format) as batched:
        logs.emit_many(entries)
    assert batched.getvalue() == one_by_one.getvalue()


def test_the_memo_of_line_texts_kept_between_batches_is_bounded() -> None:
    # Lines differing beyond their id are remembered from batch to batch, up to a bound: a
    # flood of distinct lines empties the memo and every line is still written as emit writes it.
    entries = [
        ("published", {"id": uuid.uuid4(), "kind": "a.b", "delegate": f"d{n}"})
        for n in range(logs._MEMO_LIMIT + 10)
    ]
    with captured("logfmt") as one_by_one:
        for event, fields in entries[-20:]:
            logs.emit(event, **fields)
    with captured("logfmt") as batched:
        logs.emit_many(entries)
        logs.emit_many(entries[-20:])
    written = batched.getvalue().splitlines()
    assert len(written) == len(entries) + 20
    assert "\n".join(written[-20:]) + "\n" == one_by_one.getvalue()
    assert len(logs._around_id) <= logs._MEMO_LIMIT
