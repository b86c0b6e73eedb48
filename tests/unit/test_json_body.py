"""A request body read as JSON (``inner_plane.http.json_body``): a document, or one short
reason; never another error, whatever the bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.http.json_body import NotJson, json_document


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "Expecting property name enclosed in double quotes"),
        (b"", "Expecting value"),
        (b'{"n": NaN}', "NaN is not valid JSON"),
        (b"[Infinity]", "Infinity is not valid JSON"),
        (b"-Infinity", "-Infinity is not valid JSON"),
        (b'{"text": "\xff"}', "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_a_body_that_is_not_json_says_why(body: bytes, reason: str) -> None:
    with pytest.raises(NotJson) as refused:
        json_document(body)
    assert refused.value.reason == reason


def test_json_in_utf_16_is_read_as_json_loads_reads_it() -> None:
    assert json_document('{"kind": "a.b"}'.encode("utf-16")) == {"kind": "a.b"}


@given(st.binary(max_size=300))
def test_any_bytes_give_a_document_or_a_short_reason(body: bytes) -> None:
    try:
        document = json_document(body)
    except NotJson as refused:
        assert refused.reason and len(refused.reason) <= 200
    else:
        assert document == json.loads(body)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_every_json_document_reads_back_as_itself(document: object) -> None:
    assert json_document(json.dumps(document).encode()) == document
