"""The MCP adapter with the official `mcp` client: streamable HTTP against the running
`inner-plane serve` (same credentials and grants as the HTTP API), and stdio against
`inner-plane mcp --processor NAME`."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from inner_plane.runtime import Runtime
from inner_plane.signals.model import Trust
from inner_plane.sources import credentials, processors
from tests.support.http_api import register
from tests.support.stores import ROOT, Stores

Session = Callable[[Client], Awaitable[Any]]


class SignedAuth(httpx2.Auth):
    """HMAC request signing for every MCP HTTP request (what a signing processor does)."""

    requires_request_body = True

    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, Any, None]:
        stamp = str(int(time.time()))
        path = request.url.raw_path.decode()
        request.headers["X-Inner-Plane-Processor"] = self.name
        request.headers["X-Inner-Plane-Timestamp"] = stamp
        request.headers["X-Inner-Plane-Signature"] = credentials.sign(
            self.key, stamp, request.method, path, request.content
        )
        yield request


def over_http(url: str, session: Session, **client: Any) -> Any:
    async def main() -> Any:
        http = create_mcp_http_client(**client)
        async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
            return await session(mcp)

    return anyio.run(main)


def over_stdio(env: dict[str, str], name: str, session: Session) -> Any:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "inner_plane", "mcp", "--processor", name],
        env=env,
        cwd=str(ROOT),
    )

    async def main() -> Any:
        async with Client(params) as mcp:
            return await session(mcp)

    return anyio.run(main)


def _text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def _publish_and_check(mcp: Client) -> dict[str, Any]:
    tools = sorted(tool.name for tool in (await mcp.list_tools()).tools)
    published = await mcp.call_tool(
        "publish_signal", {"kind": "external.ci.mcp", "data": {"n": 1}, "dedup_key": "m-1"}
    )
    assert not published.is_error, _text(published)
    retry = await mcp.call_tool(
        "publish_signal", {"kind": "external.ci.mcp", "data": {"n": 2}, "dedup_key": "m-1"}
    )
    outside = await mcp.call_tool("publish_signal", {"kind": "external.other.x"})
    wrong_delegate = await mcp.call_tool(
        "publish_signal", {"kind": "external.ci.x", "delegate_id": "stranger"}
    )
    invalid = await mcp.call_tool("publish_signal", {"kind": "external.ci.x", "priority": 101})
    signal_id = published.structured_content["id"]  # type: ignore[index]
    status = await mcp.call_tool("signal_status", {"signal_id": signal_id})
    missing = await mcp.call_tool("signal_status", {"signal_id": str(uuid.uuid4())})
    return {
        "tools": tools,
        "published": published.structured_content,
        "retry": retry.structured_content,
        "outside": (outside.is_error, _text(outside)),
        "wrong_delegate": (wrong_delegate.is_error, _text(wrong_delegate)),
        "invalid": (invalid.is_error, _text(invalid)),
        "status": status.structured_content,
        "missing": (missing.is_error, _text(missing)),
    }


def _assert_session(runtime: Runtime, seen: dict[str, Any], trust: Trust) -> None:
    assert seen["tools"] == ["publish_signal", "signal_status"]
    published = seen["published"]
    assert published["deduplicated"] is False and published["trust"] == trust.value
    assert seen["retry"]["id"] == published["id"] and seen["retry"]["deduplicated"] is True
    assert seen["outside"][0] and "403 forbidden: kind" in seen["outside"][1]
    assert seen["wrong_delegate"][0] and "403 forbidden: delegate_id" in seen["wrong_delegate"][1]
    assert seen["invalid"][0] and "422 invalid_signal: priority" in seen["invalid"][1]
    assert seen["status"]["state"] == "pending" and seen["status"]["source"] == "external.ci"
    assert seen["missing"][0] and "404" in seen["missing"][1]
    # Only the one accepted signal is in the journal, with its trust label.
    [stored] = runtime.signals.list()
    assert str(stored.id) == published["id"]
    assert stored.trust is trust and stored.data == {"n": 1}


def test_mcp_over_http_with_a_bearer_token(runtime: Runtime, api: str) -> None:
    token = register(runtime, "ci")
    seen = over_http(api, _publish_and_check, headers={"Authorization": f"Bearer {token}"})
    _assert_session(runtime, seen, Trust.UNTRUSTED)


def test_mcp_over_http_with_hmac_signed_requests(runtime: Runtime, api: str) -> None:
    key = register(runtime, "ci", credential="hmac", trusted=True)
    seen = over_http(api, _publish_and_check, auth=SignedAuth("ci", key))
    _assert_session(runtime, seen, Trust.TRUSTED)


def test_mcp_over_http_refuses_missing_bad_and_revoked_credentials(
    runtime: Runtime, api: str
) -> None:
    token = register(runtime, "ci")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(f"{api}/mcp", json=rpc, headers=headers).status_code == 401
    wrong = {**headers, "Authorization": "Bearer ipt.ci.wrong"}
    assert httpx.post(f"{api}/mcp", json=rpc, headers=wrong).status_code == 401

    async def publish(mcp: Client) -> Any:
        return await mcp.call_tool("publish_signal", {"kind": "external.ci.x"})

    processors.revoke(runtime, "ci")
    with pytest.raises(Exception):  # noqa: B017 - the client surfaces the 401 as an error
        over_http(api, publish, headers={"Authorization": f"Bearer {token}"})
    assert runtime.signals.count() == 0


def test_mcp_over_stdio_for_a_local_processor(runtime: Runtime, stores: Stores) -> None:
    register(runtime, "ci")
    seen = over_stdio(stores.env(), "ci", _publish_and_check)
    _assert_session(runtime, seen, Trust.UNTRUSTED)


def test_mcp_over_stdio_stops_serving_a_processor_revoked_meanwhile(
    runtime: Runtime, stores: Stores
) -> None:
    register(runtime, "ci")

    async def revoked_midway(mcp: Client) -> tuple[bool, bool, str]:
        first = await mcp.call_tool("publish_signal", {"kind": "external.ci.a"})
        processors.revoke(runtime, "ci")
        second = await mcp.call_tool("publish_signal", {"kind": "external.ci.b"})
        return first.is_error, second.is_error, _text(second)

    first_error, second_error, text = over_stdio(stores.env(), "ci", revoked_midway)
    assert not first_error and second_error and "401" in text
    assert [s.kind for s in runtime.signals.list()] == ["external.ci.a"]
