"""Validating what an operator says about a person: pure, no I/O. Every error names its field
(:class:`PersonError`), and nothing is stored unless every field is valid.

Phone numbers are checked and normalised to E.164 by ``phonenumbers`` (Google's libphonenumber
metadata); time zones must be IANA names that ``zoneinfo`` knows.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import zoneinfo
from collections.abc import Sequence
from datetime import time
from typing import Any
from urllib.parse import urlsplit

import phonenumbers

from inner_plane.attention.quiet import clock as quiet_clock
from inner_plane.attention.quiet import quiet_span
from inner_plane.signals.model import IDENTIFIER_RE

CHANNELS = ("email", "webhook", "app", "sms")
MAX_NAME = 200
MAX_EMAILS = 10
MAX_PHONES = 10
MAX_URL = 2000
# What mail systems accept in practice (RFC 5321 limits: 64 local, 254 total); no spaces,
# quotes or list separators, a dotted domain.
_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")


class PersonError(ValueError):
    """Bad input about a person: ``field`` names what was wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def delegate_id(value: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER_RE.match(value):
        raise PersonError(
            "delegate_id", "must be 1 to 128 characters of letters, digits and '._:-'"
        )
    return value


def display_name(value: str) -> str:
    name = value.strip() if isinstance(value, str) else ""
    if not name or len(name) > MAX_NAME:
        raise PersonError("display_name", f"must be 1 to {MAX_NAME} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name):
        raise PersonError("display_name", "must not hold control or format characters")
    return name


def time_zone(value: str) -> str:
    if not isinstance(value, str) or value not in _zones():
        raise PersonError("time_zone", f"{value!r} is not an IANA time zone (e.g. Europe/Berlin)")
    return value


def email(value: str) -> str:
    if not isinstance(value, str) or len(value) > 254 or not _EMAIL.fullmatch(value):
        raise PersonError("email", f"{value!r} is not an email address")
    return value


def phone(value: str) -> str:
    """The number in E.164 (``+`` and the country code required)."""
    if not isinstance(value, str) or not value.startswith("+") or len(value) > 32:
        raise PersonError("phone", f"{value!r} must be in E.164, e.g. +4915112345678")
    try:
        number = phonenumbers.parse(value, None)
    except phonenumbers.NumberParseException:
        raise PersonError("phone", f"{value!r} is not a phone number") from None
    if not phonenumbers.is_valid_number(number):
        raise PersonError("phone", f"{value!r} is not a valid phone number")
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def webhook_url(value: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_URL:
        raise PersonError("webhook_url", f"must be an http(s) URL of at most {MAX_URL} characters")
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in value):
        raise PersonError("webhook_url", "must not hold spaces or control characters")
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        raise PersonError("webhook_url", f"{value!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise PersonError("webhook_url", f"{value!r} must be an http(s) URL with a host")
    return value


def channel(value: str) -> str:
    if value not in CHANNELS:
        raise PersonError("preferred_channel", f"must be one of {', '.join(CHANNELS)}")
    return value


def clock(value: str, field: str) -> time:
    try:
        return quiet_clock(value)
    except ValueError as error:
        raise PersonError(field, str(error)) from None


def quiet_hours(value: str | None) -> tuple[time | None, time | None]:
    """``"22:00-07:00"`` (in the person's time zone; may span midnight) or None/"" for none."""
    try:
        span = quiet_span(value)
    except ValueError as error:
        raise PersonError("quiet_hours", str(error)) from None
    return (None, None) if span is None else (span.start, span.end)


def _unique(values: Sequence[str], check: Any, field: str, most: int) -> list[str]:
    if len(values) > most:
        raise PersonError(field, f"at most {most}")
    seen: list[str] = []
    for value in values:
        checked = check(value)
        if checked not in seen:
            seen.append(checked)
    return seen


def fields(
    *,
    display_name_: str | None = None,
    time_zone_: str | None = None,
    emails: Sequence[str] | None = None,
    phones: Sequence[str] | None = None,
    webhook_url_: str | None = None,
    preferred_channel: str | None = None,
    quiet: str | None = None,
    clear: Sequence[str] = (),
) -> dict[str, Any]:
    """The journal's column values for the given options (only those given); ``clear`` names
    fields to empty (emails, phones, webhook_url, quiet_hours)."""
    values: dict[str, Any] = {}
    for name in clear:
        if name == "emails":
            values["emails"] = []
        elif name == "phones":
            values["phones"] = []
        elif name == "webhook_url":
            values["webhook_url"] = None
        elif name == "quiet_hours":
            values["quiet_start"], values["quiet_end"] = None, None
        else:
            raise PersonError(
                "clear", f"{name!r} is not one of emails, phones, webhook_url, quiet_hours"
            )
    if display_name_ is not None:
        values["display_name"] = display_name(display_name_)
    if time_zone_ is not None:
        values["time_zone"] = time_zone(time_zone_)
    if emails is not None:
        values["emails"] = _unique(emails, email, "email", MAX_EMAILS)
    if phones is not None:
        values["phones"] = _unique(phones, phone, "phone", MAX_PHONES)
    if webhook_url_ is not None:
        values["webhook_url"] = webhook_url(webhook_url_)
    if preferred_channel is not None:
        values["preferred_channel"] = channel(preferred_channel)
    if quiet is not None:
        values["quiet_start"], values["quiet_end"] = quiet_hours(quiet)
    return values


def reachable(
    preferred: str, emails: Sequence[str], webhook: str | None, phones: Sequence[str] = ()
) -> None:
    """The preferred channel must have its contact point."""
    if preferred == "email" and not emails:
        raise PersonError("preferred_channel", "email needs at least one email address")
    if preferred == "webhook" and not webhook:
        raise PersonError("preferred_channel", "webhook needs a webhook_url")
    if preferred == "sms" and not phones:
        raise PersonError("preferred_channel", "sms needs at least one phone number")
