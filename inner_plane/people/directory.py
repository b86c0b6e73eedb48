"""Managing people: the person each delegate serves. Every change is validated whole before
anything is written (:mod:`inner_plane.people.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inner_plane.journal.people.people import PeopleJournal, Person, PersonExists
from inner_plane.people import model
from inner_plane.people.model import PersonError
from inner_plane.runtime import Runtime

__all__ = ["Person", "PersonError", "PersonExists", "add", "get", "list_all", "remove", "update"]


def _default_channel(values: dict[str, Any]) -> str:
    if values.get("emails"):
        return "email"
    if values.get("webhook_url"):
        return "webhook"
    return "app"


def add(
    runtime: Runtime,
    delegate_id: str,
    *,
    display_name: str,
    time_zone: str = "UTC",
    emails: Sequence[str] = (),
    phones: Sequence[str] = (),
    webhook_url: str | None = None,
    preferred_channel: str | None = None,
    quiet_hours: str | None = None,
) -> Person:
    """Raises PersonError (naming the field) or PersonExists, storing nothing."""
    model.delegate_id(delegate_id)
    values = model.fields(
        display_name_=display_name,
        time_zone_=time_zone,
        emails=emails,
        phones=phones,
        webhook_url_=webhook_url,
        preferred_channel=preferred_channel,
        quiet=quiet_hours,
    )
    values.setdefault("preferred_channel", _default_channel(values))
    model.reachable(
        values["preferred_channel"],
        values["emails"],
        values.get("webhook_url"),
        values.get("phones", ()),
    )
    return PeopleJournal(runtime.engine).add(delegate_id, values)


def update(
    runtime: Runtime,
    delegate_id: str,
    *,
    display_name: str | None = None,
    time_zone: str | None = None,
    emails: Sequence[str] | None = None,
    phones: Sequence[str] | None = None,
    webhook_url: str | None = None,
    preferred_channel: str | None = None,
    quiet_hours: str | None = None,
    clear: Sequence[str] = (),
) -> Person | None:
    """Change the given fields; None if the delegate has no person. Raises PersonError,
    storing nothing."""
    model.delegate_id(delegate_id)
    values = model.fields(
        display_name_=display_name,
        time_zone_=time_zone,
        emails=emails,
        phones=phones,
        webhook_url_=webhook_url,
        preferred_channel=preferred_channel,
        quiet=quiet_hours,
        clear=clear,
    )
    journal = PeopleJournal(runtime.engine)
    current = journal.get(delegate_id)
    if current is None:
        return None
    if not values:
        return current
    model.reachable(
        values.get("preferred_channel", current.preferred_channel),
        values.get("emails", current.emails),
        values.get("webhook_url", current.webhook_url),
        values.get("phones", current.phones),
    )
    return journal.update(delegate_id, values)


def get(runtime: Runtime, delegate_id: str) -> Person | None:
    return PeopleJournal(runtime.engine).get(delegate_id)


def list_all(runtime: Runtime, after: str = "", limit: int = 1000) -> list[Person]:
    return PeopleJournal(runtime.engine).list(after, limit)


def remove(runtime: Runtime, delegate_id: str) -> bool:
    """Remove the person and their tokens (which stop working at once)."""
    return PeopleJournal(runtime.engine).remove(delegate_id)
