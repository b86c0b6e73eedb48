"""Journaling from receipts: what a sender was told the broker took, and no worker journaled
within ``INNER_PLANE_RECEIPT_GRACE_S`` (see :mod:`inner_plane.receipts`), is journaled by the
sweeper with the same functions the workers call: signals ``via=receipt``, user turns under the
id their task id gives them (then the delegate is woken).

Only while the receipt's queue is empty: a receipt older than the grace then belongs to a message
that was lost between Redis and a worker, or held by a worker that died or cannot journal; a
receipt of a message still queued behind a backlog is left to the worker that will take it. A
signal's fixed id (and a turn's id derived from its task id) makes journaling twice a duplicate,
never a second row. A receipt that cannot be
read, or whose message is invalid, is dropped with one line; a store outage leaves it for the next
sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import RedisError
from sqlalchemy.exc import OperationalError

from inner_plane import celery_bridge, logs, receipts
from inner_plane.lane.user_turns import ensure_user_turn, wake_for_user_turn
from inner_plane.publish import publish, publish_many
from inner_plane.runtime import Runtime
from inner_plane.services.probes import queue_depths
from inner_plane.signals.model import SignalError
from inner_plane.sources.copilot import report_task

VIA = "receipt"
# Receipts taken per sweep: a backlog of them drains over several sweeps.
LIMIT = 500


@dataclass
class Replay:
    journaled: list[str] = field(default_factory=list)  # task ids whose signals are journaled
    dropped: list[str] = field(default_factory=list)  # unreadable or invalid receipts


def replay(runtime: Runtime, limit: int = LIMIT, grace_s: float | None = None) -> Replay:
    """Journal the messages whose receipts outlived the grace (``INNER_PLANE_RECEIPT_GRACE_S``
    unless given) while the signals queue is empty."""
    done = Replay()
    broker_url = runtime.settings.effective_broker_url
    if celery_bridge.is_amqp(broker_url):
        return done
    client = receipts.client_for(broker_url)
    grace = runtime.settings.receipt_grace_s if grace_s is None else grace_s
    stale = receipts.stale(client, grace, limit)
    if not stale:
        return done
    queues = sorted({entry.queue for entry in stale if entry.queue in celery_bridge.ALL_QUEUES})
    backlog = {name for name, depth in queue_depths(client, queues).items() if depth}
    for entry in stale:
        if entry.queue in backlog:
            continue
        try:
            _journal(runtime, entry)
        except (OperationalError, RedisError):
            raise  # the journal or Redis is down: every receipt waits for the next sweep
        except Exception as error:  # invalid for good (SignalError) or unreadable
            reason = str(error)[:200] if not isinstance(error, SignalError) else str(error)
            logs.emit("receipt_dropped", task=entry.task_id, name=entry.task, reason=reason)
            done.dropped.append(entry.task_id)
            continue
        done.journaled.append(entry.task_id)
    receipts.remove(client, done.journaled + done.dropped)
    if done.journaled:
        logs.emit("receipts_replayed", messages=len(done.journaled))
    return done


def _journal(runtime: Runtime, entry: receipts.Entry) -> None:
    args = entry.args
    if args is None:
        raise ValueError("unreadable receipt")
    if entry.task == celery_bridge.PUBLISH_TASK and len(args) == 1:
        publish(args[0], runtime=runtime, via=VIA)
    elif entry.task == celery_bridge.PUBLISH_MANY_TASK and len(args) == 1:
        if not isinstance(args[0], list):
            raise SignalError("signals", "must be a list of signal objects")
        publish_many(args[0], runtime=runtime, via=VIA)
    elif entry.task == celery_bridge.REPORT_TASK_TASK and 3 <= len(args) <= 5:
        report_task(*args, runtime=runtime, via=VIA)
    elif entry.task == celery_bridge.USER_TURN_TASK and 2 <= len(args) <= 4:
        delegate_id, text, *rest = args
        channel = rest[0] if rest else "text"
        turn_id = rest[1] if len(rest) > 1 else None
        ensure_user_turn(runtime, delegate_id, text, channel, turn_id, entry.task_id)
        wake_for_user_turn(runtime, delegate_id)
    else:
        raise ValueError(f"no journaling for task {entry.task!r} with {len(args)} args")
