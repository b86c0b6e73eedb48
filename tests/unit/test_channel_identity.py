"""Who wrote a mail or a text (pure): strangers never become the person: not by a look-alike
From, several From addresses, a Sender or Resent-From, a forged Authentication-Results, an
unaligned pass, or a replayed old mail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.channels.identity import Sender, aligned, mail_sender, phone_owner

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
DATE = format_datetime(NOW - timedelta(minutes=5))
PERSON = ("ada@example.org", "ada.work@corp.example")
PROVIDER = "mx.example.net"


def verdict(sender: Sender, strict: bool = False, dkim: tuple[str, ...] = ()) -> tuple[bool, str]:
    result = mail_sender(
        sender,
        PERSON,
        require_authenticated=strict,
        authserv_ids=(PROVIDER,),
        dkim_domains=dkim,
        now=NOW,
        max_age=timedelta(days=7),
    )
    return result.person, result.reason


def test_the_persons_own_address_is_the_person_in_any_case() -> None:
    assert verdict(Sender(("Ada <ADA@Example.ORG>",), date=DATE))[0]
    assert verdict(Sender(("ada.work@corp.example",), date=DATE))[0]


def test_strangers_and_look_alikes_are_strangers() -> None:
    for header in (
        "eve@example.org",
        "ada@example.org.evil.test",
        '"ada@example.org" <eve@evil.test>',
        "ada@example.org, eve@evil.test",
        "",
        "not an address",
        "ada@example.org@evil.test",
    ):
        assert not verdict(Sender((header,), date=DATE))[0], header


def test_two_from_headers_sender_and_resent_are_strangers() -> None:
    assert not verdict(Sender(("ada@example.org", "ada@example.org"), date=DATE))[0]
    assert not verdict(Sender(("ada@example.org",), sender=("list@lists.test",), date=DATE))[0]
    assert verdict(Sender(("ada@example.org",), sender=("ada@example.org",), date=DATE))[0]
    person, reason = verdict(
        Sender(("ada@example.org",), resent_from=("eve@evil.test",), date=DATE)
    )
    assert not person and "Resent-From" in reason


def test_an_old_or_future_date_is_a_replay() -> None:
    old = format_datetime(NOW - timedelta(days=30))
    ahead = format_datetime(NOW + timedelta(days=1))
    assert verdict(Sender(("ada@example.org",), date=old)) == (False, "Date too old (a replay?)")
    assert not verdict(Sender(("ada@example.org",), date=ahead))[0]
    assert not verdict(Sender(("ada@example.org",), date="yesterday-ish"))[0]
    assert not verdict(Sender(("ada@example.org",)))[0]


def test_authentication_needs_the_providers_topmost_aligned_pass() -> None:
    def strict(*results: str) -> tuple[bool, str]:
        return verdict(
            Sender(("ada@example.org",), authentication_results=results, date=DATE), True
        )

    assert strict(f"{PROVIDER}; dkim=pass header.d=example.org")[0]
    assert strict(f"{PROVIDER}; spf=pass smtp.mailfrom=bounce@mail.example.org")[0]
    # No header, a forged one below the provider's, someone else's on top, unaligned, failed.
    assert not strict()[0]
    assert not strict(
        f"{PROVIDER}; dkim=fail header.d=example.org", f"{PROVIDER}; dkim=pass header.d=example.org"
    )[0]
    assert not strict("evil.test; dkim=pass header.d=example.org")[0]
    assert not strict(f"{PROVIDER}; dkim=pass header.d=evil.test")[0]
    assert not strict(f"{PROVIDER}; spf=pass smtp.mailfrom=x@evil.test")[0]
    assert not strict(f"{PROVIDER}; dkim=neutral header.d=example.org")[0]
    assert not strict("\x00;;;=")[0]
    # A DKIM signature verified by the plane itself, aligned.
    assert verdict(Sender(("ada@example.org",), date=DATE), True, dkim=("example.org",))[0]
    assert not verdict(Sender(("ada@example.org",), date=DATE), True, dkim=("evil.test",))[0]


def test_alignment_is_relaxed_but_not_lax() -> None:
    assert aligned("example.org", "mail.example.org")
    assert aligned("mail.example.org", "example.org")
    assert not aligned("ample.org", "example.org")
    assert not aligned("", "example.org")


@given(
    from_=st.lists(st.text(max_size=80), max_size=3),
    sender=st.lists(st.text(max_size=40), max_size=2),
    results=st.lists(st.text(max_size=120), max_size=3),
    date=st.one_of(st.none(), st.text(max_size=40)),
)
def test_no_header_text_makes_a_stranger_the_person(
    from_: list[str], sender: list[str], results: list[str], date: str | None
) -> None:
    """Whatever the headers hold, the person only if the one From address is theirs; never a
    crash."""
    result = mail_sender(
        Sender(tuple(from_), tuple(sender), (), tuple(results), date),
        PERSON,
        require_authenticated=True,
        authserv_ids=(PROVIDER,),
        now=NOW,
        max_age=timedelta(days=7),
    )
    if result.person:
        assert result.address in PERSON


def test_a_number_is_one_persons_or_nobodys() -> None:
    assert phone_owner("+4915112345678", ["ada"]).delegate_id == "ada"
    assert phone_owner("+4915112345678", []).delegate_id is None
    assert phone_owner("+4915112345678", ["ada", "bob"]).delegate_id is None
    assert phone_owner(None, ["ada"]).delegate_id is None
