"""Retention: delete signals that finished (delivered, dismissed, expired, dead) long ago.

Pending and claimed signals are never touched, whatever their age. Deletes go in small batches
so a large backlog never holds long locks on the table the publish path writes to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine, text

FINISHED_STATES = ("delivered", "dismissed", "expired", "dead")

# A signal's delivery history (signal_events) goes with it; activations and ThoughtFlow keep
# their own copies of the claimed batch.
_DELETE_BATCH = text(
    """
    WITH gone AS (
        DELETE FROM signals WHERE id IN (
            SELECT id FROM signals
            WHERE state IN ('delivered', 'dismissed', 'expired', 'dead')
              AND updated_at < now() - make_interval(secs => :age_s)
            LIMIT :batch
            FOR UPDATE SKIP LOCKED
        )
        RETURNING id
    ), history AS (
        DELETE FROM signal_events AS e USING gone WHERE e.signal_id = gone.id
    )
    SELECT count(*) FROM gone
    """
)


def delete_finished_signals(engine: Engine, older_than: timedelta, batch: int = 5_000) -> int:
    """Delete finished signals last updated more than ``older_than`` ago; return how many."""
    total = 0
    while True:
        with engine.begin() as connection:
            deleted = int(
                connection.execute(
                    _DELETE_BATCH, {"age_s": older_than.total_seconds(), "batch": batch}
                ).scalar_one()
            )
        total += deleted
        if deleted < batch:
            return total


# --- Every other table -------------------------------------------------------------------------
# Each rule deletes one batch of rows older than its table's setting, oldest first, in its own
# short transaction (rows another transaction holds are skipped, not waited for), and never a
# row that live work still needs:
# - a signal's history while the signal is pending or claimed;
# - a running activation, its ThoughtFlow, or its conversation events;
# - the newest ``keep`` messages of each conversation (the composer's history window: see
#   :func:`messages_kept`);
# - with compaction on, every message of an open conversation that its context window has not
#   carried into a compaction yet (seq past the window's ``after_seq``; all of them before the
#   first compaction): the compaction still needs their words;
# - a queued or running user turn.

_RULES: dict[str, str] = {
    "signal_events": """
        DELETE FROM signal_events WHERE id IN (
            SELECT e.id FROM signal_events e
             WHERE e.at < now() - make_interval(secs => :age_s)
               AND NOT EXISTS (SELECT 1 FROM signals s
                                WHERE s.id = e.signal_id AND s.state IN ('pending', 'claimed'))
             ORDER BY e.at LIMIT :batch FOR UPDATE OF e SKIP LOCKED)
    """,
    "thoughtflows": """
        DELETE FROM thoughtflows WHERE activation_id IN (
            SELECT t.activation_id FROM thoughtflows t
             WHERE t.created_at < now() - make_interval(secs => :age_s)
               AND NOT EXISTS (SELECT 1 FROM activations a
                                WHERE a.id = t.activation_id AND a.state = 'running')
             ORDER BY t.created_at LIMIT :batch FOR UPDATE OF t SKIP LOCKED)
    """,
    "conversation_events": """
        DELETE FROM conversation_events WHERE seq IN (
            SELECT e.seq FROM conversation_events e
             WHERE e.created_at < now() - make_interval(secs => :age_s)
               AND NOT EXISTS (SELECT 1 FROM activations a
                                WHERE a.id = e.activation_id AND a.state = 'running')
               AND NOT (e.type IN ('user.message', 'assistant.message') AND (
                     e.seq > COALESCE(
                       (SELECT m.seq FROM conversation_events m
                         WHERE m.conversation_id = e.conversation_id
                           AND m.type IN ('user.message', 'assistant.message')
                         ORDER BY m.seq DESC OFFSET :keep LIMIT 1), 0)
                  OR (:keep_uncompacted AND e.seq > COALESCE(
                       (SELECT w.after_seq FROM context_windows w
                         WHERE w.delegate_id = e.delegate_id
                           AND w.conversation_id = e.conversation_id), 0)
                      AND EXISTS (SELECT 1 FROM conversations c
                                   WHERE c.id = e.conversation_id AND c.ended_at IS NULL))))
             ORDER BY e.created_at LIMIT :batch FOR UPDATE OF e SKIP LOCKED)
    """,
    "activations": """
        DELETE FROM activations WHERE id IN (
            SELECT id FROM activations
             WHERE state <> 'running' AND finished_at < now() - make_interval(secs => :age_s)
             ORDER BY finished_at LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
    "user_turns": """
        DELETE FROM user_turns WHERE id IN (
            SELECT id FROM user_turns
             WHERE state IN ('done', 'failed')
               AND finished_at < now() - make_interval(secs => :age_s)
             ORDER BY finished_at LIMIT :batch FOR UPDATE SKIP LOCKED)
    """,
}
# The order they run in: dependants first (a ThoughtFlow and conversation events before the
# activation they belong to).
TABLES = ("signal_events", "thoughtflows", "conversation_events", "activations", "user_turns")


@dataclass(frozen=True)
class MessagesKept:
    """Which messages of a conversation retention never deletes, whatever their age."""

    newest: int  # the newest this many of each conversation
    uncompacted: bool  # and those of an open conversation not yet in a compaction


def messages_kept(keep_setting: int, window_messages: int, compacting: bool) -> MessagesKept:
    """What the context window may still read: the composer and the compaction read up to
    ``window_messages`` newest messages after the window's compacted items, so at least those
    stay (whatever ``keep_setting`` says); with compaction on, the messages not yet carried
    into one stay too, so no words are lost before a compaction took them in."""
    return MessagesKept(max(keep_setting, window_messages), compacting)


def delete_old_rows(
    engine: Engine,
    table: str,
    older_than: timedelta,
    batch: int = 5_000,
    keep_messages: int = 100,
    max_batches: int = 1_000,
    keep_uncompacted: bool = True,
) -> int:
    """Delete ``table``'s rows older than ``older_than`` that no live work needs, batch by
    batch; return how many."""
    statement = text(_RULES[table])
    params = {
        "age_s": older_than.total_seconds(),
        "batch": batch,
        "keep": keep_messages,
        "keep_uncompacted": keep_uncompacted,
    }
    total = 0
    for _ in range(max_batches):
        with engine.begin() as connection:
            deleted = int(connection.execute(statement, params).rowcount or 0)
        total += deleted
        if deleted < batch:
            break
    return total
