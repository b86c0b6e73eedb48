"""Shared fixtures: real PostgreSQL and Redis (embedded unless URLs are configured), a clean
journal and Redis per test, captured [inner-context] lines, and child-process helpers."""

from __future__ import annotations

# isort: off
from tests.support import collector  # first: the collector held while the suite loads
# isort: on

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from inner_plane import logs
from inner_plane.config import build_settings, load_settings
from inner_plane.runtime import Runtime, build_runtime, set_runtime
from inner_plane.services import metrics
from inner_plane.signals.kinds import KindRegistry
from inner_plane.sources import auth_throttle
from tests.support.processes import ChildProcess
from tests.support.stores import Stores, start_stores, stop_stores, truncate_all

TESTS = Path(__file__).parent
# The order files go to xdist workers, and the tests over a minute not marked slow.
pytest_plugins = ["tests.support.timing"]

# Timing never decides a test: no per-example deadline and no too-slow health check (a loaded
# CI machine runs examples slowly; benchmarks measure time). A test may still set its own.
hypothesis_settings.register_profile(
    "inner-plane", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("inner-plane")

_test_client_init = TestClient.__init__


def _loopback_test_client(self: TestClient, app: Any, *args: Any, **kwargs: Any) -> None:
    """In-process clients call the API as a local client does: from 127.0.0.1, naming it
    127.0.0.1 (the API refuses a Host that is not one of its names; a test of that sends its
    own Host header)."""
    if not args:
        kwargs.setdefault("base_url", "http://127.0.0.1")
    kwargs.setdefault("client", ("127.0.0.1", 50000))
    _test_client_init(self, app, *args, **kwargs)


TestClient.__init__ = _loopback_test_client  # type: ignore[method-assign]
KINDS = ("unit", "integration", "acceptance")


@pytest.hookimpl(hookwrapper=True)
def pytest_collection() -> Iterator[None]:
    try:
        yield
    finally:
        collector.give_back()  # held since this module began


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by the folder it is filed in, so `-m unit` (or integration, acceptance)
    selects one kind."""
    for item in items:
        relative = item.path.relative_to(TESTS) if item.path.is_relative_to(TESTS) else None
        if relative is not None and relative.parts[0] in KINDS:
            item.add_marker(relative.parts[0])


@pytest.fixture(scope="session")
def stores() -> Iterator[Stores]:
    started = start_stores()
    # In-process code (load_settings, the CLI) sees the same stores as child processes.
    names = ("INNER_PLANE_DATABASE_URL", "INNER_PLANE_REDIS_URL", "INNER_PLANE_BROKER_URL")
    previous = {k: os.environ.get(k) for k in names}
    os.environ["INNER_PLANE_DATABASE_URL"] = started.database_url
    os.environ["INNER_PLANE_REDIS_URL"] = started.redis_url
    os.environ["INNER_PLANE_DATA_DIR"] = str(started.data_dir)
    # As Stores.env gives child processes: throttled refusals are answered at once in tests.
    os.environ.setdefault("INNER_PLANE_API_THROTTLED_DELAY_S", "0")
    if started.broker.url is not None:
        os.environ["INNER_PLANE_BROKER_URL"] = started.broker.url
    load_settings.cache_clear()
    yield started
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    stop_stores(started)


class ContextLog(io.StringIO):
    """The [inner-context] lines written during a test."""

    def lines(self, event: str | None = None) -> list[str]:
        found = [
            line for line in self.getvalue().splitlines() if line.startswith("[inner-context]")
        ]
        if event is not None:
            found = [line for line in found if f" event={event} " in line + " "]
        return found


@pytest.fixture
def context_log() -> Iterator[ContextLog]:
    stream = ContextLog()
    logs.configure(log_format="logfmt", stream=stream)
    yield stream
    logs._stream = None  # back to stderr


@pytest.fixture
def clean_stores(stores: Stores) -> Stores:
    truncate_all(stores.database_url)
    # This process's metric counts of an earlier test reach Redis now, before it is emptied,
    # not a second later into this test's counters.
    metrics.flush()
    stores.empty_broker()
    return stores


@pytest.fixture
def runtime(clean_stores: Stores, context_log: ContextLog) -> Iterator[Runtime]:
    settings = build_settings(
        database_url=clean_stores.database_url,
        redis_url=clean_stores.redis_url,
        data_dir=clean_stores.data_dir,
    )
    rt = build_runtime(settings, registry=KindRegistry())
    set_runtime(rt)
    auth_throttle.forget_throttled()  # this process's memory of the throttle Redis just lost
    yield rt
    set_runtime(None)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture
def children() -> Iterator[list[ChildProcess]]:
    """Register child processes here; they are killed at the end of the test whatever happens."""
    started: list[ChildProcess] = []
    yield started
    for child in started:
        child.kill()
