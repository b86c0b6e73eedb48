"""Talking to a real `inner-plane serve`: start one and wait until healthy, register processors,
sign requests (bearer and HMAC)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import httpx

from inner_plane.runtime import Runtime
from inner_plane.services.embedded import free_port
from inner_plane.sources import credentials, processors
from tests.support.processes import ChildProcess

# httpx loads the CA bundle anew for every client it makes (about 20 ms of CPU), and the suite's
# polls made hundreds: the clients of these helpers share one context, with the same checks.
SHARED_TLS = httpx.create_ssl_context()


def wait_healthy(url: str, child: ChildProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2, verify=SHARED_TLS) as client:
        while True:
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert child.process is not None
            if child.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"API did not become healthy:\n{child.output()[-4000:]}")
            time.sleep(0.1)


def start_api(
    name: str, env: dict[str, str], log_dir: Any, workers: int = 1
) -> tuple[ChildProcess, str]:
    port = free_port()
    command = [
        sys.executable, "-m", "inner_plane", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers),
    ]  # fmt: skip
    child = ChildProcess(name, command, env, log_dir).start()
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, child)
    return child, url


# A deployment's kinds file: one external kind whose default mode is wake and which may
# interrupt, to show that grants cap a kind's default and that interrupt needs both.
KINDS_TOML = """
[kinds."external.ci.urgent"]
mode = "wake"
priority = 80
interrupt_permitted = true
"""


def register(runtime: Runtime, name: str = "ci", **grant: Any) -> str:
    """Register a processor; return its secret."""
    _, secret = processors.add(runtime, name, **grant)
    return secret


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def signed(
    name: str,
    key: str,
    body: bytes,
    path: str = "/v1/signals",
    method: str = "POST",
    idempotency_key: str = "",
    timestamp: int | None = None,
) -> dict[str, str]:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "X-Inner-Plane-Processor": name,
        "X-Inner-Plane-Timestamp": stamp,
        "X-Inner-Plane-Signature": credentials.sign(
            key, stamp, method, path, body, idempotency_key
        ),
        "Content-Type": "application/json",
    }
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()
