"""Where a proactive message to the person goes, and when.

A delegate with a person (``inner-plane delegates add``) is reached on the person's preferred
channel, at their own address; during their quiet hours a message that is not urgent waits
(``not_before``: when they end). A delegate without a person is reached through the configured
``NOTIFY_*`` channels at once: the one-delegate install's default."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfoNotFoundError

from inner_plane import logs
from inner_plane.journal.channels.mailboxes import Mailboxes
from inner_plane.journal.people.people import PeopleJournal, Person
from inner_plane.outbound.channels import Channel, person_channel
from inner_plane.people.quiet import quiet_until
from inner_plane.runtime import Runtime


@dataclass(frozen=True)
class Route:
    channels: list[Channel]
    # The end of the person's quiet hours if they are on now (a non-urgent message waits).
    not_before: datetime | None = None
    person: Person | None = None


def route(
    runtime: Runtime, delegate_id: str, defaults: Sequence[Channel], now: datetime | None = None
) -> Route:
    person = PeopleJournal(runtime.engine).get(delegate_id)
    if person is None:
        return Route(list(defaults))
    channel = _person_channel(runtime, person, person.preferred_channel)
    moment = datetime.now(UTC) if now is None else now
    try:
        until = quiet_until(moment, person.time_zone, person.quiet_start, person.quiet_end)
    except (ZoneInfoNotFoundError, ValueError):
        # A zone the tz database no longer knows (the row was valid when written): contact is
        # not held for quiet hours nobody can place, rather than failing.
        logs.emit("person_zone_unknown", delegate=delegate_id, zone=person.time_zone[:64])
        until = None
    return Route([channel], until, person)


def _person_channel(runtime: Runtime, person: Person, name: str) -> Channel:
    """The person's channel ``name``; mail goes out from the delegate's own mailbox, if it has
    one, so the person's reply comes back to it."""
    mailbox = Mailboxes(runtime.engine).get(person.delegate_id) if name == "email" else None
    return person_channel(
        runtime.settings,
        name,
        list(person.emails),
        person.webhook_url,
        sender=None if mailbox is None else mailbox.address,
        phones=list(person.phones),
    )


def channel_named(
    runtime: Runtime, delegate_id: str, name: str, defaults: Sequence[Channel]
) -> Channel | None:
    """The channel ``name`` of the delegate as of now (for a message that waited): the person's
    current address on it, else the configured default of that name."""
    person = PeopleJournal(runtime.engine).get(delegate_id)
    if person is not None:
        return _person_channel(runtime, person, name)
    return next((channel for channel in defaults if channel.name == name), None)
