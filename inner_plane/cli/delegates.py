"""`inner-plane delegates add|set|show|list|remove|token|tokens|revoke`: the person each
delegate serves, and that person's tokens.

A token is printed once, at `token`; the journal keeps only its scrypt hash."""

from __future__ import annotations

from typing import Annotated

import typer

from inner_plane.cli.common import FAILURE, fail, print_json, runtime
from inner_plane.journal.people.people import Person

delegates_app = typer.Typer(
    help="The person each delegate serves: contact points, time zone, quiet hours, tokens.",
    no_args_is_help=True,
)

DelegateArg = Annotated[str, typer.Argument(help="the delegate id")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
NameOption = Annotated[str | None, typer.Option("--name", help="the person's display name")]
ZoneOption = Annotated[
    str | None, typer.Option("--time-zone", help="IANA time zone, e.g. Europe/Berlin")
]
EmailOption = Annotated[
    list[str] | None, typer.Option("--email", help="an email address (repeat for several)")
]
PhoneOption = Annotated[
    list[str] | None, typer.Option("--phone", help="a phone number in E.164 (repeatable)")
]
WebhookOption = Annotated[
    str | None, typer.Option("--webhook", help="URL for proactive messages (signed POST)")
]
PreferOption = Annotated[
    str | None,
    typer.Option("--prefer", help="channel for proactive messages: email|webhook|app|sms"),
]
QuietOption = Annotated[
    str | None,
    typer.Option("--quiet", help="quiet hours HH:MM-HH:MM in the person's zone, or 'none'"),
]


def _show(person: Person) -> None:
    public = person.public()
    quiet = public["quiet_hours"]
    typer.echo(f"delegate:    {person.delegate_id}")
    typer.echo(f"name:        {person.display_name}")
    typer.echo(f"time zone:   {person.time_zone}")
    typer.echo(f"emails:      {', '.join(person.emails) or '-'}")
    typer.echo(f"phones:      {', '.join(person.phones) or '-'}")
    typer.echo(f"webhook:     {person.webhook_url or '-'}")
    typer.echo(f"preferred:   {person.preferred_channel}")
    typer.echo(f"quiet hours: {'-' if quiet is None else quiet['start'] + '-' + quiet['end']}")


@delegates_app.command("add")
def add(
    delegate: DelegateArg,
    name: Annotated[str, typer.Option("--name", help="the person's display name")],
    time_zone: Annotated[str, typer.Option("--time-zone", help="IANA time zone")] = "UTC",
    email: EmailOption = None,
    phone: PhoneOption = None,
    webhook: WebhookOption = None,
    prefer: PreferOption = None,
    quiet: QuietOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record the person a delegate serves."""
    from inner_plane.people import directory

    try:
        person = directory.add(
            runtime(),
            delegate,
            display_name=name,
            time_zone=time_zone,
            emails=email or (),
            phones=phone or (),
            webhook_url=webhook,
            preferred_channel=prefer,
            quiet_hours=quiet,
        )
    except directory.PersonError as error:
        fail(str(error))
    except directory.PersonExists:
        fail(f"delegate_id: {delegate!r} already has a person (use `delegates set`)")
    if as_json:
        print_json(person.public())
        return
    typer.echo(f"delegate {person.delegate_id} added")


@delegates_app.command("set")
def set_command(
    delegate: DelegateArg,
    name: NameOption = None,
    time_zone: ZoneOption = None,
    email: EmailOption = None,
    phone: PhoneOption = None,
    webhook: WebhookOption = None,
    prefer: PreferOption = None,
    quiet: QuietOption = None,
    clear: Annotated[
        list[str] | None,
        typer.Option("--clear", help="empty a field: emails, phones, webhook_url, quiet_hours"),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Change the given fields (a list option replaces the whole list)."""
    from inner_plane.people import directory

    try:
        person = directory.update(
            runtime(),
            delegate,
            display_name=name,
            time_zone=time_zone,
            emails=email,
            phones=phone,
            webhook_url=webhook,
            preferred_channel=prefer,
            quiet_hours=quiet,
            clear=clear or (),
        )
    except directory.PersonError as error:
        fail(str(error))
    if person is None:
        fail(f"no person for delegate {delegate!r} (use `delegates add`)", FAILURE)
    if as_json:
        print_json(person.public())
        return
    _show(person)


@delegates_app.command("show")
def show(delegate: DelegateArg, as_json: JsonOption = False) -> None:
    """The person a delegate serves."""
    from inner_plane.people import directory

    person = directory.get(runtime(), delegate)
    if person is None:
        fail(f"no person for delegate {delegate!r}", FAILURE)
    if as_json:
        print_json(person.public())
        return
    _show(person)


@delegates_app.command("list")
def list_command(as_json: JsonOption = False) -> None:
    """Every delegate's person, by delegate id."""
    from inner_plane.people import directory

    found = directory.list_all(runtime())
    if as_json:
        print_json([p.public() for p in found])
        return
    for person in found:
        typer.echo(
            f"{person.delegate_id}\t{person.display_name}\t{person.time_zone}\t"
            f"{person.preferred_channel}"
        )


@delegates_app.command("remove")
def remove(delegate: DelegateArg) -> None:
    """Remove the person (and their tokens, which stop working at once)."""
    from inner_plane.people import directory

    if not directory.remove(runtime(), delegate):
        fail(f"no person for delegate {delegate!r}", FAILURE)
    typer.echo(f"delegate {delegate} removed")


@delegates_app.command("token")
def token(
    delegate: DelegateArg,
    label: Annotated[str, typer.Option("--label", help="a-z, 0-9, '-'; e.g. phone")] = "default",
    as_json: JsonOption = False,
) -> None:
    """Make a token for the person (printed once): it may send this delegate's turns and read
    its conversation, nothing else."""
    from inner_plane.sources import person_auth

    try:
        record, secret = person_auth.issue_token(runtime(), delegate, label)
    except person_auth.PersonTokenError as error:
        fail(str(error))
    except person_auth.NoSuchPerson:
        fail(f"delegate_id: no person for {delegate!r} (use `delegates add` first)", FAILURE)
    except person_auth.TokenLabelTaken:
        fail(f"label: {delegate!r} already has a token labelled {label!r} (revoke it first)")
    if as_json:
        print_json({**record.public(), "token": secret})
        return
    typer.echo(f"token {record.label} for delegate {record.delegate_id}")
    typer.echo(f"token: {secret}")
    typer.echo("This token is shown once and cannot be recovered; store it now.", err=True)


@delegates_app.command("tokens")
def tokens(delegate: DelegateArg, as_json: JsonOption = False) -> None:
    """The person's tokens, by label (never the tokens themselves)."""
    from inner_plane.sources import person_auth

    found = person_auth.tokens_of(runtime(), delegate)
    if as_json:
        print_json([t.public() for t in found])
        return
    for record in found:
        typer.echo(f"{record.label}\tadded {record.created_at:%Y-%m-%d %H:%M:%S}")


@delegates_app.command("revoke")
def revoke(delegate: DelegateArg, label: Annotated[str, typer.Argument()]) -> None:
    """Revoke one of the person's tokens: it stops working at once."""
    from inner_plane.sources import person_auth

    if not person_auth.revoke_token(runtime(), delegate, label):
        fail(f"label: delegate {delegate!r} has no token labelled {label!r}", FAILURE)
    typer.echo(f"token {label} of delegate {delegate} revoked")
