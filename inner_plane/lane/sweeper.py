"""The sweeper, run by beat: recovers what Redis or a dead worker lost, from the journal alone.

- delegates with claims or running activations but no live lease get an activate; taking the
  lease returns their stale claims to pending (recorded as recovered). A lease whose holder's
  session is gone (its liveness lock is free: the process died, or PostgreSQL restarted) is not
  live, whatever its expiry says: a killed worker's claims come back at the next sweep, with no
  new signal needed. A paused but living holder keeps its lock, so it is left to the TTL and
  the epoch fence;
- delegates with due wake/interrupt signals or queued user turns and no live lease get an
  activate (a lost wake message or flushed Redis costs one sweep period);
- pending signals past their expires_at become expired;
- on a Redis broker, publications the broker acknowledged and no worker journaled within
  ``INNER_PLANE_RECEIPT_GRACE_S`` are journaled from their receipts (:mod:`inner_plane.receipts`,
  :mod:`inner_plane.lane.replay`), before the delegates to wake are read.

Every row reads back (see ``journal.tolerant``), and a delegate whose wake cannot be sent is
logged and skipped: no row and no delegate stops the sweep of the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inner_plane import logs
from inner_plane.attention.wakes import send_activate
from inner_plane.journal.lane.recovery import Recovery
from inner_plane.lane.replay import replay
from inner_plane.runtime import Runtime


@dataclass
class SweepReport:
    recovered: list[str] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)
    expired: int = 0
    replayed: int = 0  # messages journaled from their receipts


def sweep(runtime: Runtime) -> SweepReport:
    journal = Recovery(runtime.engine)
    report = SweepReport()
    for signal in journal.expire_all():
        report.expired += 1
        logs.emit("expired", **logs.of_signal(signal))
    try:
        report.replayed = len(replay(runtime).journaled)
    except Exception as error:  # a store down: the receipts wait for the next sweep
        logs.emit("receipts_replay_failed", reason=str(error)[:200])
    report.recovered = journal.delegates_to_recover()
    wake = set(report.recovered) | set(journal.delegates_to_wake())
    for delegate_id in sorted(wake):
        try:
            send_activate(runtime, delegate_id)
        except Exception as error:  # one delegate's failure never stops the others' sweep
            logs.emit("sweeper_wake_failed", delegate=delegate_id, reason=str(error)[:200])
            continue
        report.woken.append(delegate_id)
        reason = (
            "stale claim without a live lease"
            if delegate_id in report.recovered
            else ("due signals or queued user turn without a live lease")
        )
        logs.emit("sweeper_recovery", delegate=delegate_id, reason=reason)
    return report
