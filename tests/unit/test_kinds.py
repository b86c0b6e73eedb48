"""Kinds policy: built-in defaults, rules publishers cannot override, deployment kinds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from inner_plane.signals.kinds import BUILTIN_KINDS, KindPolicy, KindRegistry
from inner_plane.signals.model import Mode, SignalDraft

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def resolve(registry: KindRegistry, **fields: Any) -> Any:
    raw = {"source": "test", **fields}
    return registry.resolve(SignalDraft.parse(raw), NOW)


@pytest.mark.parametrize(
    "kind",
    [
        "memory.inserted",
        "memory.consolidated",
        "memory.conflict",
        "memory.override",
        "task.completed",
        "task.input_required",
        "task.failed",
        "timer.due",
    ],
)
def test_builtin_kinds_are_registered(kind: str) -> None:
    policy = KindRegistry().get(kind)
    assert policy is not None and policy.kind == kind
    assert 0 <= policy.priority <= 100 and policy.max_attempts >= 1


def test_builtin_kinds_are_valid_policies() -> None:
    registry = KindRegistry(())
    for policy in BUILTIN_KINDS:
        registry.register(policy)  # would raise on a malformed built-in
    assert [p.kind for p in registry.kinds()] == sorted(p.kind for p in BUILTIN_KINDS)


@pytest.mark.parametrize("mode", [None, "ambient", "next-turn", "wake", "interrupt"])
def test_memory_inserted_is_always_ambient(mode: str | None) -> None:
    fields = {"kind": "memory.inserted"} | ({"mode": mode} if mode else {})
    resolution = resolve(KindRegistry(), **fields)
    assert resolution.mode is Mode.AMBIENT
    assert resolution.downgraded is False
    assert resolution.requested_mode == (Mode(mode) if mode else None)


def test_ambient_signals_get_the_kind_ttl_unless_given_one() -> None:
    registry = KindRegistry()
    resolution = resolve(registry, kind="memory.inserted")
    assert resolution.expires_at == NOW + timedelta(days=7)
    given = datetime(2026, 1, 2, tzinfo=UTC)
    assert resolve(registry, kind="memory.inserted", expires_at=given).expires_at == given


def test_non_ambient_signals_do_not_expire_by_default() -> None:
    assert resolve(KindRegistry(), kind="task.completed").expires_at is None


def test_interrupt_from_a_kind_not_permitted_is_downgraded_to_wake() -> None:
    resolution = resolve(KindRegistry(), kind="task.completed", mode="interrupt")
    assert resolution.mode is Mode.WAKE
    assert resolution.requested_mode is Mode.INTERRUPT
    assert resolution.downgraded is True


def test_interrupt_from_a_permitted_kind_stays_interrupt() -> None:
    registry = KindRegistry()
    registry.register(KindPolicy("ops.pager", Mode.WAKE, 90, interrupt_permitted=True))
    resolution = resolve(registry, kind="ops.pager", mode="interrupt")
    assert resolution.mode is Mode.INTERRUPT and resolution.downgraded is False


def test_unknown_kind_interrupt_is_downgraded() -> None:
    resolution = resolve(KindRegistry(), kind="external.ci.failed", mode="interrupt")
    assert resolution.mode is Mode.WAKE and resolution.downgraded is True


def test_unknown_kind_defaults_to_next_turn() -> None:
    registry = KindRegistry()
    resolution = resolve(registry, kind="external.ci.finished")
    assert resolution.mode is Mode.NEXT_TURN
    assert resolution.priority == 50
    assert resolution.policy.kind == "external.ci.finished"
    assert registry.get("external.ci.finished") is None  # not registered by being seen


def test_unknown_kind_keeps_the_mode_and_priority_given() -> None:
    resolution = resolve(KindRegistry(), kind="external.ci.finished", mode="wake", priority=80)
    assert (resolution.mode, resolution.priority) == (Mode.WAKE, 80)


def test_publisher_mode_and_priority_override_kind_defaults() -> None:
    resolution = resolve(KindRegistry(), kind="memory.consolidated", mode="next-turn", priority=1)
    assert (resolution.mode, resolution.priority) == (Mode.NEXT_TURN, 1)
    default = resolve(KindRegistry(), kind="memory.consolidated")
    assert (default.mode, default.priority) == (Mode.WAKE, 40)


def test_register_adds_and_replaces_kinds() -> None:
    registry = KindRegistry()
    registry.register(KindPolicy("external.ci.finished", Mode.WAKE, 30, max_attempts=2))
    resolution = resolve(registry, kind="external.ci.finished")
    assert (resolution.mode, resolution.priority, resolution.max_attempts) == (Mode.WAKE, 30, 2)
    registry.register(KindPolicy("task.completed", Mode.AMBIENT, 5))
    assert resolve(registry, kind="task.completed").mode is Mode.AMBIENT
    # A fresh registry is untouched: registries are not shared.
    assert resolve(KindRegistry(), kind="task.completed").mode is Mode.WAKE


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (KindPolicy("completed"), "kind 'completed' is not namespaced"),
        (KindPolicy("ops.x", priority=101), "kind 'ops.x': priority must be 0..100"),
        (KindPolicy("ops.x", priority=-1), "kind 'ops.x': priority must be 0..100"),
        (KindPolicy("ops.x", max_attempts=0), "kind 'ops.x': max_attempts must be at least 1"),
    ],
)
def test_register_rejects_bad_policies_naming_kind_and_field(
    policy: KindPolicy, message: str
) -> None:
    registry = KindRegistry()
    with pytest.raises(ValueError) as error:
        registry.register(policy)
    assert str(error.value) == message
    assert registry.get(policy.kind) is None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kinds.toml"
    path.write_text(text)
    return path


def test_load_file_adds_kinds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[kinds."external.ci.finished"]
mode = "wake"
priority = 70
max_attempts = 3
dedup_key_template = "{build}"

[kinds."ops.pager"]
mode = "interrupt"
interrupt_permitted = true
""",
    )
    registry = KindRegistry()
    registry.load_file(path)
    ci = registry.get("external.ci.finished")
    assert ci is not None
    assert (ci.mode, ci.priority, ci.max_attempts, ci.dedup_key_template) == (
        Mode.WAKE,
        70,
        3,
        "{build}",
    )
    assert resolve(registry, kind="ops.pager").mode is Mode.INTERRUPT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[kinds."ops.x"]\nmode = "loud"\n', "kind 'ops.x': mode 'loud' is not a mode"),
        ('[kinds."ops.x"]\nforced_mode = "x"\n', "kind 'ops.x': forced_mode 'x' is not a mode"),
        ('[kinds."ops.x"]\ncolour = "red"\n', "kind 'ops.x': unknown field(s) ['colour']"),
        ('[kinds."ops.x"]\npriority = 500\n', "kind 'ops.x': priority must be 0..100"),
        ('[kinds."ops.x"]\nmax_attempts = 0\n', "kind 'ops.x': max_attempts must be at least 1"),
        ('[kinds."opsx"]\nmode = "wake"\n', "kind 'opsx' is not namespaced"),
        ('[kinds."ops.x"]\npriority = "high"\n', "kind 'ops.x': priority must be int, not 'high'"),
        (
            '[kinds."ops.x"]\nmax_attempts = "x"\n',
            "kind 'ops.x': max_attempts must be int, not 'x'",
        ),
        ('[kinds."ops.x"]\npriority = true\n', "kind 'ops.x': priority must be int, not True"),
        (
            '[kinds."ops.x"]\ninterrupt_permitted = "yes"\n',
            "kind 'ops.x': interrupt_permitted must be bool, not 'yes'",
        ),
        ('[kinds."ops.x"]\nambient_ttl_s = -5\n', "kind 'ops.x': ambient_ttl_s must be at least 1"),
    ],
)
def test_load_file_errors_name_kind_and_field(tmp_path: Path, text: str, message: str) -> None:
    registry = KindRegistry()
    with pytest.raises(ValueError) as error:
        registry.load_file(write(tmp_path, text))
    assert str(error.value) == message


def test_load_file_reports_unreadable_or_malformed_files(tmp_path: Path) -> None:
    registry = KindRegistry()
    missing = tmp_path / "missing.toml"
    with pytest.raises(ValueError) as error:
        registry.load_file(missing)
    assert str(missing) in str(error.value)
    broken = write(tmp_path, "[kinds.\n")
    with pytest.raises(ValueError) as error:
        registry.load_file(broken)
    assert str(broken) in str(error.value)
