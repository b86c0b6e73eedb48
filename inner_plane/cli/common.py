"""Helpers shared by CLI commands: errors as one line with exit code 2, JSON output, runtime."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

from inner_plane.config import Settings, load_settings
from inner_plane.runtime import Runtime, build_runtime, set_runtime

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
        _runtime = build_runtime(load_settings())
        set_runtime(_runtime)
    return _runtime
