"""The attention policy document: validation naming the field, and the pure resolution of the
rule that applies to a (delegate, kind)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane.attention.document import (
    MAX_DOCUMENT_BYTES,
    AttentionPolicy,
    PolicyDocument,
    PolicyError,
    SettingsDefaults,
    matches,
    overlaps,
    parse_document,
    render_document,
    settings_policy,
)
from inner_plane.attention.policy import wait_before_claim, window_by_kind
from inner_plane.config import build_settings
from inner_plane.journal.lane.claims import DueWindow, KindWindow
from inner_plane.lane.decide import LanePolicy, Run, Wait, decide
from inner_plane.signals.kinds import BUILTIN_KINDS
from inner_plane.signals.model import Mode

BASE = SettingsDefaults(quiet_ms=500, max_age_ms=2_000, batch_limit=100, wake_budget_per_hour=60)
KINDS = [k.kind for k in BUILTIN_KINDS]


def parse(text: str) -> AttentionPolicy:
    return AttentionPolicy.build(parse_document(text, KINDS, BASE), BASE, version=7)


def problems(text: str | bytes) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as caught:
        parse_document(text, KINDS, BASE)
    return caught.value.problems


def test_an_empty_document_is_todays_settings() -> None:
    settings = build_settings(
        batch_quiet_ms=250, batch_max_age_ms=1500, batch_limit=9, wake_budget_per_hour=7
    )
    base = SettingsDefaults.of(settings)
    policy = AttentionPolicy.build(parse_document("", KINDS, base), base)
    assert policy.uniform and not policy.sets_modes
    assert LanePolicy.for_delegate(policy, "d") == LanePolicy.of(settings)
    timing = policy.for_kind("d", "task.completed")
    assert (timing.quiet_s, timing.max_age_s, timing.rule) == (0.25, 1.5, None)


def test_most_specific_rule_wins_field_by_field() -> None:
    policy = parse(
        """
        [defaults]
        quiet_ms = 400
        [[rules]]
        kind = "task.*"
        quiet_ms = 300000
        max_age_ms = 600000
        priority = 20
        [[rules]]
        kind = "task.failed"
        quiet_ms = 0
        [[rules]]
        delegate = "alice"
        kind = "task.*"
        mode = "next-turn"
        [[rules]]
        delegate = "alice"
        wake_budget_per_hour = 5
        batch_limit = 3
        """
    )
    completed = policy.for_kind("bob", "task.completed")
    assert (completed.quiet_s, completed.max_age_s, completed.rule) == (300.0, 600.0, "task.*")
    assert completed.priority == 20 and completed.mode is None
    failed = policy.for_kind("bob", "task.failed")
    # The exact kind sets the quiet period; the maximum age still comes from task.*.
    assert (failed.quiet_s, failed.max_age_s, failed.rule) == (0.0, 600.0, "task.failed")
    alice = policy.for_kind("alice", "task.completed")
    assert alice.mode is Mode.NEXT_TURN and alice.quiet_s == 300.0
    other = policy.for_kind("bob", "memory.conflict")
    assert (other.quiet_s, other.max_age_s, other.rule) == (0.4, 2.0, None)
    assert policy.for_delegate("alice").wake_budget_per_hour == 5
    assert policy.for_delegate("alice").batch_limit == 3
    assert policy.for_delegate("bob").wake_budget_per_hour == 60
    lane = LanePolicy.for_delegate(policy, "alice")
    assert (lane.version, lane.batch_limit, lane.wake_budget_per_hour) == (7, 3, 5)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            '[[rules]]\nkind = "task.*"\nquiet_ms = 1\n[[rules]]\nkind = "task.*"\nquiet_ms = 2',
            "rules[1].kind",
            "overlaps rules[0]",
        ),
        (
            '[[rules]]\nkind = "external.*.failed"\nquiet_ms = 1\n[[rules]]\n'
            'kind = "external.deploy.*"\n'
            "quiet_ms = 2",
            "rules[1].kind",
            "same specificity",
        ),
        ('[[rules]]\nkind = "nosuch.thing"\nquiet_ms = 1', "rules[0].kind", "no registered"),
        ('[[rules]]\nkind = "Task"\nquiet_ms = 1', "rules[0].kind", "not a kind pattern"),
        (
            '[[rules]]\nkind = "task.*"\nquiet_ms = 5000\nmax_age_ms = 4000',
            "rules[0].quiet_ms",
            "above the maximum age",
        ),
        ("[defaults]\nquiet_ms = 3000", "defaults.quiet_ms", "above the maximum age"),
        (
            '[[rules]]\nkind = "task.*"\nmax_age_ms = 100',
            "rules[0].max_age_ms",
            "above the maximum age",
        ),
        ("[defaults]\nwake_budget_per_hour = -1", "defaults.wake_budget_per_hour", "greater"),
        (
            '[[rules]]\ndelegate = "a"\nwake_budget_per_hour = -3',
            "rules[0].wake_budget_per_hour",
            "greater",
        ),
        (
            '[[rules]]\nkind = "task.*"\nwake_budget_per_hour = 3',
            "rules[0].wake_budget_per_hour",
            "whole delegate",
        ),
        (
            '[[rules]]\nkind = "task.*"\nquiet_hours = "22:00-07:00"',
            "rules[0].quiet_hours",
            "whole delegate",
        ),
        (
            '[[rules]]\nkind = "task.*"\ndaily_token_budget = 9',
            "rules[0].daily_token_budget",
            "whole delegate",
        ),
        ('[defaults]\nquiet_hours = "22:00"', "defaults.quiet_hours", "HH:MM-HH:MM"),
        ('[defaults]\nquiet_hours = "25:00-07:00"', "defaults.quiet_hours", "HH:MM"),
        ('[defaults]\nquiet_hours = "07:00-07:00"', "defaults.quiet_hours", "must differ"),
        ("[defaults]\ndaily_token_budget = -5", "defaults.daily_token_budget", "greater"),
        ("[defaults]\ndaily_token_budget = 0", "defaults.daily_token_budget", "greater"),
        ("[[rules]]\nquiet_ms = 3", "rules[0]", "names a kind pattern, a delegate"),
        ('[[rules]]\nkind = "task.*"\nmode = "shout"', "rules[0].mode", "Input should be"),
        ('[[rules]]\nkind = "task.*"\nquiet_ms = "5"', "rules[0].quiet_ms", "integer"),
        ("[defaults]\nbogus = 1", "defaults.bogus", "Extra inputs"),
        ("[defaults]\ntoken_budget = 1000", "defaults.token_budget", "Extra inputs"),
        ("[defaults", "document", "not TOML"),
        ('[[rules]]\ndelegate = "no spaces"\nquiet_ms = 1', "rules[0].delegate", "delegate id"),
    ],
)
def test_bad_documents_name_the_field_and_the_reason(text: str, field: str, words: str) -> None:
    found = problems(text)
    assert any(where == field and words in why for where, why in found), found


def test_a_ten_megabyte_file_is_refused_before_parsing() -> None:
    found = problems(b"# " + b"x" * (10 * 1024 * 1024))
    assert found[0][0] == "document" and str(MAX_DOCUMENT_BYTES) in found[0][1]


def test_non_utf8_is_refused() -> None:
    assert problems(b"\xff\xfe")[0] == ("document", "not UTF-8 text")


def test_open_namespaces_and_patterns_of_known_kinds_are_accepted() -> None:
    policy = parse(
        '[[rules]]\nkind = "external.deploy.failed"\nquiet_ms = 0\nmax_age_ms = 0\n'
        '[[rules]]\nkind = "external.*"\nquiet_ms = 1000\n'
        '[[rules]]\nkind = "*"\npriority = 50\n'
    )
    assert policy.for_kind("d", "external.deploy.failed").max_age_s == 0.0
    assert policy.for_kind("d", "external.ci.finished").quiet_s == 1.0
    assert policy.for_kind("d", "timer.due").priority == 50


def test_show_renders_a_document_that_parses_back_to_the_same_policy() -> None:
    policy = parse(
        '[[rules]]\nname = "copilot"\nkind = "task.*"\ndelegate = "a"\nmode = "wake"\n'
        'quiet_ms = 300000\nmax_age_ms = 600000\n[[rules]]\ndelegate = "b"\nbatch_limit = 4\n'
    )
    again = parse(render_document(policy))
    assert again.document.rules == policy.document.rules
    assert again.base == policy.base
    assert parse(render_document(settings_policy(BASE))).base == BASE


def test_batch_limit_per_kind_quiet_hours_and_token_budget_resolve_per_delegate() -> None:
    policy = parse(
        '[defaults]\ndaily_token_budget = 50000\nquiet_hours = "22:00-07:00"\n'
        '[[rules]]\nkind = "task.*"\nbatch_limit = 5\n'
        '[[rules]]\nkind = "task.completed"\ndelegate = "a"\nbatch_limit = 2\n'
        '[[rules]]\ndelegate = "a"\nquiet_hours = "off"\ndaily_token_budget = 9\n'
        '[[rules]]\ndelegate = "b"\nbatch_limit = 40\n'
    )
    assert policy.limits_kinds
    assert policy.for_kind("z", "task.completed").batch_limit == 5
    assert policy.for_kind("a", "task.completed").batch_limit == 2
    assert policy.for_kind("a", "timer.due").batch_limit is None
    # A delegate rule's batch limit is the whole batch's, never a kind's.
    assert policy.for_kind("b", "timer.due").batch_limit is None
    assert policy.for_delegate("b").batch_limit == 40
    z, a = policy.for_delegate("z"), policy.for_delegate("a")
    assert (z.daily_token_budget, str(z.quiet_hours)) == (50000, "22:00-07:00")
    assert (a.daily_token_budget, a.quiet_hours) == (9, None)
    lane_z = LanePolicy.for_delegate(policy, "z")
    assert lane_z.daily_token_budget == 50000 and str(lane_z.quiet_hours) == "22:00-07:00"
    again = parse(render_document(policy))
    assert again.base == policy.base and again.document.rules == policy.document.rules


def test_the_token_budget_setting_is_the_documents_default() -> None:
    settings = build_settings(daily_token_budget=1234)
    base = SettingsDefaults.of(settings)
    policy = AttentionPolicy.build(parse_document("", KINDS, base), base)
    assert LanePolicy.for_delegate(policy, "d").daily_token_budget == 1234
    assert "daily_token_budget = 1234" in render_document(policy)


segments = st.sampled_from(["a", "b", "c", "*"])
patterns = (
    st.lists(segments, min_size=1, max_size=4)
    .map(".".join)
    .filter(
        lambda p: p == "*" or "." in p  # kind patterns are namespaced, or "*"
    )
)
kinds = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=2, max_size=5).map(".".join)


@given(patterns, patterns, kinds)
def test_overlap_is_sound(a: str, b: str, kind: str) -> None:
    """A kind matching both patterns means they overlap."""
    if matches(a, kind) and matches(b, kind):
        assert overlaps(a, b)


@given(patterns, patterns)
def test_overlap_is_complete(a: str, b: str) -> None:
    """Patterns said to overlap have a kind matching both (built from their segments)."""
    if not overlaps(a, b):
        return
    sa, sb = a.split("."), b.split(".")
    length = max(len(sa), len(sb))
    witness = []
    for i in range(length):
        x = sa[i] if i < len(sa) else "*"
        y = sb[i] if i < len(sb) else "*"
        witness.append(x if x != "*" else (y if y != "*" else "d"))
    kind = ".".join(witness)
    assert matches(a, kind) and matches(b, kind), (a, b, kind)


NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
ages = st.floats(min_value=0, max_value=20, allow_nan=False)


@st.composite
def kind_windows(draw: st.DrawFn) -> DueWindow:
    choices = st.sampled_from(["task.completed", "timer.due", "x.y"])
    names = draw(st.lists(choices, min_size=1, max_size=3, unique=True))
    groups = []
    for name in names:
        oldest = draw(ages)
        newest = draw(st.floats(min_value=0, max_value=oldest, allow_nan=False))
        groups.append(
            KindWindow(
                name,
                draw(st.integers(1, 5)),
                NOW - timedelta(seconds=oldest),
                NOW - timedelta(seconds=newest),
            )
        )
    return DueWindow(
        count=sum(g.count for g in groups),
        oldest=min(g.oldest for g in groups),
        newest=max(g.newest for g in groups),
        interrupt=False,
        now=NOW,
        kinds=tuple(groups),
    )


@given(kind_windows(), st.integers(0, 5000), st.integers(0, 5000))
def test_one_timing_for_every_kind_is_exactly_todays_window(
    window: DueWindow, quiet_ms: int, extra_ms: int
) -> None:
    base = SettingsDefaults(quiet_ms, quiet_ms + extra_ms, 100, 60)
    policy = settings_policy(base)
    by_kind, rule = window_by_kind(window, lambda kind: policy.for_kind("d", kind))
    today = wait_before_claim(window, quiet_ms / 1000, (quiet_ms + extra_ms) / 1000)
    assert by_kind is not None and today is not None and rule is None
    assert by_kind == pytest.approx(today, abs=1e-6)


@given(kind_windows(), st.integers(0, 60_000), st.integers(0, 60_000))
def test_each_kind_holds_the_window_until_quiet_or_closes_it_at_its_age(
    window: DueWindow, slow_quiet: int, slow_extra: int
) -> None:
    policy = parse(
        f'[[rules]]\nkind = "task.*"\nquiet_ms = {slow_quiet}\n'
        f"max_age_ms = {slow_quiet + slow_extra}\n"
    )
    wait, rule = window_by_kind(window, lambda kind: policy.for_kind("d", kind))
    assert wait is not None and wait >= 0
    closes = NOW + timedelta(seconds=wait)
    timings = {g.kind: policy.for_kind("d", g.kind) for g in window.kinds}
    quiet_all = max(g.newest + timedelta(seconds=timings[g.kind].quiet_s) for g in window.kinds)
    hard_any = min(g.oldest + timedelta(seconds=timings[g.kind].max_age_s) for g in window.kinds)
    # Closes when every kind is quiet or any reaches its maximum age, never later, never sooner.
    assert abs((max(NOW, min(quiet_all, hard_any)) - closes).total_seconds()) < 1e-5
    assert rule in (None, "task.*")


def test_a_failed_deploy_wakes_at_once_while_copilot_completions_batch() -> None:
    policy = parse(
        '[[rules]]\nkind = "task.completed"\nquiet_ms = 300000\nmax_age_ms = 600000\n'
        '[[rules]]\nkind = "external.deploy.failed"\nquiet_ms = 0\nmax_age_ms = 0\n'
    )
    lane = LanePolicy.for_delegate(policy, "d")
    completion = KindWindow("task.completed", 3, NOW - timedelta(seconds=20), NOW)
    window = DueWindow(3, completion.oldest, completion.newest, False, NOW, kinds=(completion,))
    decision = decide(window, lane, first=True, reason="wake")
    assert decision == Wait(300.0, "task.completed")
    deploy = KindWindow("external.deploy.failed", 1, NOW, NOW)
    both = DueWindow(4, completion.oldest, NOW, False, NOW, kinds=(completion, deploy))
    assert isinstance(decide(both, lane, first=True, reason="wake"), Run)


def test_a_stored_document_is_read_back_leniently() -> None:
    document = PolicyDocument.model_validate({"rules": [{"kind": "task.*", "mode": "wake"}]},
                                             strict=False)  # fmt: skip
    assert document.rules[0].mode is Mode.WAKE
