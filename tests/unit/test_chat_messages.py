"""The Chat Completions adapter's role rule, over any sequence of context items: inner context
(system/developer items) only ever in system messages, the person's words only in user ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.agent.chat_completions import chat_messages

items = st.lists(
    st.tuples(
        st.sampled_from(["system", "developer", "user", "assistant"]),
        st.text(min_size=1, max_size=20),
    ),
    max_size=12,
).map(lambda pairs: [{"role": role, "content": f"{role}:{text}"} for role, text in pairs])


@given(items)
def test_inner_context_only_in_system_messages(source: list[dict[str, str]]) -> None:
    messages = chat_messages(source)
    assert {m["role"] for m in messages} <= {"system", "user", "assistant"}
    inner = [i["content"] for i in source if i["role"] in ("system", "developer")]
    system_text = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    assert all(text in system_text for text in inner)
    spoken = [(i["role"], i["content"]) for i in source if i["role"] in ("user", "assistant")]
    assert [(m["role"], m["content"]) for m in messages if m["role"] != "system"] == spoken
    for message in messages:
        if message["role"] == "user":
            assert message["content"].startswith("user:")
    leading = 0
    for item in source:
        if item["role"] not in ("system", "developer"):
            break
        leading += 1
    if leading:  # the leading ones joined into one system message
        joined = "\n\n".join(i["content"] for i in source[:leading])
        assert messages[0] == {"role": "system", "content": joined}
        assert len(messages) == len(source) - leading + 1
