"""Run one `inner-plane` command in a fresh interpreter and report which libraries it loaded: the
light commands must answer without loading SQLAlchemy or Alembic, nor any library only the
plane's processes need (a server, Celery, the model client), nor the OpenTelemetry metrics SDK
redis-py would load for its own (unused) observability."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support.stores import ROOT

LIBRARIES = (
    "psycopg",
    "redis",
    "sqlalchemy",
    "alembic",
    "celery",
    "kombu",
    "fastapi",
    "starlette",
    "uvicorn",
    "openai",
    "mcp",
    "prometheus_client",
    "opentelemetry.sdk.metrics",
    "psutil",
)
# What a light command loads of LIBRARIES when it loads nothing it does not need (`status`
# adds redis).
ONLY_PSYCOPG = {name: name == "psycopg" for name in LIBRARIES}

# The command run in process; at exit, which of LIBRARIES it loaded, as JSON on stderr.
_CHILD = f"""
import atexit, json, sys
names = {LIBRARIES!r}
atexit.register(lambda: print(json.dumps({{n: n in sys.modules for n in names}}), file=sys.stderr))
sys.argv = ["inner-plane", *sys.argv[1:]]
from inner_plane.cli import main
main()
"""


def run_reporting_loaded(env: dict[str, str], *args: str) -> tuple[str, dict[str, Any]]:
    """(stdout, {library: loaded}) of ``inner-plane *args``."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])
