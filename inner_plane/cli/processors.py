"""`inner-plane processors add|list|revoke|rotate`: external processors and their credentials.

The secret is printed once, at `add` and `rotate`; the journal keeps only what verification
needs (a scrypt hash of a bearer token, or the HMAC signing key)."""

from __future__ import annotations

from typing import Annotated

import typer

from inner_plane.cli.common import fail, print_json, runtime
from inner_plane.journal.processors import Processor, ProcessorExists
from inner_plane.sources import processors

processors_app = typer.Typer(
    help="External processors allowed to publish over HTTP or MCP.", no_args_is_help=True
)


def _show_secret(processor: Processor, secret: str, as_json: bool, verb: str) -> None:
    if as_json:
        print_json({**processor.public(), "secret": secret})
        return
    label = "token" if processor.credential == "bearer" else "HMAC signing key"
    typer.echo(f"processor {processor.name} {verb} ({processor.credential})")
    typer.echo(f"{label}: {secret}")
    typer.echo("This secret is shown once and cannot be recovered; store it now.", err=True)


@processors_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="a-z, 0-9, '-'; kinds: external.<name>.*")],
    credential: Annotated[str, typer.Option("--credential", help="bearer | hmac")] = "bearer",
    delegate: Annotated[
        list[str] | None,
        typer.Option("--delegate", help="Delegate it may publish for (repeat; '*' = any)"),
    ] = None,
    max_mode: Annotated[
        str, typer.Option("--max-mode", help="ambient | next-turn | wake | interrupt")
    ] = "next-turn",
    trusted: Annotated[
        bool, typer.Option("--trusted", help="Its content is trusted (default: untrusted)")
    ] = False,
    rate_limit: Annotated[
        int, typer.Option("--rate-limit", help="Requests per minute", min=1)
    ] = 600,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Register a processor and print its secret (once)."""
    try:
        processor, secret = processors.add(
            runtime(),
            name,
            credential,
            delegate or ["default"],
            max_mode,
            trusted,
            rate_limit,
        )
    except processors.ProcessorError as error:
        fail(str(error))
    except ProcessorExists:
        fail(f"processor {name!r} already exists (revoked names stay taken)")
    _show_secret(processor, secret, as_json, "added")


@processors_app.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Registered processors and their grants (never secrets)."""
    found = processors.list_all(runtime())
    if as_json:
        print_json([p.public() for p in found])
        return
    if not found:
        typer.echo("no processors: `processors add NAME` registers one")
    for p in found:
        state = "revoked" if p.revoked else "active"
        trust = "trusted" if p.trusted else "untrusted"
        typer.echo(
            f"{p.name}\t{state}\t{p.credential}\t{p.kind_prefix}*\t"
            f"delegates={','.join(p.delegates)}\tmax_mode={p.max_mode}\t{trust}\t"
            f"{p.rate_limit}/min"
        )


@processors_app.command("revoke")
def revoke(name: Annotated[str, typer.Argument()]) -> None:
    """Revoke a processor: its requests are refused (401) from now on."""
    if processors.revoke(runtime(), name) is None:
        fail(f"no processor named {name!r}")
    typer.echo(f"processor {name} revoked")


@processors_app.command("rotate")
def rotate(
    name: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Issue a new secret; the old one stops working at once."""
    rotated = processors.rotate(runtime(), name)
    if rotated is None:
        fail(f"no active processor named {name!r}")
    processor, secret = rotated
    _show_secret(processor, secret, as_json, "rotated")
