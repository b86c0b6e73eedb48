"""`inner-plane simulate` has no side effect: over a journal with a model configured (a stand-in
that counts every HTTP request), it makes no request, publishes no Celery message (the broker
is the stores' Redis, so a message would be a key), touches no Redis key, and leaves every table
of the journal byte-identical."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.attention import live, versions
from inner_plane.lane.runner import Lane
from inner_plane.lane.user_turns import user_turn
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from tests.support.stores import ROOT, Stores, journal_checksum

pytestmark = pytest.mark.acceptance


class Counting(BaseHTTPRequestHandler):
    requests: list[str] = []

    def _any(self) -> None:
        Counting.requests.append(f"{self.command} {self.path}")
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST = do_PUT = _any

    def log_message(self, *_args: object) -> None:
        return None


@pytest.fixture
def model_stand_in() -> Iterator[str]:
    Counting.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def redis_snapshot(rt: Runtime) -> dict[bytes, str]:
    """Every key, its value (DUMP) and whether it has a TTL."""
    import redis

    assert rt.settings.redis_url is not None
    client = redis.Redis.from_url(rt.settings.redis_url)  # raw bytes: values are binary
    out = {}
    for key in client.scan_iter(count=1000):
        dumped = client.execute_command("DUMP", key)
        ttl = client.pttl(key)
        digest = hashlib.sha256(dumped if isinstance(dumped, bytes) else str(dumped).encode())
        out[key] = f"{digest.hexdigest()}:{'ttl' if ttl and ttl > 0 else 'persist'}"
    return out


def test_a_simulation_has_no_side_effect(
    runtime: Runtime, stores: Stores, model_stand_in: str, tmp_path: Path
) -> None:
    live._sources.clear()
    fast = runtime.settings.model_copy(update={"batch_quiet_ms": 0, "batch_max_age_ms": 0})
    from dataclasses import replace

    rt = replace(runtime, settings=fast)
    since = datetime.now(UTC) - timedelta(seconds=1)
    versions.apply(rt, "[defaults]\nquiet_ms = 0\nmax_age_ms = 0\n", "test")
    for n in range(6):
        publish(kind="task.completed", source="copilot", data={"task_id": str(n)})
        publish(kind="memory.conflict", source="memory", delegate_id="other")
        if n == 3:
            user_turn("default", "hello", "sms", rt)
        Lane(rt, ScriptedAgent(), MinimalComposer()).run("default")
        Lane(rt, ScriptedAgent(), MinimalComposer()).run("other")
    # A wake left pending, and a Redis key or two of the plane's own.
    publish(kind="task.completed", source="copilot", data={"task_id": "left"})
    runtime.redis.set("inner_plane:test:marker", "1")
    candidate = tmp_path / "candidate.toml"
    candidate.write_text('[[rules]]\nkind = "task.*"\nquiet_ms = 60000\nmax_age_ms = 120000\n')

    # Still, before the snapshot: this process's metrics flushed, TTL keys kept (an expiry
    # during the run is no write of the simulator's).
    from inner_plane.services import metrics

    metrics.flush()
    for key in runtime.redis.scan_iter(count=1000):
        runtime.redis.persist(key)
    before_journal, before_redis = journal_checksum(rt.engine), redis_snapshot(rt)
    assert before_redis, "the stores' Redis holds the plane's keys"
    info_before = runtime.redis.info("stats")
    env = stores.env(
        INNER_PLANE_OPENAI_MODEL="gpt-stand-in",
        INNER_PLANE_OPENAI_BASE_URL=model_stand_in,
        INNER_PLANE_OPENAI_API_KEY="sk-test",
        INNER_PLANE_AGENT="openai",
        INNER_PLANE_BROKER_URL=stores.redis_url,
    )
    done = subprocess.run(
        [sys.executable, "-m", "inner_plane", "simulate", "--since", since.isoformat(),
         "--policy", str(candidate), "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    info_after = runtime.redis.info("stats")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["recorded"]["activations"]["total"] >= 12
    assert report["candidate"]["activations"]["total"] < report["recorded"]["activations"]["total"]
    assert Counting.requests == []
    # No read or write of any key: the keyspace counters moved only by this test's own reads.
    assert info_after["keyspace_hits"] == info_before["keyspace_hits"]
    assert info_after["keyspace_misses"] == info_before["keyspace_misses"]
    assert redis_snapshot(rt) == before_redis
    assert journal_checksum(rt.engine) == before_journal
