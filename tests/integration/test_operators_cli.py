"""`inner-plane operators add|list|remove`, and `serve` refusing to listen beyond loopback
without an operator."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from inner_plane import operators
from inner_plane.cli import app
from inner_plane.runtime import Runtime
from inner_plane.services.embedded import free_port
from tests.support.stores import ROOT, Stores

cli = CliRunner()


def test_add_list_remove(runtime: Runtime) -> None:
    added = cli.invoke(app, ["operators", "add", "alice", "--json"])
    assert added.exit_code == 0, added.output
    token = json.loads(added.stdout)["token"]
    assert token.startswith("ipo.alice.")
    assert operators.authenticate(runtime, token) is not None
    listed = cli.invoke(app, ["operators", "list", "--json"])
    assert [o["name"] for o in json.loads(listed.stdout)] == ["alice"]
    assert token not in listed.stdout and "scrypt" not in listed.stdout
    again = cli.invoke(app, ["operators", "add", "alice"])
    assert again.exit_code == 2 and "already exists" in again.stderr
    bad = cli.invoke(app, ["operators", "add", "Not A Name"])
    assert bad.exit_code == 2 and "name:" in bad.stderr
    assert operators.list_all(runtime)[0].name == "alice"  # nothing else stored
    removed = cli.invoke(app, ["operators", "remove", "alice"])
    assert removed.exit_code == 0
    assert operators.authenticate(runtime, token) is None
    missing = cli.invoke(app, ["operators", "remove", "alice"])
    assert missing.exit_code == 1 and "no operator" in missing.stderr


def test_serve_refuses_to_listen_beyond_loopback_without_an_operator(
    runtime: Runtime, stores: Stores
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "inner_plane", "serve", "--host", "0.0.0.0",
         "--port", str(free_port())],
        env=stores.env(), cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1
    assert "refusing to serve on 0.0.0.0" in refused.stderr
    assert "inner-plane operators add" in refused.stderr
