"""503 when the journal is unreachable: a server whose PostgreSQL connection goes through a
proxy the test cuts. Nothing is stored, and the API recovers when the journal is back."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from inner_plane.runtime import Runtime
from tests.support.http_api import bearer, encode, register, signed, start_api
from tests.support.proxy import TcpProxy
from tests.support.stores import Stores


@pytest.fixture
def proxied_api(stores: Stores, tmp_path: Path) -> Iterator[tuple[str, TcpProxy]]:
    url = make_url(stores.database_url)
    socket_dir = url.query.get("host")
    if isinstance(socket_dir, str):  # embedded PostgreSQL: a Unix socket in a directory
        name = f".s.PGSQL.{url.port or 5432}"
        # Short path: Unix socket names are limited to ~100 bytes.
        proxy_dir = Path(tempfile.mkdtemp(prefix="ipx-"))
        proxy = TcpProxy(f"{socket_dir}/{name}", listen_path=str(proxy_dir / name)).start()
        proxied_url = url.update_query_dict({"host": str(proxy_dir)})
    else:
        proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).start()
        proxied_url = url.set(host="127.0.0.1", port=proxy.port)
    proxied = proxied_url.render_as_string(hide_password=False)
    child, base = start_api("api-proxied", stores.env(INNER_PLANE_DATABASE_URL=proxied), tmp_path)
    try:
        yield base, proxy
    finally:
        child.stop()
        proxy.cut()


def test_unreachable_journal_is_503_with_retry_after_and_stores_nothing(
    runtime: Runtime, proxied_api: tuple[str, TcpProxy]
) -> None:
    base, proxy = proxied_api
    token = register(runtime, "ci")
    with httpx.Client(base_url=base, timeout=30) as http:
        assert (
            http.post(
                "/v1/signals", json={"kind": "external.ci.before"}, headers=bearer(token)
            ).status_code
            == 201
        )

        proxy.cut()
        down = http.post("/v1/signals", json={"kind": "external.ci.during"}, headers=bearer(token))
        assert down.status_code == 503
        assert down.json()["error"] == "unavailable"
        assert int(down.headers["retry-after"]) > 0
        assert http.get("/healthz").status_code == 503
        assert runtime.signals.count() == 1  # read through the real, unproxied connection

        proxy.restore()
        after = http.post("/v1/signals", json={"kind": "external.ci.after"}, headers=bearer(token))
        assert after.status_code == 201
    kinds = sorted(s.kind for s in runtime.signals.list())
    assert kinds == ["external.ci.after", "external.ci.before"]


def test_without_redis_bearer_works_and_signed_requests_are_503(
    runtime: Runtime, stores: Stores, tmp_path: Path
) -> None:
    # Redis is the fast path for the rate limit and the processor cache (both fall back), but
    # replay protection for signed requests cannot be checked without it: those are refused.
    child, base = start_api(
        "api-no-redis", stores.env(INNER_PLANE_REDIS_URL="redis://127.0.0.1:1/0"), tmp_path
    )
    try:
        token = register(runtime, "ci")
        key = register(runtime, "hooks", credential="hmac")
        body = encode({"kind": "external.hooks.x"})
        with httpx.Client(base_url=base, timeout=30) as http:
            ok = http.post("/v1/signals", json={"kind": "external.ci.x"}, headers=bearer(token))
            assert ok.status_code == 201
            refused = http.post("/v1/signals", content=body, headers=signed("hooks", key, body))
            assert refused.status_code == 503 and "retry-after" in refused.headers
    finally:
        child.stop()
    assert [s.kind for s in runtime.signals.list()] == ["external.ci.x"]
