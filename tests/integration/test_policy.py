"""The attention policy as versioned data, on real PostgreSQL and Redis: the in-process lane
decides under the version in force (recorded on the activation and the signal events), applying
needs no restart, rollback restores, and bad files change nothing, through the CLI and the
operator API alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from typer.testing import CliRunner

from inner_plane import operators
from inner_plane.agent.minimal_composer import MinimalComposer
from inner_plane.agent.scripted import ScriptedAgent
from inner_plane.attention import live, versions
from inner_plane.attention.document import PolicyError
from inner_plane.cli import app
from inner_plane.cli import common as cli_common
from inner_plane.http.app import create_app
from inner_plane.journal import policy as journal_policy
from inner_plane.journal.operator.lane_view import ActivationJournal
from inner_plane.lane.runner import Lane
from inner_plane.publish import publish
from inner_plane.runtime import Runtime
from inner_plane.signals.model import Mode

runner = CliRunner()

BATCH_TASKS = """
[defaults]
quiet_ms = 0
max_age_ms = 0

[[rules]]
kind = "task.*"
quiet_ms = 300000
max_age_ms = 600000
"""


@pytest.fixture(autouse=True)
def fresh_sources() -> Iterator[None]:
    """Each test starts with no cached policy (the journal is truncated between tests)."""
    live._sources.clear()
    yield
    live._sources.clear()


def lane(rt: Runtime) -> Lane:
    return Lane(rt, ScriptedAgent(), MinimalComposer())


def invoke(rt: Runtime, *args: str) -> tuple[int, str, str]:
    cli_common._runtime = rt
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def table_counts(rt: Runtime) -> tuple[int, int]:
    with rt.engine.connect() as connection:
        versions_n = connection.execute(text("SELECT count(*) FROM policy_versions")).scalar()
        pointer_n = connection.execute(text("SELECT count(*) FROM policy_in_force")).scalar()
    return int(versions_n or 0), int(pointer_n or 0)


def events(rt: Runtime, signal_id: object) -> list[tuple[str, str, int | None]]:
    with rt.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT event, reason, policy_version FROM signal_events "
                "WHERE signal_id = :s ORDER BY id"
            ),
            {"s": signal_id},
        ).all()
    return [(r.event, r.reason, r.policy_version) for r in rows]


def test_apply_changes_the_lanes_decisions_and_rollback_restores(runtime: Runtime) -> None:
    rt = replace(
        runtime, settings=runtime.settings.model_copy(update={"batch_quiet_ms": 0,
                                                              "batch_max_age_ms": 0})
    )  # fmt: skip
    # No version applied: the settings decide, and the activation records none.
    first = publish(kind="task.completed", source="copilot", data={"task_id": "1"}).id
    [before] = lane(rt).run("default").activations
    record = ActivationJournal(rt.engine).get(before)
    assert record is not None and record.policy_version is None
    assert [e[2] for e in events(rt, first)] == [None, None][: len(events(rt, first))]

    v1 = versions.apply(rt, BATCH_TASKS, "test")
    held = publish(kind="task.completed", source="copilot", data={"task_id": "2"}).id
    # The same lane object (a running worker): no restart, the next decision follows v1.
    same = lane(rt)
    assert same.run("default").activations == []
    [deferred] = [e for e in events(rt, held) if e[0] == "deferred"]
    assert deferred[2] == v1
    assert f"policy v{v1}, rule `task.*`" in deferred[1]
    # Another kind is not held by the task.* rule: it runs at once, and takes the task along.
    other = publish(kind="memory.conflict", source="memory").id
    [during] = same.run("default").activations
    record = ActivationJournal(rt.engine).get(during)
    assert record is not None and record.policy_version == v1
    assert set(record.signal_ids) == {held, other}
    claimed = [e for e in events(rt, held) if e[0] == "claimed"]
    assert claimed and claimed[0][2] == v1

    v2 = versions.rollback(rt, v1 - 1, "test") if v1 > 1 else None
    assert v2 is None  # there is no version before the first
    empty = versions.apply(rt, "[defaults]\nquiet_ms = 0\nmax_age_ms = 0\n", "test")
    again = publish(kind="task.completed", source="copilot", data={"task_id": "3"}).id
    [after] = same.run("default").activations
    record = ActivationJournal(rt.engine).get(after)
    assert record is not None and record.policy_version == empty and record.signal_ids == [again]

    restored = versions.rollback(rt, v1, "test")
    assert restored is not None and restored > empty
    held_again = publish(kind="task.completed", source="copilot", data={"task_id": "4"}).id
    assert same.run("default").activations == []
    assert any(e[0] == "deferred" and e[2] == restored for e in events(rt, held_again))
    history = versions.history(rt)
    assert [h["version"] for h in history] == [restored, empty, v1]
    assert history[0]["note"] == f"rollback to {v1}" and history[0]["in_force"]


def test_rule_modes_apply_at_publish_with_todays_downgrade_rules(runtime: Runtime) -> None:
    versions.apply(
        runtime,
        '[[rules]]\nkind = "task.*"\nmode = "interrupt"\npriority = 5\n'
        '[[rules]]\nkind = "system.alert"\nmode = "next-turn"\n',
        "test",
    )
    task = publish(kind="task.completed", source="copilot", data={"task_id": "9"})
    # task.completed may not interrupt: the rule's interrupt is downgraded to a wake.
    assert (task.mode, task.priority) == (Mode.WAKE, 5)
    alert = publish(kind="system.alert", source="ops")
    assert alert.mode is Mode.NEXT_TURN


BAD_FILES = {
    "overlap": (
        '[[rules]]\nkind = "task.*"\nquiet_ms = 1\n[[rules]]\nkind = "task.*"\nquiet_ms = 2\n',
        "rules[1].kind",
        "same specificity",
    ),
    "unknown": (
        '[[rules]]\nkind = "nosuch.kind"\nquiet_ms = 1\n',
        "rules[0].kind",
        "no registered",
    ),
    "quiet_above_age": (
        '[[rules]]\nkind = "task.*"\nquiet_ms = 9000\nmax_age_ms = 10\n',
        "rules[0].quiet_ms",
        "above the maximum age",
    ),
    "negative_budget": (
        "[defaults]\nwake_budget_per_hour = -5\n",
        "defaults.wake_budget_per_hour",
        "greater than or equal to 1",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_name_the_field_and_change_nothing_cli(
    runtime: Runtime, tmp_path: Path, name: str
) -> None:
    good = versions.apply(runtime, BATCH_TASKS, "test")
    body, field, words = BAD_FILES[name]
    path = tmp_path / "policy.toml"
    path.write_text(body)
    for command in ("apply", "diff"):
        code, _out, err = invoke(runtime, "policy", command, str(path))
        assert code == 2, err
        assert field in err and words in err and "nothing changed" in err
    assert table_counts(runtime) == (1, 1)
    assert versions.in_force(runtime).version == good


def test_a_ten_megabyte_file_is_refused_cli_and_api(runtime: Runtime, tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_bytes(b"# " + b"x" * (10 * 1024 * 1024))
    code, _out, err = invoke(runtime, "policy", "apply", str(path))
    assert code == 2 and "document" in err and "nothing changed" in err
    _operator, token = operators.add(runtime, "alice")
    with TestClient(create_app(lambda: runtime, bind_host="127.0.0.1")) as client:
        response = client.post(
            "/v1/policy",
            headers={"Authorization": f"Bearer {token}"},
            json={"document": "#" + "x" * (10 * 1024 * 1024)},
        )
    # The API's own body bound answers first, before any route reads it.
    assert response.status_code == 413 and "exceeds" in response.json()["message"]
    assert table_counts(runtime) == (0, 0)


def test_cli_show_apply_diff_history_rollback(runtime: Runtime, tmp_path: Path) -> None:
    code, shown, _ = invoke(runtime, "policy", "show")
    assert code == 0 and "quiet_ms = 500" in shown  # today's settings, written out
    path = tmp_path / "p.toml"
    path.write_text(BATCH_TASKS)
    code, out, _ = invoke(runtime, "policy", "diff", str(path))
    assert code == 0 and '+kind = "task.*"' in out and "-quiet_ms = 500" in out
    code, out, _ = invoke(runtime, "policy", "apply", str(path), "--json")
    v1 = json.loads(out)["version"]
    code, out, _ = invoke(runtime, "policy", "diff", str(path))
    assert code == 0 and "no change" in out
    # `show` prints a file `apply` accepts, deciding alike.
    code, shown, _ = invoke(runtime, "policy", "show")
    (tmp_path / "shown.toml").write_text(shown)
    code, out, _ = invoke(runtime, "policy", "diff", str(tmp_path / "shown.toml"))
    assert "no change" in out
    code, out, _ = invoke(runtime, "policy", "rollback", "999")
    assert code == 1
    code, out, _ = invoke(runtime, "policy", "rollback", str(v1), "--json")
    assert json.loads(out) == {"version": v1 + 1, "restored": v1}
    code, out, _ = invoke(runtime, "policy", "history", "--json")
    listed = json.loads(out)
    assert [h["version"] for h in listed] == [v1 + 1, v1]
    assert listed[0]["applied_by"].startswith("cli:")


def test_operator_api_records_the_operator(runtime: Runtime) -> None:
    _operator, token = operators.add(runtime, "alice")
    h = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(lambda: runtime, bind_host="127.0.0.1")) as client:
        assert client.get("/v1/policy").status_code == 401
        assert client.post("/v1/policy", content=b"{nope").status_code == 401
        junk = client.post("/v1/policy", headers=h, content=b"{nope")
        assert junk.status_code == 422 and junk.json()["field"] == "body"
        # Strict JSON, as every body the API reads: no NaN (a version NaN would read as a float).
        nan = client.post("/v1/policy/rollback", headers=h, content=b'{"version": NaN}')
        assert nan.status_code == 422 and nan.json()["field"] == "body"
        assert "NaN is not valid JSON" in nan.json()["message"]
        untyped = client.post("/v1/policy", headers=h, json={"document": 5})
        assert untyped.status_code == 422 and untyped.json()["field"] == "document"
        zero = client.post("/v1/policy/rollback", headers=h, json={"version": 0})
        assert zero.status_code == 422 and zero.json()["field"] == "version"
        shown = client.get("/v1/policy", headers=h).json()
        assert shown["version"] is None and "quiet_ms" in shown["document"]
        bad = client.post(
            "/v1/policy", headers=h, json={"document": '[[rules]]\nkind = "zz.top"\nquiet_ms = 1'}
        )
        assert bad.status_code == 422 and bad.json()["field"] == "document.rules[0].kind"
        diff = client.post("/v1/policy/diff", headers=h, json={"document": BATCH_TASKS})
        assert diff.status_code == 200 and "task.*" in diff.json()["diff"]
        applied = client.post("/v1/policy", headers=h, json={"document": BATCH_TASKS}).json()
        assert applied["operator"] == "alice"
        version = applied["result"]["version"]
        missing = client.post("/v1/policy/rollback", headers=h, json={"version": 99})
        assert missing.status_code == 404
        back = client.post("/v1/policy/rollback", headers=h, json={"version": version}).json()
        assert back["result"] == {"version": version + 1, "restored": version}
        history = client.get("/v1/policy/history", headers=h).json()["items"]
    assert [i["applied_by"] for i in history] == ["operator:alice", "operator:alice"]
    stored = journal_policy.get(runtime.engine, version)
    assert stored is not None and stored.applied_by == "operator:alice"


def test_a_stored_row_that_no_longer_parses_leaves_the_settings_deciding(
    runtime: Runtime,
) -> None:
    rt = replace(
        runtime, settings=runtime.settings.model_copy(update={"batch_quiet_ms": 0,
                                                              "batch_max_age_ms": 0})
    )  # fmt: skip
    version = versions.apply(rt, BATCH_TASKS, "test")
    with rt.engine.begin() as connection:
        connection.execute(
            text("UPDATE policy_versions SET document = '[[[ not toml' WHERE version = :v"),
            {"v": version},
        )
    live._sources.clear()
    signal = publish(kind="task.completed", source="copilot", data={"task_id": "x"}).id
    [activation] = lane(rt).run("default").activations
    record = ActivationJournal(rt.engine).get(activation)
    assert record is not None and record.signal_ids == [signal]
    assert record.policy_version == version


def test_validation_uses_the_registry_of_the_process(runtime: Runtime) -> None:
    with pytest.raises(PolicyError):
        versions.validate(runtime, '[[rules]]\nkind = "custom.thing"\nquiet_ms = 1\n')
    from inner_plane.signals.kinds import KindPolicy

    runtime.registry.register(KindPolicy("custom.thing", Mode.WAKE))
    versions.validate(runtime, '[[rules]]\nkind = "custom.thing"\nquiet_ms = 1\n')


def test_the_simulator_page_draws_both_sides(runtime: Runtime) -> None:
    rt = replace(
        runtime, settings=runtime.settings.model_copy(update={"batch_quiet_ms": 0,
                                                              "batch_max_age_ms": 0})
    )  # fmt: skip
    since = datetime.now(UTC) - timedelta(seconds=1)
    versions.apply(rt, "[defaults]\nquiet_ms = 0\nmax_age_ms = 0\n", "test")
    for n in range(3):
        publish(kind="task.completed", source="copilot", data={"task_id": f"ui{n}"})
        lane(rt).run("default")
    _operator, token = operators.add(rt, "alice")
    h = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(lambda: rt, bind_host="127.0.0.1")) as client:
        page = client.get("/simulate", params={"since": since.isoformat()}, headers=h)
        assert page.status_code == 200, page.text
        assert page.text.count("<svg") == 2 and "Activations per hour" in page.text
        assert '<span id="fidelity">1.0</span>' in page.text
        assert 'class="series-1"' in page.text and "task.completed" in page.text
        naive = client.get("/simulate", params={"since": "2026-01-01T00:00:00"}, headers=h)
        assert naive.status_code == 422 and "since" in naive.text
        missing = client.get("/simulate", params={"version": 99}, headers=h)
        assert missing.status_code == 422 and "no policy version 99" in missing.text


def test_a_kind_batch_limit_caps_that_kind_per_activation_live(runtime: Runtime) -> None:
    version = versions.apply(
        runtime,
        '[defaults]\nquiet_ms = 0\nmax_age_ms = 0\n[[rules]]\nkind = "task.*"\nbatch_limit = 2\n',
        "test",
    )
    tasks = [
        publish(kind="task.completed", source="copilot", data={"task_id": f"k{n}"}).id
        for n in range(5)
    ]
    timer = publish(kind="timer.due", source="beat", data={"timer": "t", "scheduled_for": "1"}).id
    ran = lane(runtime).run("default").activations
    journal = ActivationJournal(runtime.engine)
    batches = [journal.get(a) for a in ran]
    assert all(b is not None and b.policy_version == version for b in batches)
    members = [set(b.signal_ids) for b in batches if b is not None]
    assert [len(m & set(tasks)) for m in members] == [2, 2, 1]
    assert timer in members[0]
    assert set().union(*members) == {*tasks, timer}


def _covering_now(zone: str) -> str:
    """Quiet hours around this very minute in ``zone``."""
    local = datetime.now(UTC).astimezone(ZoneInfo(zone))
    start, end = local - timedelta(hours=1), local + timedelta(hours=1)
    return f"{start:%H:%M}-{end:%H:%M}"


def test_quiet_hours_in_the_policy_hold_wakes_in_the_persons_zone_live(runtime: Runtime) -> None:
    from inner_plane.people import directory

    directory.add(runtime, "default", display_name="Ada", time_zone="Asia/Tokyo")
    hours = _covering_now("Asia/Tokyo")
    rt = replace(
        runtime, settings=runtime.settings.model_copy(update={"batch_quiet_ms": 0,
                                                              "batch_max_age_ms": 0})
    )  # fmt: skip
    v1 = versions.apply(rt, f'[defaults]\nquiet_hours = "{hours}"\n', "test")
    held = publish(kind="task.completed", source="copilot", data={"task_id": "q1"}).id
    same = lane(rt)
    assert same.run("default").activations == []
    [deferred] = [e for e in events(rt, held) if e[0] == "deferred"]
    assert deferred[1].startswith(f"quiet hours {hours} (Asia/Tokyo)") and deferred[2] == v1
    # An interrupt is not held; it takes nothing deferred with it.
    alert = publish(kind="system.alert", source="ops", mode="interrupt").id
    [ran] = same.run("default").activations
    record = ActivationJournal(rt.engine).get(ran)
    assert record is not None and record.signal_ids == [alert]
    # A new version without quiet hours: the same running lane follows it at once.
    v2 = versions.apply(rt, '[defaults]\nquiet_hours = "off"\n', "test")
    free = publish(kind="task.completed", source="copilot", data={"task_id": "q2"}).id
    [after] = same.run("default").activations
    record = ActivationJournal(rt.engine).get(after)
    assert record is not None and record.policy_version == v2 and free in record.signal_ids


def test_the_daily_token_budget_in_the_policy_holds_wakes_live(runtime: Runtime) -> None:
    with runtime.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO token_usage_daily (delegate_id, day, input_tokens, output_tokens) "
                "VALUES ('default', (now() AT TIME ZONE 'UTC')::date, 4000, 1000)"
            )
        )
    rt = replace(
        runtime, settings=runtime.settings.model_copy(update={"batch_quiet_ms": 0,
                                                              "batch_max_age_ms": 0})
    )  # fmt: skip
    version = versions.apply(rt, "[defaults]\ndaily_token_budget = 1000\n", "test")
    held = publish(kind="task.completed", source="copilot", data={"task_id": "b1"}).id
    assert lane(rt).run("default").activations == []
    [deferred] = [e for e in events(rt, held) if e[0] == "deferred"]
    assert deferred[1].startswith("token budget: 5000 tokens used today (limit 1000 a day)")
    assert deferred[2] == version
    versions.apply(rt, "[defaults]\ndaily_token_budget = 100000\n", "test")
    free = publish(kind="task.completed", source="copilot", data={"task_id": "b2"}).id
    [ran] = lane(rt).run("default").activations
    record = ActivationJournal(rt.engine).get(ran)
    assert record is not None and free in record.signal_ids


@pytest.mark.parametrize("workers", ["0", "65", "-1", "two"])
def test_simulate_refuses_a_bad_worker_count_by_name(
    runtime: Runtime, tmp_path: Path, workers: str
) -> None:
    path = tmp_path / "candidate.toml"
    path.write_text(BATCH_TASKS)
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    code, out, err = invoke(
        runtime, "simulate", "--since", since, "--policy", str(path), "--workers", workers
    )
    assert code == 2, (out, err)
    assert "--workers" in err and out == ""
    assert table_counts(runtime) == (0, 0)
