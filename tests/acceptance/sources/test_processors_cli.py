"""`inner-plane processors add|list|revoke|rotate` as an operator runs it: the secret is shown
once and stored only hashed; revoke and rotate take effect on the running API at once."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
from sqlalchemy import text

from inner_plane.runtime import Runtime
from inner_plane.sources import credentials
from tests.support.http_api import bearer, encode, signed
from tests.support.stores import ROOT, Stores


def cli(stores: Stores, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inner_plane", "processors", *args],
        env=stores.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _row_text(runtime: Runtime) -> str:
    with runtime.engine.connect() as connection:
        return str(connection.execute(text("SELECT p::text FROM processors p")).scalar_one())


def test_add_shows_the_token_once_and_stores_only_its_hash(
    runtime: Runtime, stores: Stores, http: httpx.Client
) -> None:
    added = cli(stores, "add", "ci", "--delegate", "default", "--delegate", "ops", "--json")
    assert added.returncode == 0, added.stderr
    shown = json.loads(added.stdout)
    token = shown["secret"]
    assert credentials.token_processor(token) == "ci"
    assert shown["delegates"] == ["default", "ops"] and shown["trusted"] is False

    row = _row_text(runtime)
    assert token not in row and token.split(".")[-1] not in row
    with runtime.engine.connect() as connection:
        stored = connection.execute(text("SELECT secret_hash FROM processors")).scalar_one()
    assert stored.startswith("scrypt$") and credentials.verify_token(token, stored)

    listed = cli(stores, "list", "--json")
    assert listed.returncode == 0
    assert token not in listed.stdout and "secret" not in listed.stdout
    assert json.loads(listed.stdout)[0]["name"] == "ci"

    ok = http.post("/v1/signals", json={"kind": "external.ci.x"}, headers=bearer(token))
    assert ok.status_code == 201


def test_revoke_makes_requests_401(runtime: Runtime, stores: Stores, http: httpx.Client) -> None:
    token = json.loads(cli(stores, "add", "ci", "--json").stdout)["secret"]
    revoked = cli(stores, "revoke", "ci")
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    denied = http.post("/v1/signals", json={"kind": "external.ci.x"}, headers=bearer(token))
    assert denied.status_code == 401
    assert runtime.signals.count() == 0
    assert json.loads(cli(stores, "list", "--json").stdout)[0]["revoked_at"] is not None
    # Revoked names stay taken, and a revoked processor cannot be rotated back to life.
    assert cli(stores, "add", "ci").returncode == 2
    assert cli(stores, "rotate", "ci").returncode == 2


def test_rotate_invalidates_the_old_secret(
    runtime: Runtime, stores: Stores, http: httpx.Client
) -> None:
    old = json.loads(cli(stores, "add", "ci", "--json").stdout)["secret"]
    assert http.post("/v1/signals", json={"kind": "external.ci.a"}, headers=bearer(old)).is_success
    rotated = cli(stores, "rotate", "ci")
    assert rotated.returncode == 0
    new = rotated.stdout.split("token: ")[1].split()[0]
    assert "shown once" in rotated.stderr
    assert new != old
    stale = http.post("/v1/signals", json={"kind": "external.ci.b"}, headers=bearer(old))
    assert stale.status_code == 401
    fresh = http.post("/v1/signals", json={"kind": "external.ci.c"}, headers=bearer(new))
    assert fresh.status_code == 201
    assert sorted(s.kind for s in runtime.signals.list()) == ["external.ci.a", "external.ci.c"]


def test_hmac_processor_rotation(runtime: Runtime, stores: Stores, http: httpx.Client) -> None:
    old = json.loads(cli(stores, "add", "hooks", "--credential", "hmac", "--json").stdout)
    assert old["credential"] == "hmac"
    new = json.loads(cli(stores, "rotate", "hooks", "--json").stdout)
    body = encode({"kind": "external.hooks.x"})
    stale = http.post("/v1/signals", content=body, headers=signed("hooks", old["secret"], body))
    fresh = http.post("/v1/signals", content=body, headers=signed("hooks", new["secret"], body))
    assert (stale.status_code, fresh.status_code) == (401, 201)


def test_bad_arguments_exit_2_with_one_line_and_store_nothing(
    runtime: Runtime, stores: Stores
) -> None:
    for args, message in [
        (("add", "Bad_Name"), "name 'Bad_Name'"),
        (("add", "ci", "--credential", "password"), "credential 'password'"),
        (("add", "ci", "--max-mode", "shout"), "max mode 'shout'"),
        (("add", "ci", "--delegate", "no spaces"), "delegate 'no spaces'"),
        (("revoke", "nobody"), "no processor named 'nobody'"),
    ]:
        result = cli(stores, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("inner-plane: error: ") and message in result.stderr
    with runtime.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM processors")).scalar_one() == 0
    stdio = subprocess.run(
        [sys.executable, "-m", "inner_plane", "mcp", "--processor", "nobody"],
        env=stores.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert stdio.returncode == 2 and "processor 'nobody': not registered" in stdio.stderr
