"""A real `inner-plane serve` on the test stores, once per session (helpers to start one, register
processors and sign requests are in tests/support/http_api.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.http_api import KINDS_TOML, SHARED_TLS, start_api
from tests.support.stores import Stores


@pytest.fixture(scope="session")
def api_env(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    kinds = tmp_path_factory.mktemp("kinds") / "kinds.toml"
    kinds.write_text(KINDS_TOML)
    return stores.env(INNER_PLANE_KINDS_FILE=str(kinds))


@pytest.fixture(scope="session")
def api(api_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a running `inner-plane serve` (one worker) on the test stores."""
    log_dir = tmp_path_factory.mktemp("api-logs")
    child, url = start_api("api", api_env, log_dir)
    yield url
    child.stop()


@pytest.fixture
def http(api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api, timeout=30, verify=SHARED_TLS) as client:
        yield client
