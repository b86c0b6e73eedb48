"""INNER_PLANE_API_PUBLISH_THREADS bounds how many publications one API process carries out at
once; the rest wait their turn and are answered, none refused."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from inner_plane.config import ConfigError, build_settings
from inner_plane.http import app as http_app
from inner_plane.runtime import Runtime
from inner_plane.sources import processors

REQUESTS = 8


@pytest.mark.parametrize("threads", [1, 3])
def test_publications_beyond_the_bound_wait_their_turn(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    # The API process reads its settings once (load_settings): this one's bound is ``threads``.
    monkeypatch.setattr(
        http_app, "load_settings", lambda: build_settings(api_publish_threads=threads)
    )
    _, token = processors.add(runtime, f"bounded{threads}", rate_limit=10_000)
    running = seen = most = 0
    turn = threading.Condition()
    real = http_app.publish_request

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal running, seen, most
        with turn:
            running += 1
            seen += 1
            most = max(most, running)
            turn.notify_all()
            # Hold each publication until the bound is reached (or no more can come), then a
            # little longer: a limiter that let more through would show it here.
            turn.wait_for(lambda: running >= threads or seen == REQUESTS, timeout=10)
        time.sleep(0.05)
        try:
            return real(*args, **kwargs)
        finally:
            with turn:
                running -= 1

    monkeypatch.setattr(http_app, "publish_request", counted)
    app = http_app.create_app(lambda: runtime, bind_host="127.0.0.1")

    async def send_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/v1/signals",
                        json={"kind": f"external.bounded{threads}.finished", "data": {"n": n}},
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    for n in range(REQUESTS)
                )
            )

    answers = asyncio.run(send_all())
    assert [a.status_code for a in answers] == [201] * REQUESTS
    assert len({a.json()["id"] for a in answers}) == REQUESTS
    assert most == threads


def test_the_bound_is_validated() -> None:
    with pytest.raises(ConfigError, match="INNER_PLANE_API_PUBLISH_THREADS"):
        build_settings(api_publish_threads=0)
    assert build_settings().api_publish_threads == 4
