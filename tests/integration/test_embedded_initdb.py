"""The embedded PostgreSQL's first start on a data dir: when initdb refuses, the error says why
in initdb's own words and names the directory, and leaves what was there as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from inner_plane.services.embedded_postgres import EmbeddedPostgres
from inner_plane.services.server_process import EmbeddedServiceError


def test_initdb_refusing_a_directory_that_is_not_empty_says_so_and_changes_nothing(
    tmp_path: Path,
) -> None:
    server = EmbeddedPostgres(tmp_path / "plane")
    server.pgdata.mkdir(parents=True)
    stray = server.pgdata / "notes.txt"
    stray.write_text("not a cluster")
    with pytest.raises(EmbeddedServiceError) as raised:
        server.prepare()
    message = str(raised.value)
    assert str(server.pgdata) in message
    assert "initdb" in message and "exit status 1" in message
    assert "not empty" in message  # initdb's own reason, from its stderr
    assert stray.read_text() == "not a cluster"
    assert not (server.pgdata / "PG_VERSION").exists()
    assert sorted(p.name for p in server.pgdata.iterdir()) == ["notes.txt"]
