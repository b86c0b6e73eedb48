"""Helpers shared by CLI commands: errors as one line with exit code 2, JSON output, the runtime,
and a plain connection to the journal for the reads that should answer at once."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from inner_plane.config import Settings, load_settings

if TYPE_CHECKING:
    from inner_plane.journal.plain import Rows
    from inner_plane.runtime import Runtime

BAD_INPUT = 2
FAILURE = 1


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    """Print one line to stderr and exit (2 for bad input, 1 for an operational failure)."""
    sys.stderr.write(f"inner-plane: error: {message}\n")
    raise typer.Exit(code)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, default=str, ensure_ascii=False) + "\n")


def settings() -> Settings:
    return load_settings()


def require_plane() -> None:
    """For commands that hand work to the plane's workers: with no store URLs configured, a plane
    must run on the data dir (else one line, exit 1, instead of starting a second stack)."""
    from inner_plane.cli.locate import plane_settings

    plane_settings()


_runtime: Runtime | None = None


def runtime() -> Runtime:
    """Connect to the journal (starting embedded services if no URLs are set)."""
    global _runtime
    if _runtime is None:
        from inner_plane.runtime import build_runtime, set_runtime

        _runtime = build_runtime(load_settings())
        set_runtime(_runtime)
    return _runtime


@contextmanager
def journal_rows(command: str) -> Iterator[Rows]:
    """A plain connection to the journal for a command that only reads: it loads no SQLAlchemy
    (`signals show` starts about a third faster). The stores are found as :func:`runtime` finds
    them; a schema this code does not match is refused as :func:`runtime` refuses it."""
    from inner_plane.journal import plain

    configured = load_settings()
    if configured.database_url is None or configured.redis_url is None:
        # The embedded servers' machinery loads only when a store is not configured.
        from inner_plane.services.embedded import resolve_services

        configured = resolve_services(configured)
    assert configured.database_url is not None
    with plain.connect(configured.database_url, 5, f"inner-plane {command}") as rows:
        if not plain.at_code_head(plain.schema_versions(rows)):
            runtime()  # raises SchemaError, which names the versions and what to run
        yield rows


# redis-py imports OpenTelemetry's metrics SDK when it is installed, for its own observability:
# off unless a program turns it on (the plane never does), and about a third of what importing
# redis-py costs (the SDK, psutil). A command that only asks Redis a few questions and exits
# (`status`, `health beat`) imports redis-py without it.
_REDIS_METRICS_SDK = "opentelemetry.sdk.metrics"


def import_redis_lean() -> None:
    """Import redis-py, without OpenTelemetry's metrics SDK if nothing loaded it yet; redis-py
    then runs without its (unused) observability. Later imports of the SDK work as usual."""
    if "redis" in sys.modules or _REDIS_METRICS_SDK in sys.modules:
        return
    sys.modules[_REDIS_METRICS_SDK] = None  # type: ignore[assignment]  # import fails: skipped
    try:
        importlib.import_module("redis")
    except ImportError:
        pass  # a redis-py that cannot do without the SDK: imported as usual below
    finally:
        del sys.modules[_REDIS_METRICS_SDK]
    importlib.import_module("redis")
