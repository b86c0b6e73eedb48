"""What the channels make of text (pure): SMS segments fit one message each, in order, words
whole; HTML becomes text without scripts or remote images; quoted history and signatures are
trimmed; a reply's subject; which question a mail thread answers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hypothesis import example, given
from hypothesis import strategies as st

from inner_plane.activation import Disposition
from inner_plane.channels.mail_in import question_answered
from inner_plane.channels.mail_parse import clean_line, html_to_text, trimmed
from inner_plane.channels.replies import reply_subject
from inner_plane.journal.people.questions import Question
from inner_plane.outbound.channels import message_id
from inner_plane.outbound.deliver import disposition_key
from inner_plane.outbound.sms import GSM_LIMIT, UCS2_LIMIT, cost, is_gsm, segments


def test_a_short_text_is_one_message_as_it_is() -> None:
    assert segments("x" * 160) == ["x" * 160]
    assert segments("é" * 160) == ["é" * 160]  # é is in GSM-7
    assert len(segments("€" * 80)) == 1 and len(segments("€" * 81)) == 2  # € costs two septets
    assert segments("  ") == ["(no answer)"]


@example("0" * 48 + "\x1f" + "\U00010000" * 11)  # control characters str.split takes for spaces
@given(st.text(min_size=1, max_size=1500))
def test_every_segment_fits_one_sms_and_together_they_say_the_text(text: str) -> None:
    parts = segments(text, most=50)
    gsm = is_gsm(text.strip() or "x")
    limit = GSM_LIMIT if gsm else UCS2_LIMIT
    assert all(cost(part, gsm) <= limit for part in parts)
    if len(parts) > 1:
        assert [p.split(") ", 1)[0] for p in parts] == [
            f"({i}/{len(parts)}" for i in range(1, len(parts) + 1)
        ]
        said = "".join(p.split(") ", 1)[1] for p in parts)
        # The same words, whatever whitespace joins them (on both sides by one rule: str.split's,
        # which counts \x1c to \x1f as whitespace too).
        assert "".join(said.split()) == "".join(text.split())


def test_emoji_are_never_split_and_long_answers_are_cut_with_an_ellipsis() -> None:
    parts = segments("😀" * 100)
    assert all(cost(p, False) <= UCS2_LIMIT for p in parts)
    assert "".join(p.split(") ", 1)[1] for p in parts) == "😀" * 100
    cut = segments("word " * 2000, most=3)
    assert len(cut) == 3 and cut[-1].endswith("...")


def test_html_becomes_visible_text_only() -> None:
    said = html_to_text(
        "<p>Hi <b>there</b></p><script>alert(1)</script><style>p{}</style>"
        "<img src='http://tracker.test/p.gif'>&amp; &lt;b&gt;"
    )
    assert "alert" not in said and "tracker" not in said and "p{}" not in said
    assert "Hi" in said and "there" in said and "& <b>" in said


def test_quoted_history_and_signature_are_trimmed() -> None:
    body = "Yes, noon.\n\nOn Mon, 1 Dec 2026 at 09:00, Delegate <d@example.net> wrote:\n> Lunch?\n"
    assert trimmed(body) == "Yes, noon."
    assert trimmed("Thanks\n\n-- \nAda Lovelace\nAnalytical Engines").startswith("Thanks")
    assert "Analytical" not in trimmed("Thanks\n\n-- \nAda Lovelace\nAnalytical Engines")


def test_a_line_never_holds_control_or_format_characters() -> None:
    assert clean_line("a\r\nBcc: x\u202e\x00b", 100) == "a Bcc: x b"
    assert len(clean_line("y" * 1000, 300)) == 300


def test_a_reply_subject_has_one_re() -> None:
    assert reply_subject("Lunch?") == "Re: Lunch?"
    assert reply_subject("RE: Lunch?") == "RE: Lunch?"
    assert reply_subject("") == "Re: (no subject)"


def test_a_thread_answers_the_question_whose_mail_it_names() -> None:
    now = datetime.now(UTC)
    asked = [
        Question(uuid.uuid4(), "ada", uuid.uuid4(), None, "task.input_required", "Which?", now)
        for _ in range(3)
    ]
    mid = message_id(disposition_key(asked[1].signal_id, Disposition.NEEDS_INPUT), "example.net")
    assert question_answered(["<x@y>", mid], asked, ["example.net"]) == asked[1].id
    assert question_answered([mid], asked, ["other.test"]) is None
    assert question_answered(["<x@y>"], asked, ["example.net"]) is None
