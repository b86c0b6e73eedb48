"""Flower under `inner-plane up` / `inner-plane flower` is never served without basic
authentication: credentials are made once in the data dir (owner-only) and handed to Flower
through the environment, unless the deployment set its own."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from inner_plane.cli import processes as cli_processes
from inner_plane.services.processes import FLOWER_CREDENTIALS, flower_credentials


def test_credentials_are_made_once_and_kept_private(tmp_path: Path) -> None:
    made = flower_credentials(tmp_path)
    user, _, password = made.partition(":")
    assert user and len(password) >= 24
    assert flower_credentials(tmp_path) == made
    mode = stat.S_IMODE((tmp_path / FLOWER_CREDENTIALS).stat().st_mode)
    assert mode == 0o600


@pytest.mark.parametrize("preset", [None, "ops:s3cret"])
def test_flower_is_started_with_basic_auth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preset: str | None
) -> None:
    monkeypatch.setenv("INNER_PLANE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("INNER_PLANE_DATABASE_URL", "postgresql://x@localhost/x")
    monkeypatch.setenv("INNER_PLANE_REDIS_URL", "redis://localhost:1/0")
    monkeypatch.delenv("FLOWER_AUTH", raising=False)
    if preset is None:
        monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    else:
        monkeypatch.setenv("FLOWER_BASIC_AUTH", preset)
    from inner_plane.config import load_settings

    load_settings.cache_clear()
    started: dict[str, dict[str, str]] = {}

    def fake_exec(_file: str, command: list[str], env: dict[str, str]) -> None:
        started["env"] = env
        assert not any("basic" in part for part in command)  # never on the command line

    monkeypatch.setattr(cli_processes.os, "execvpe", fake_exec)
    try:
        cli_processes.flower()
    finally:
        load_settings.cache_clear()
    expected = preset or (tmp_path / FLOWER_CREDENTIALS).read_text().strip()
    assert started["env"]["FLOWER_BASIC_AUTH"] == expected
