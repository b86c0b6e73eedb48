"""The person's fields (pure): every bad value names its field; quiet hours in the person's
zone, across midnight and DST changes."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.people import model
from inner_plane.people.model import PersonError
from inner_plane.people.quiet import quiet_until


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"display_name_": " "}, "display_name"),
        ({"display_name_": "a\u2028b"}, "display_name"),
        ({"display_name_": "x" * 201}, "display_name"),
        ({"time_zone_": "Mars/Olympus"}, "time_zone"),
        ({"time_zone_": "../etc/passwd"}, "time_zone"),
        ({"emails": ["not-an-address"]}, "email"),
        ({"emails": ["a b@example.org"]}, "email"),
        ({"phones": ["015112345678"]}, "phone"),
        ({"phones": ["+1 555"]}, "phone"),
        ({"webhook_url_": "ftp://example.org/x"}, "webhook_url"),
        ({"webhook_url_": "https:///nohost"}, "webhook_url"),
        ({"webhook_url_": "https://example.org/\x00"}, "webhook_url"),
        ({"preferred_channel": "pigeon"}, "preferred_channel"),
        ({"quiet": "22:00"}, "quiet_hours"),
        ({"quiet": "25:00-07:00"}, "quiet_hours"),
        ({"quiet": "07:00-07:00"}, "quiet_hours"),
        ({"clear": ["everything"]}, "clear"),
    ],
)
def test_each_bad_value_names_its_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(PersonError) as caught:
        model.fields(**options)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_good_values_are_normalised() -> None:
    values = model.fields(
        display_name_="  Ada Lovelace ",
        time_zone_="Europe/Berlin",
        emails=["ada@example.org", "ada@example.org"],
        phones=["+49 151 12345678"],
        webhook_url_="https://hooks.example.org/ada",
        preferred_channel="webhook",
        quiet="22:00-07:30",
    )
    assert values["display_name"] == "Ada Lovelace"
    assert values["emails"] == ["ada@example.org"]
    assert values["phones"] == ["+4915112345678"]
    assert (values["quiet_start"], values["quiet_end"]) == (time(22, 0), time(7, 30))
    assert model.quiet_hours("none") == (None, None)


def test_the_preferred_channel_needs_its_contact_point() -> None:
    with pytest.raises(PersonError, match=r"^preferred_channel:"):
        model.reachable("email", [], None)
    with pytest.raises(PersonError, match=r"^preferred_channel:"):
        model.reachable("webhook", ["a@example.org"], None)
    model.reachable("app", [], None)


BERLIN = "Europe/Berlin"


def at(zone: str, *parts: int) -> datetime:
    return datetime(*parts, tzinfo=ZoneInfo(zone))  # type: ignore[misc]


def test_quiet_hours_across_midnight_in_the_persons_zone() -> None:
    start, end = time(22, 0), time(7, 0)
    evening = at(BERLIN, 2026, 6, 1, 23, 0)
    assert quiet_until(evening, BERLIN, start, end) == at(BERLIN, 2026, 6, 2, 7, 0)
    early = at(BERLIN, 2026, 6, 2, 6, 59)
    assert quiet_until(early, BERLIN, start, end) == at(BERLIN, 2026, 6, 2, 7, 0)
    assert quiet_until(at(BERLIN, 2026, 6, 2, 7, 0), BERLIN, start, end) is None
    assert quiet_until(at(BERLIN, 2026, 6, 2, 12, 0), BERLIN, start, end) is None
    # The same instant in UTC is 21:00: not quiet for a person in UTC.
    assert quiet_until(evening, "UTC", start, end) is None
    assert quiet_until(evening, BERLIN, None, None) is None


def test_quiet_hours_over_a_dst_change_end_at_the_wall_clock_time() -> None:
    # 2026-03-29: Berlin skips 02:00-03:00. Quiet 22:00-07:00 ends at 07:00 CEST (05:00 UTC).
    night = at(BERLIN, 2026, 3, 28, 23, 30)
    assert quiet_until(night, BERLIN, time(22), time(7)) == datetime(2026, 3, 29, 5, 0, tzinfo=UTC)


clocks = st.times().map(lambda t: t.replace(microsecond=0))


@given(
    now=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(["UTC", BERLIN, "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]),
    start=clocks,
    end=clocks,
)
def test_a_held_message_waits_at_most_a_day_and_never_goes_back(
    now: datetime, zone: str, start: time, end: time
) -> None:
    until = quiet_until(now, zone, start, end)
    if start == end:
        assert until is None
        return
    if until is None:
        return
    assert now < until <= now + timedelta(hours=25)
    # It ends at the wall-clock end, or just after it when a DST change skipped that time.
    local_end = until.astimezone(ZoneInfo(zone)).time().replace(tzinfo=None)
    late = datetime.combine(date.min, local_end) - datetime.combine(date.min, end)
    assert timedelta(0) <= late <= timedelta(hours=1)


VALIDATORS = [
    (model.delegate_id, "delegate_id"),
    (model.display_name, "display_name"),
    (model.time_zone, "time_zone"),
    (model.email, "email"),
    (model.phone, "phone"),
    (model.webhook_url, "webhook_url"),
    (model.channel, "preferred_channel"),
    (model.quiet_hours, "quiet_hours"),
]


@given(value=st.one_of(st.text(), st.text(alphabet="+0123456789 -:./@abcUTC", max_size=40)))
def test_any_text_is_accepted_or_refused_naming_its_field(value: str) -> None:
    """Control characters, U+2028, lone surrogates, huge or empty strings: a PersonError naming
    the field, never another exception."""
    for check, field in VALIDATORS:
        try:
            check(value)
        except PersonError as error:
            assert error.field == field
