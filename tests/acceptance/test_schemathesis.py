"""schemathesis (an independent client: it knows only the OpenAPI document) against a running
`inner-plane serve`, with an operator's and with a processor's credential, over every operation,
a bounded number of examples each, positive and negative: no 5xx, every answer conforms to the
declared status codes, content types and schemas, and `ignored_auth` re-sends each request
without and with a wrong credential and requires a 401 (so a request with invalid parameters and
no credential is refused for the credential first). Also seen failing on a planted route that
answers 500."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inner_plane import operators
from inner_plane.runtime import Runtime
from inner_plane.services.embedded import free_port
from inner_plane.sources import processors
from tests.support.processes import ChildProcess
from tests.support.stores import ROOT, Stores

pytestmark = pytest.mark.acceptance

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
# Its settings file (why each is set is said there).
CONFIG = Path(__file__).with_name("schemathesis.toml")
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
        "ignored_auth",
    ]
)
# The live feed is a server-sent event stream that stays open by design (a client reads it
# until it leaves): schemathesis would wait on it until its timeout. tests/integration/
# test_live_feed.py and the property tests of every served route cover it.
STREAMS = "/v1/events"


def schemathesis(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            SCHEMATHESIS, "--config-file", str(CONFIG), "run",
            f"http://127.0.0.1:{port}/openapi.json",
            "--checks", CHECKS, "--max-examples", "6", "--mode", "all",
            "--phases", "examples,coverage,fuzzing", "--generation-deterministic",
            "--request-timeout", "20", "--workers", "1", "--no-color", *args,
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def serve(name: str, command: list[str], env: dict[str, str], tmp_path: Path) -> ChildProcess:
    return ChildProcess(name, command, env, tmp_path).start()


@pytest.mark.slow(
    reason="schemathesis generates and sends hundreds of requests per credential against a real "
    "server: 22 s on a quiet run, 61 s in a loaded fresh-clone run"
)
def test_every_operation_with_each_credential(
    stores: Stores, runtime: Runtime, tmp_path: Path, children: list[ChildProcess]
) -> None:
    port = free_port()
    # schemathesis sends wrong credentials on purpose (ignored_auth) and many requests: the
    # throttles, which answer 429 by design, are raised past what the run sends.
    env = stores.env(INNER_PLANE_API_PORT=str(port), INNER_PLANE_AUTH_FAILURES_PER_MINUTE="100000")
    api = serve("api", [sys.executable, "-m", "inner_plane", "serve"], env, tmp_path)
    children.append(api)
    _operator, operator_token = operators.add(runtime, "schemathesis")
    _processor, processor_token = processors.add(
        runtime, "schemathesis", delegates=("*",), rate_limit=100_000
    )
    api.wait_for("Uvicorn running", timeout=90)

    as_operator = schemathesis(
        port, "--header", f"Authorization: Bearer {operator_token}", "--exclude-path", STREAMS
    )
    assert as_operator.returncode == 0, as_operator.stdout[-6000:] + as_operator.stderr[-2000:]
    assert "No issues found" in as_operator.stdout or " passed" in as_operator.stdout

    # The processors' operations (publish, status), with a processor's credential.
    as_processor = schemathesis(
        port, "--header", f"Authorization: Bearer {processor_token}", "--exclude-tag", "operator"
    )
    assert as_processor.returncode == 0, as_processor.stdout[-6000:] + as_processor.stderr[-2000:]


def test_a_route_answering_500_fails_the_run(
    stores: Stores, tmp_path: Path, children: list[ChildProcess]
) -> None:
    port = free_port()
    env = stores.env(INNER_PLANE_LOG_LEVEL="WARNING")
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "tests.support.planted_api:app",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    api = serve("planted", command, env, tmp_path)
    children.append(api)
    api.wait_for("Uvicorn running", timeout=90)
    done = schemathesis(port, "--include-path-regex", "^/v1/planted")
    assert done.returncode != 0, done.stdout[-4000:]
    assert "Server error" in done.stdout, done.stdout[-4000:]
