"""Lane notices: the ``inner_plane_lane`` channel on which the journal itself announces that a
user turn was queued or an interrupt signal journaled (triggers of migration 0009, in the
writing transaction, so nothing is announced that did not commit).

A notice is only a hint that wakes a running lane between stream events; the lane's safe point
then reads the journal, which decides. A lost notice costs at most the wait for the next safe
point between model steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from inner_plane.journal.plain import libpq_url

CHANNEL = "inner_plane_lane"
USER_TURN = "user_turn"
INTERRUPT = "interrupt"


@dataclass(frozen=True)
class LaneNotice:
    what: str  # USER_TURN or INTERRUPT
    delegate_id: str

    @classmethod
    def parse(cls, payload: str) -> LaneNotice | None:
        what, _, delegate_id = payload.partition(":")
        if what not in (USER_TURN, INTERRUPT) or not delegate_id:
            return None
        return cls(what, delegate_id)


# Called with each notice; with None after every (re)connection: notices may have been missed.
NoticeHandler = Callable[[LaneNotice | None], None]


def listen(
    database_url: str,
    on_notice: NoticeHandler,
    stop: threading.Event,
    reconnect_s: float = 1.0,
) -> None:
    """LISTEN on the lane channel until ``stop`` is set, reconnecting after errors."""
    conninfo = libpq_url(database_url)
    while not stop.is_set():
        try:
            with psycopg.connect(conninfo, autocommit=True) as connection:
                connection.execute(f"LISTEN {CHANNEL}")
                on_notice(None)
                while not stop.is_set():
                    for notify in connection.notifies(timeout=1.0):
                        notice = LaneNotice.parse(notify.payload)
                        if notice is not None:
                            on_notice(notice)
                        if stop.is_set():
                            break
        except psycopg.Error:
            stop.wait(reconnect_s)
