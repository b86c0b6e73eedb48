"""The live feed across real processes: a live-only event raised in a Celery worker reaches a
reader of the API served by `inner-plane serve`, and `inner-plane timeline --follow` (another
process) prints entries as they commit."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest

from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.services.embedded import free_port
from tests.support.api_server import SseReader
from tests.support.http_api import wait_healthy
from tests.support.processes import ChildProcess, celery_worker
from tests.support.stores import Stores

pytestmark = pytest.mark.acceptance

ENV = {
    "INNER_PLANE_AGENT": "dry-run",
    "INNER_PLANE_BATCH_QUIET_MS": "0",
    "INNER_PLANE_BATCH_MAX_AGE_MS": "0",
}


def start_api(children: list[ChildProcess], stores: Stores, log_dir: Path) -> str:
    port = free_port()
    api = ChildProcess(
        "api",
        [sys.executable, "-m", "inner_plane", "serve", "--port", str(port)],
        stores.env(**ENV),
        log_dir,
    ).start()
    children.append(api)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, api)
    return base


def test_live_only_event_from_a_worker_reaches_the_api_process_and_the_cli_follows(
    runtime: Runtime, stores: Stores, log_dir: Path, children: list[ChildProcess]
) -> None:
    base = start_api(children, stores, log_dir)
    worker = celery_worker("activation", stores.env(**ENV), log_dir, queues="activation")
    children.append(worker.start())
    worker.wait_for(" ready.", 60)
    follow = ChildProcess(
        "follow",
        [sys.executable, "-m", "inner_plane", "timeline", "--follow", "--api", base],
        stores.env(**ENV),
        log_dir,
    )
    children.append(follow.start())
    follow.wait_for("following", 60)

    with httpx.stream("GET", f"{base}/v1/events", timeout=httpx.Timeout(60)) as response:
        signal = publish(kind="task.completed", source="copilot", data={"task_id": "T9"})
        for _ident, name, data in SseReader(response):
            event = json.loads(data)
            if name == "live":
                record = event["data"]
                assert record["type"] == "memory.retrieval"
                assert record["payload"]["status"] == "pending"
                assert record["live_only"] is True
                break

    # The CLI in its own process prints the activation as it commits.
    follow.wait_for("Internal activity started", 60)
    follow.wait_for("Internal activity completed", 60)
    assert "Inner Plane: memory retrieval: pending" in follow.output()
    assert str(signal.id) not in follow.output()  # entries, not raw payloads


def test_ctrl_c_with_a_live_feed_client_connected_stops_at_once_without_a_traceback(
    stores: Stores, runtime: Runtime, children: list[ChildProcess], log_dir: Path
) -> None:
    """The server ends its live-feed streams when told to stop, instead of waiting for them
    until its graceful-shutdown timeout and cancelling them (a CancelledError traceback)."""
    import signal
    import threading

    base = start_api(children, stores, log_dir)
    api = children[-1]
    opened = threading.Event()
    ended: list[str] = []

    def client() -> None:
        try:
            with httpx.stream("GET", f"{base}/v1/events", timeout=httpx.Timeout(5, read=60)) as r:
                opened.set()
                for _line in r.iter_lines():
                    pass
            ended.append("closed by the server")
        except httpx.HTTPError as error:
            ended.append(f"error: {type(error).__name__}")

    reader = threading.Thread(target=client, daemon=True)
    reader.start()
    assert opened.wait(30)
    time.sleep(0.5)  # the stream is past its headers and waiting for events
    offset = len(api.output())
    assert api.process is not None
    api.process.send_signal(signal.SIGINT)
    assert api.process.wait(30) == 0
    reader.join(10)
    assert ended == ["closed by the server"]
    tail = api.output()[offset:]
    assert "CancelledError" not in tail and "Traceback" not in tail, tail
    assert "timeout graceful shutdown exceeded" not in tail, tail
