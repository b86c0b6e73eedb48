"""How `up`'s keeper tells that a `pg_ctl` is bringing up a server on the plane's data dir: real
processes named ``pg_ctl`` (a Python interpreter started with that argv[0]), with the data dir
given in each form pg_ctl accepts, relative ones against the process's working directory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inner_plane.services.embedded_postgres import EmbeddedPostgres
from tests.support.waiting import wait_until

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def spawn() -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        process = subprocess.Popen(argv, executable=sys.executable, cwd=cwd, env=env)
        started.append(process)
        # Popen returns once the exec began; the kernel sets the new command line a moment
        # later (read at once, /proc shows it empty). The keeper looks every 0.2 s at a pg_ctl
        # that runs for seconds, so only this test could see that moment.
        command_line = Path(f"/proc/{process.pid}/cmdline")
        wait_until(lambda: command_line.read_bytes(), "the command line set", 10, 0.001)

    yield start
    for process in started:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    "form",
    [
        ["-D", "{dir}"],
        ["-D{dir}"],
        ["--pgdata={dir}"],
        ["--pgdata", "{dir}"],
        ["-D", "plane/pg"],  # relative to the process's working directory
    ],
)
def test_a_pg_ctl_naming_the_data_dir_is_a_successor_coming(
    tmp_path: Path, spawn: object, form: list[str]
) -> None:
    server = EmbeddedPostgres(tmp_path / "plane")
    assert not server.successor_coming()
    args = [part.format(dir=server.pgdata) for part in form]
    spawn(["pg_ctl", "-c", SLEEP, *args, "restart"], tmp_path)  # type: ignore[operator]
    assert server.successor_coming()


def test_pgdata_from_the_environment_counts_and_other_processes_do_not(
    tmp_path: Path, spawn: object
) -> None:
    server = EmbeddedPostgres(tmp_path / "plane")
    other = EmbeddedPostgres(tmp_path / "elsewhere")
    spawn(["pg_ctl", "-c", SLEEP, "restart"], tmp_path, {"PGDATA": str(server.pgdata)})  # type: ignore[operator]
    spawn(["not_pg_ctl", "-c", SLEEP, "-D", str(other.pgdata)], tmp_path)  # type: ignore[operator]
    assert server.successor_coming()
    assert not other.successor_coming()
