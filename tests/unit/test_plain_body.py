"""The HTTP intake's shortcut: a body that ``plain_text`` clears parses to strings PostgreSQL can
store (no NUL, no lone surrogate), so the per-string walk may be skipped for it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.activation.storable import first_unstorable
from inner_plane.http.app import plain_text

ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
DOCUMENTS = st.dictionaries(ANY_TEXT, ANY_TEXT | st.lists(ANY_TEXT, max_size=3), max_size=4)


@given(DOCUMENTS, st.sampled_from(["escaped", "utf-8", "utf-16", "utf-32"]))
def test_a_cleared_body_holds_no_unstorable_string(document: dict[str, object], form: str) -> None:
    if form == "escaped":
        body = json.dumps(document).encode()
    else:
        text = json.dumps(document, ensure_ascii=False)
        body = text.encode(form, "surrogatepass")
    if plain_text(body):
        assert first_unstorable(json.loads(body)) is None


def test_the_shortcut_refuses_each_way_in() -> None:
    assert not plain_text(b'{"kind": "a\\u0000"}')
    assert not plain_text('{"kind": "\ud800"}'.encode("utf-8", "surrogatepass"))
    assert not plain_text('{"kind": "\ud800"}'.encode("utf-16", "surrogatepass"))
    assert plain_text('{"kind": "caf\u00e9"}'.encode())
