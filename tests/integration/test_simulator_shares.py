"""The simulator split across processes by delegate reports what one process reports, figure
for figure and batch for batch, on a journal of many delegates: bursts of kinds with windows of
their own, interrupts, user turns that cut background work, a wake budget that defers, and
signals no recorded activation delivered."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from inner_plane.attention.document import SettingsDefaults, parse_document
from inner_plane.runtime import Runtime
from inner_plane.simulator.replay import simulate

START = datetime(2026, 1, 5, tzinfo=UTC)
SIGNALS = 3_000
DELEGATES = 40

CANDIDATES = [
    '[[rules]]\nkind = "task.*"\nquiet_ms = 60000\nmax_age_ms = 120000\n',
    "[defaults]\nquiet_ms = 800\nmax_age_ms = 3000\nwake_budget_per_hour = 3\n"
    '[[rules]]\nkind = "memory.*"\nquiet_ms = 100\nmax_age_ms = 200\nbatch_limit = 2\n',
]


def journal(rt: Runtime) -> None:
    """Signals every ~0.4 s over ``DELEGATES`` delegates (bursts: consecutive ones often share a
    delegate), one activation per recorded batch of three, a tenth never delivered, and a user
    turn per fifty signals."""
    with rt.engine.begin() as connection:
        connection.execute(
            text(
                """
                CREATE TEMP TABLE g ON COMMIT DROP AS
                SELECT n, gen_random_uuid() AS sid,
                       'd' || ((n / 4) * 7919 % :delegates) AS delegate,
                       (ARRAY['task.completed', 'memory.consolidated', 'timer.due',
                              'system.alert', 'memory.inserted'])[1 + (n * 31) % 5]
                           AS kind,
                       CAST(:start AS timestamptz) + n * interval '400 ms' AS at
                  FROM generate_series(1, :n) n
                """
            ),
            {"delegates": DELEGATES, "start": START, "n": SIGNALS},
        )
        connection.execute(
            text(
                """
                CREATE TEMP TABLE b ON COMMIT DROP AS
                SELECT delegate, n / 3 AS batch, gen_random_uuid() AS aid,
                       min(at) + interval '500 ms' AS started, array_agg(sid) AS ids
                  FROM g WHERE kind <> 'memory.inserted' AND n % 10 <> 0
                 GROUP BY delegate, n / 3
                """
            )
        )
        connection.execute(
            text(
                """
                INSERT INTO activations (id, delegate_id, trigger, epoch, holder, state,
                                         started_at, finished_at, signal_ids)
                SELECT aid, delegate, 'wake', 1, 'test', 'completed', started,
                       started + (1 + batch % 4) * interval '700 ms', ids
                  FROM b
                """
            )
        )
        connection.execute(
            text(
                """
                INSERT INTO signals (id, delegate_id, kind, source, mode, priority, data, trust,
                                     state, attempts, max_attempts, occurred_at, created_at,
                                     available_at, updated_at, claimed_by, disposition,
                                     settled_at)
                SELECT g.sid, g.delegate, g.kind, 'test',
                       CASE g.kind WHEN 'memory.inserted' THEN 'ambient'
                                   WHEN 'system.alert' THEN 'interrupt'
                                   ELSE 'wake' END,
                       50, '{}', 'trusted',
                       CASE WHEN b.aid IS NULL THEN 'expired' ELSE 'delivered' END,
                       1, 5, g.at, g.at, g.at, g.at, b.aid,
                       CASE WHEN b.aid IS NULL THEN NULL ELSE 'acted' END,
                       g.at + interval '2 s'
                  FROM g LEFT JOIN b ON g.sid = ANY(b.ids)
                 ORDER BY g.n
                """
            )
        )
        connection.execute(
            text(
                """
                INSERT INTO user_turns (id, delegate_id, channel, text, state, created_at)
                SELECT gen_random_uuid(), 'd' || (n * 13 % :delegates), 'sms', 'hi', 'done',
                       CAST(:start AS timestamptz) + n * interval '20 s' + interval '10 ms'
                  FROM generate_series(1, :turns) n
                """
            ),
            {"delegates": DELEGATES, "start": START, "turns": SIGNALS // 50},
        )


@pytest.mark.parametrize("candidate", CANDIDATES)
def test_a_replay_split_by_delegate_reports_what_one_process_reports(
    runtime: Runtime, candidate: str
) -> None:
    journal(runtime)
    document = parse_document(
        candidate,
        [k.kind for k in runtime.registry.kinds()],
        SettingsDefaults.of(runtime.settings),
    )
    since, until = START - timedelta(seconds=1), START + timedelta(days=1)

    def run(workers: int) -> tuple[dict[str, object], list[list[uuid.UUID]]]:
        batches: list[list[uuid.UUID]] = []
        report = simulate(
            runtime.engine, runtime.registry, runtime.settings, document, since, until,
            batches=batches, workers=workers,
        )  # fmt: skip
        return report, sorted(sorted(batch) for batch in batches)

    alone, alone_batches = run(1)
    assert alone["signals"]["replayed"] > 1_000  # type: ignore[index]
    assert alone["user_turns"] == SIGNALS // 50
    assert alone["candidate"]["activations"]["delegates"] == DELEGATES  # type: ignore[index]
    for workers in (2, 3):
        split, split_batches = run(workers)
        assert split == alone, workers
        assert split_batches == alone_batches, workers


def test_the_second_candidate_exercises_interrupts_deferrals_and_unrecorded_batches(
    runtime: Runtime,
) -> None:
    """What the comparison above covers: the journal and the second candidate reach every path
    a share could get wrong."""
    journal(runtime)
    document = parse_document(
        CANDIDATES[1],
        [k.kind for k in runtime.registry.kinds()],
        SettingsDefaults.of(runtime.settings),
    )
    report = simulate(
        runtime.engine, runtime.registry, runtime.settings, document,
        START - timedelta(seconds=1), START + timedelta(days=1), workers=2,
    )  # fmt: skip
    candidate = report["candidate"]
    assert candidate["interrupts"] > 0
    assert candidate["budget_deferrals"] > 0
    assert candidate["preempted"] > 0
    assert report["signals"]["unrecorded_outcome"] > 0
