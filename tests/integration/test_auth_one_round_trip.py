"""A bearer token this process verified before is authenticated and counted against the rate
limit in ONE Redis round trip, and that fast path still honours the limit, a rotation and a
revocation (real PostgreSQL and Redis, in process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from inner_plane.runtime import Runtime
from inner_plane.sources import auth, credentials, processors

POST = ("POST", "/v1/signals")


class RoundTrips:
    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def round_trips(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> Iterator[RoundTrips]:
    """Counts connections taken from the pool: one per command or pipeline sent."""
    trips = RoundTrips()
    pool = runtime.redis.connection_pool
    real = pool.get_connection

    def counting(*args: Any, **kwargs: Any) -> Any:
        trips.count += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counting)
    credentials._verified.clear()
    yield trips
    credentials._verified.clear()


def _admit(runtime: Runtime, token: str, now: float = 1_800_000_010.0) -> tuple[Any, int | None]:
    headers = {"authorization": f"Bearer {token}"}
    return auth.admit_request(runtime, *POST, headers, b"", now=now, client="10.0.0.1")


def test_a_token_verified_before_costs_one_round_trip(
    runtime: Runtime, round_trips: RoundTrips
) -> None:
    _, token = processors.add(runtime, "ci")
    processor, wait = _admit(runtime, token)  # first use: the slow path (throttle, hash)
    assert processor.name == "ci" and wait is None
    round_trips.count = 0
    processor, wait = _admit(runtime, token)
    assert processor.name == "ci" and wait is None
    assert round_trips.count == 1


def test_the_fast_path_still_counts_against_the_rate_limit(
    runtime: Runtime, round_trips: RoundTrips
) -> None:
    _, token = processors.add(runtime, "ci", rate_limit=3)
    waits = [_admit(runtime, token)[1] for _ in range(5)]
    assert waits[:3] == [None, None, None]
    assert waits[3] is not None and waits[3] >= 1
    assert waits[4] is not None


def test_a_rotated_or_revoked_token_is_refused_on_its_next_request(
    runtime: Runtime, round_trips: RoundTrips
) -> None:
    _, token = processors.add(runtime, "ci")
    _admit(runtime, token)
    rotated = processors.rotate(runtime, "ci")
    assert rotated is not None
    with pytest.raises(auth.AuthError):
        _admit(runtime, token)
    new_token = rotated[1]
    assert _admit(runtime, new_token)[0].name == "ci"
    processors.revoke(runtime, "ci")
    with pytest.raises(auth.AuthError):
        _admit(runtime, new_token)
