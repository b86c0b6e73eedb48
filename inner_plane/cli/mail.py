"""`inner-plane mail set|show|remove|poll|watch`: each delegate's own mailbox (IMAP), read for
the person's mail (docs/channels.md).

The password never goes on the command line (where `ps` shows it): it is read from a file
(`--password-file`) or from standard input (`--password-stdin`)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from inner_plane.cli.common import FAILURE, fail, print_json, runtime

mail_app = typer.Typer(
    help="Each delegate's mailbox: the person's mail in, answers out in the same thread.",
    no_args_is_help=True,
)
DelegateArg = Annotated[str, typer.Argument(help="the delegate id")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]


def _password(path: Path | None, stdin: bool) -> str:
    if path is not None and stdin:
        fail("password: give --password-file or --password-stdin, not both")
    if stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if path is None:
        fail("password: give --password-file PATH or --password-stdin")
    try:
        return path.read_text().rstrip("\r\n")
    except OSError as error:
        fail(f"password: cannot read {path}: {error.strerror}")


@mail_app.command("set")
def set_command(
    delegate: DelegateArg,
    address: Annotated[str, typer.Option("--address", help="the mailbox's own address")],
    host: Annotated[str, typer.Option("--host", help="the IMAP server")],
    username: Annotated[str, typer.Option("--username", help="the IMAP login")],
    port: Annotated[int | None, typer.Option("--port", help="default 993 (tls), else 143")] = None,
    security: Annotated[
        str, typer.Option("--security", help="tls | starttls | plain (loopback only)")
    ] = "tls",
    folder: Annotated[str, typer.Option("--folder", help="the folder read")] = "INBOX",
    strangers: Annotated[
        str, typer.Option("--strangers", help="a stranger's mail: ambient (untrusted) | drop")
    ] = "ambient",
    require_authenticated: Annotated[
        bool,
        typer.Option(
            "--require-authenticated/--no-require-authenticated",
            help="the person's mail must carry the provider's dkim/spf pass (or a verified "
            "DKIM signature) aligned with its From domain",
        ),
    ] = True,
    password_file: Annotated[
        Path | None, typer.Option("--password-file", help="a file holding the IMAP password")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="read the IMAP password from stdin")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Add or replace the delegate's mailbox (its poll state starts afresh)."""
    from inner_plane.channels import mailbox

    secret = _password(password_file, password_stdin)
    try:
        box = mailbox.set_mailbox(
            runtime(),
            delegate,
            address=address,
            host=host,
            port=port,
            security=security,
            username=username,
            password=secret,
            folder=folder,
            strangers=strangers,
            require_authenticated=require_authenticated,
        )
    except mailbox.MailboxError as error:
        fail(str(error))
    if as_json:
        print_json(box.public())
        return
    typer.echo(f"mailbox of {delegate} set: {box.name}")


@mail_app.command("show")
def show(delegate: DelegateArg, as_json: JsonOption = False) -> None:
    """The delegate's mailbox and its poll state (never the password)."""
    from inner_plane.channels import mailbox

    box = mailbox.get(runtime(), delegate)
    if box is None:
        fail(f"no mailbox for delegate {delegate!r} (use `mail set`)", FAILURE)
    public = box.public()
    if as_json:
        print_json(public)
        return
    for name, value in public.items():
        typer.echo(f"{name + ':':<24}{'-' if value is None else value}")


@mail_app.command("remove")
def remove(delegate: DelegateArg) -> None:
    """Stop reading the delegate's mailbox (what was read stays in the journal)."""
    from inner_plane.channels import mailbox

    if not mailbox.remove(runtime(), delegate):
        fail(f"no mailbox for delegate {delegate!r}", FAILURE)
    typer.echo(f"mailbox of {delegate} removed")


@mail_app.command("poll")
def poll(delegate: DelegateArg, as_json: JsonOption = False) -> None:
    """Read the delegate's mailbox once, now."""
    from inner_plane.channels import imap, mailbox

    rt = runtime()
    box = mailbox.get(rt, delegate)
    if box is None:
        fail(f"no mailbox for delegate {delegate!r} (use `mail set`)", FAILURE)
    report = imap.poll(rt, box)
    if as_json:
        print_json(report.__dict__)
    else:
        outcomes = (
            ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())) or "nothing new"
        )
        typer.echo(f"read {report.read}: {outcomes}; backlog {report.backlog}")
    if report.error is not None:
        fail(report.error, FAILURE)


@mail_app.command("watch")
def watch() -> None:
    """Keep an IDLE watch on every mailbox until SIGTERM or Ctrl-C (beat does this too, unless
    INNER_PLANE_MAIL_WATCH_IN_BEAT=false)."""
    from inner_plane.channels.watcher import MailWatcher

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    watcher = MailWatcher(runtime()).start()
    with contextlib.suppress(KeyboardInterrupt):
        done.wait()
    watcher.stop()
