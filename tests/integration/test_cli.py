"""`inner-plane publish` and `inner-plane signals ...` on real PostgreSQL and Redis.

Every bad-input case exits 2 with one specific line on stderr and stores nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from inner_plane.cli import app, common
from inner_plane.runtime import Runtime
from inner_plane.signals.ids import derive_signal_id
from inner_plane.signals.model import MAX_DATA_BYTES
from tests.support.loaded import ONLY_PSYCOPG, run_reporting_loaded
from tests.support.stores import ROOT, Stores

ERROR = "inner-plane: error: "


@pytest.fixture
def cli(runtime: Runtime) -> Iterator[CliRunner]:
    # The CLI builds its own runtime from the environment (the test stores); start fresh.
    common._runtime = None
    yield CliRunner()
    common._runtime = None


def run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, list(args), catch_exceptions=False)


def one_error_line(result: Result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(ERROR), lines[0]
    return lines[0].removeprefix(ERROR)


PUBLISH = ("publish", "--kind", "task.completed", "--source", "copilot")


def publish_args(direct: bool, **options: str) -> list[str]:
    """`publish` with a valid --kind and --source unless overridden by options."""
    values = {"kind": "task.completed", "source": "copilot", **options}
    args = ["publish", *(["--direct"] if direct else [])]
    for name, value in values.items():
        args += [f"--{name.replace('_', '-')}", value]
    return args


BIG = json.dumps({"blob": "a" * MAX_DATA_BYTES}, separators=(",", ":"))

BAD_INPUT = [
    pytest.param(
        {"kind": "completed"},
        "kind: must be a namespaced kind: at least two dot-separated segments of "
        "[a-z][a-z0-9_-]*, for example 'task.completed'",
        id="kind-not-namespaced",
    ),
    pytest.param({"kind": "Task.Completed"}, "kind: must be a namespaced kind", id="kind-case"),
    pytest.param(
        {"mode": "urgent"},
        "mode: Input should be 'ambient', 'next-turn', 'wake' or 'interrupt'",
        id="unknown-mode",
    ),
    pytest.param(
        {"priority": "101"}, "priority: Input should be less than or equal to 100", id="prio-high"
    ),
    pytest.param(
        {"priority": "-1"}, "priority: Input should be greater than or equal to 0", id="prio-low"
    ),
    pytest.param(
        {"data": BIG},
        f"data: is {len(BIG)} bytes serialized; the limit is {MAX_DATA_BYTES}",
        id="oversized-data",
    ),
    pytest.param(
        {"data": '{"x": NaN}'},
        "data: must be JSON-serialisable (Out of range float values are not JSON compliant",
        id="data-nan",
    ),
    pytest.param(
        {"data": '{"x": "a\\u0000b"}'},
        "data: must not contain NUL (U+0000) characters",
        id="data-nul",
    ),
    pytest.param({"data": "[1, 2]"}, "--data: must be a JSON object, not list", id="data-list"),
    pytest.param({"data": '"text"'}, "--data: must be a JSON object, not str", id="data-string"),
    pytest.param({"data": "null"}, "--data: must be a JSON object, not NoneType", id="data-null"),
    pytest.param(
        {"data": "{bad"},
        "--data: not valid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2",
        id="bad-json",
    ),
    pytest.param(
        {"data": '{"a": 1,}'},
        # The decoder's wording differs between Python versions; the position does not.
        "--data: not valid JSON: ",
        id="bad-json-trailing-comma",
    ),
    pytest.param(
        {"source": ""},
        "source: must be 1 to 128 characters of letters, digits and '._:-' (got '')",
        id="empty-source",
    ),
    pytest.param(
        {"source": "my source"},
        "source: must be 1 to 128 characters of letters, digits and '._:-' (got 'my source')",
        id="malformed-source",
    ),
    pytest.param(
        {"source": "s" * 129},
        "source: must be 1 to 128 characters",
        id="long-source",
    ),
    pytest.param(
        {"delegate": ""},
        "delegate_id: must be 1 to 128 characters of letters, digits and '._:-' (got '')",
        id="empty-delegate",
    ),
    pytest.param(
        {"delegate": "alice/bob"},
        "delegate_id: must be 1 to 128 characters of letters, digits and '._:-' (got 'alice/bob')",
        id="malformed-delegate",
    ),
    pytest.param(
        {"trust": "sometimes"},
        "trust: Input should be 'trusted' or 'untrusted'",
        id="unknown-trust",
    ),
    pytest.param({"dedup_key": ""}, "dedup_key: String should have at least 1 character", id="dk"),
]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "celery"])
@pytest.mark.parametrize(("options", "message"), BAD_INPUT)
def test_bad_input_exits_2_with_one_line_and_stores_nothing(
    cli: CliRunner,
    runtime: Runtime,
    options: dict[str, str],
    message: str,
    direct: bool,
) -> None:
    result = run(cli, *publish_args(direct, **options))
    assert result.exit_code == 2
    assert one_error_line(result).startswith(message)
    assert result.stdout == ""
    assert runtime.signals.count() == 0
    # Nothing enqueued for a worker either (the metrics counter of rejections aside).
    assert [k for k in runtime.redis.scan_iter() if not k.startswith("inner-plane:metrics:")] == []


def test_validation_rejections_are_logged(cli: CliRunner, runtime: Runtime, context_log) -> None:
    result = run(cli, *publish_args(True, mode="urgent", source="ci"))
    assert result.exit_code == 2
    [line] = context_log.lines("rejected")
    assert "field=mode" in line and "source=ci" in line and "via=cli" in line
    assert "reason=\"Input should be 'ambient'" in line


def test_unreadable_data_file(cli: CliRunner, runtime: Runtime, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = run(cli, *PUBLISH, "--direct", "--data-file", str(missing))
    assert result.exit_code == 2
    assert one_error_line(result) == (
        f"--data-file {missing}: cannot read: No such file or directory"
    )
    result = run(cli, *PUBLISH, "--direct", "--data-file", str(tmp_path))
    assert result.exit_code == 2
    assert one_error_line(result) == f"--data-file {tmp_path}: cannot read: Is a directory"
    assert runtime.signals.count() == 0


def test_data_file_with_bad_content(cli: CliRunner, runtime: Runtime, tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text("[1]")
    result = run(cli, *PUBLISH, "--direct", "--data-file", str(path))
    assert result.exit_code == 2
    assert one_error_line(result) == f"--data-file {path}: must be a JSON object, not list"
    path.write_text(json.dumps({"x": "y" * MAX_DATA_BYTES}))
    result = run(cli, *PUBLISH, "--direct", "--data-file", str(path))
    assert result.exit_code == 2
    assert one_error_line(result).startswith("data: is ")
    assert runtime.signals.count() == 0


def test_data_and_data_file_together(cli: CliRunner, runtime: Runtime, tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text("{}")
    result = run(cli, *PUBLISH, "--direct", "--data", "{}", "--data-file", str(path))
    assert result.exit_code == 2
    assert one_error_line(result) == "give --data or --data-file, not both"
    assert runtime.signals.count() == 0


def test_data_file_is_published(cli: CliRunner, runtime: Runtime, tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text('{"task_id": "T5", "summary": "done"}')
    result = run(cli, *PUBLISH, "--direct", "--json", "--data-file", str(path))
    assert result.exit_code == 0, result.stderr
    stored = runtime.signals.get(uuid.UUID(json.loads(result.stdout)["id"]))
    assert stored is not None and stored.data == {"task_id": "T5", "summary": "done"}


def test_bad_input_through_a_real_process(stores: Stores, runtime: Runtime) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "inner_plane", *PUBLISH, "--mode", "urgent", "--data", "{}"],
        env=stores.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    stderr_lines = [
        line for line in completed.stderr.splitlines() if not line.startswith("[inner-context]")
    ]
    assert stderr_lines == [
        "inner-plane: error: mode: Input should be 'ambient', 'next-turn', 'wake' or 'interrupt'"
    ]
    assert completed.stdout == ""
    assert runtime.signals.count() == 0


def test_publish_direct_json_output(cli: CliRunner, runtime: Runtime) -> None:
    args = (*PUBLISH, "--direct", "--json", "--dedup-key", "T1:done", "--data", '{"n": 1}')
    first = run(cli, *args)
    assert first.exit_code == 0, first.stderr
    expected_id = str(derive_signal_id("default", "copilot", "T1:done"))
    # The effective mode (the kind's policy) and whether a requested interrupt was downgraded.
    modes = {"mode": "wake", "requested_mode": None, "downgraded": False}
    assert json.loads(first.stdout) == {"id": expected_id, "deduplicated": False, **modes}
    again = run(cli, *args)
    assert json.loads(again.stdout) == {"id": expected_id, "deduplicated": True, **modes}
    assert runtime.signals.count() == 1


def test_publish_json_shows_a_downgraded_interrupt(cli: CliRunner, runtime: Runtime) -> None:
    result = run(cli, *PUBLISH, "--mode", "interrupt", "--direct", "--json")
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["requested_mode"], shown["mode"], shown["downgraded"]) == (
        "interrupt",
        "wake",
        True,
    )


def test_publish_direct_applies_options(cli: CliRunner, runtime: Runtime) -> None:
    result = run(
        cli,
        "publish",
        "--kind",
        "external.ci.failed",
        "--source",
        "ci",
        "--mode",
        "wake",
        "--priority",
        "80",
        "--delegate",
        "alice",
        "--trust",
        "untrusted",
        "--data",
        '{"build": 7}',
        "--direct",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    stored = runtime.signals.get(uuid.UUID(json.loads(result.stdout)["id"]))
    assert stored is not None
    assert (stored.kind, stored.source, stored.delegate_id) == ("external.ci.failed", "ci", "alice")
    assert (stored.mode.value, stored.priority, stored.trust.value) == ("wake", 80, "untrusted")
    assert stored.data == {"build": 7}


def test_publish_direct_plain_output(cli: CliRunner, runtime: Runtime) -> None:
    result = run(cli, "publish", "--kind", "memory.inserted", "--source", "memory", "--direct")
    assert result.exit_code == 0
    [stored] = runtime.signals.list()
    assert result.stdout == f"published {stored.id} (memory.inserted, mode ambient)\n"


def test_publish_through_celery_without_a_worker_prints_the_task_id(
    cli: CliRunner, runtime: Runtime
) -> None:
    result = run(cli, *PUBLISH, "--json")
    assert result.exit_code == 0, result.stderr
    output = json.loads(result.stdout)
    assert set(output) == {"id", "task_id", "mode", "requested_mode", "downgraded"}
    uuid.UUID(output["task_id"])
    # The signal's own id (what `signals show` finds), in the message the worker will journal.
    assert output["id"] in runtime.redis.lindex("signals", 0)
    # Enqueued, not journaled: no worker runs in this test.
    assert runtime.signals.count() == 0
    assert runtime.redis.llen("signals") == 1
    runtime.redis.delete("signals")  # no worker should ever journal it later


def test_signals_list_and_show_json(cli: CliRunner, runtime: Runtime) -> None:
    ids = []
    for n in range(3):
        result = run(
            cli,
            *PUBLISH,
            "--direct",
            "--json",
            "--delegate",
            f"d{n % 2}",
            "--data",
            f'{{"n": {n}}}',
        )
        ids.append(json.loads(result.stdout)["id"])

    listed = run(cli, "signals", "list", "--json")
    assert listed.exit_code == 0
    rows = json.loads(listed.stdout)
    assert [row["id"] for row in rows] == ids[::-1]  # newest first
    assert set(rows[0]) >= {
        "id",
        "delegate_id",
        "kind",
        "source",
        "mode",
        "priority",
        "data",
        "trust",
        "dedup_key",
        "state",
        "attempts",
        "created_at",
        "available_at",
    }
    assert rows[0]["state"] == "pending" and rows[0]["data"] == {"n": 2}

    only_d0 = json.loads(run(cli, "signals", "list", "--delegate", "d0", "--json").stdout)
    assert [row["id"] for row in only_d0] == [ids[2], ids[0]]
    limited = json.loads(run(cli, "signals", "list", "--limit", "1", "--json").stdout)
    assert [row["id"] for row in limited] == [ids[2]]
    pending = json.loads(run(cli, "signals", "list", "--state", "delivered", "--json").stdout)
    assert pending == []

    shown = run(cli, "signals", "show", ids[1], "--json")
    assert shown.exit_code == 0
    record = json.loads(shown.stdout)
    assert record["id"] == ids[1] and record["delegate_id"] == "d1"
    listed_row = next(row for row in rows if row["id"] == ids[1])
    # `show` has everything `list` has (and may add detail, such as the signal's events).
    assert {key: record[key] for key in listed_row} == listed_row

    text = run(cli, "signals", "show", ids[1])
    assert f"id: {ids[1]}" in text.stdout and 'data: {"n": 1}' in text.stdout


def test_signals_list_rejects_unknown_state(cli: CliRunner) -> None:
    result = run(cli, "signals", "list", "--state", "lost")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("--state: 'lost' is not one of pending, claimed")


def test_show_unknown_or_malformed_id(cli: CliRunner) -> None:
    unknown = str(uuid.uuid4())
    result = run(cli, "signals", "show", unknown)
    assert result.exit_code == 1
    assert one_error_line(result) == f"no signal {unknown}"
    result = run(cli, "signals", "show", "not-a-uuid")
    assert result.exit_code == 2
    assert one_error_line(result) == "not a signal id: 'not-a-uuid'"


def test_signals_show_reads_the_journal_without_sqlalchemy(
    runtime: Runtime, clean_stores: Stores
) -> None:
    from inner_plane.publish import publish

    signal_id = str(publish(kind="task.completed", source="copilot", runtime=runtime).id)
    out, loaded = run_reporting_loaded(clean_stores.env(), "signals", "show", signal_id, "--json")
    record = json.loads(out)
    assert record["id"] == signal_id
    # Its whole history: its publication, and nothing since.
    assert [e["event"] for e in record["events"]] == ["published"]
    assert record["events"][0]["by"] == "source copilot"
    # Nor Redis, Celery, a server, the model client or the metrics SDK.
    assert loaded == ONLY_PSYCOPG


def test_status_reads_the_stores_without_the_plane_s_libraries(clean_stores: Stores) -> None:
    # No worker listens: no Celery ping. Redis without OpenTelemetry's metrics SDK.
    out, loaded = run_reporting_loaded(clean_stores.env(), "status", "--json")
    report = json.loads(out)
    assert report["stores"]["database"]["reachable"] is True
    assert report["stores"]["redis"]["reachable"] is True
    assert report["queues"] == {"signals": 0, "activation": 0, "user_turns": 0, "periodic": 0}
    assert loaded == {**ONLY_PSYCOPG, "redis": True}


def test_an_unreachable_journal_is_one_line_and_exit_1(clean_stores: Stores) -> None:
    from inner_plane.services.embedded import free_port

    closed = f"postgresql://inner_plane@127.0.0.1:{free_port()}/inner_plane"
    env = clean_stores.env(INNER_PLANE_DATABASE_URL=closed)
    # The plain read (show) and the engine's (list) fail alike.
    for args in (["signals", "show", str(uuid.uuid4())], ["signals", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "inner_plane", *args],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"{ERROR}the journal database: connection failed"), line
        assert "INNER_PLANE_DATABASE_URL" in line
