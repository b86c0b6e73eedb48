"""The running lane's ear: one listener thread per process on the journal's lane channel sets a
``threading.Event`` for the delegate whose user turn or interrupt was just journaled.

The step guard looks at that event between stream events (a flag read, no I/O) and, when it is
set, runs its safe point, where the journal decides whether to yield. Started on first use, so
importing starts nothing; each process (each prefork child) has its own listener.
"""

from __future__ import annotations

import threading

from inner_plane import logs
from inner_plane.journal.lane.notices import LaneNotice, listen


class LaneNotices:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._watched: dict[str, set[threading.Event]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()

    def watch(self, delegate_id: str) -> threading.Event:
        """An event set whenever a user turn or interrupt for ``delegate_id`` is journaled."""
        event = threading.Event()
        with self._lock:
            self._watched.setdefault(delegate_id, set()).add(event)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=listen,
                    args=(self.database_url, self._on_notice, self._stop),
                    name="lane-notices",
                    daemon=True,
                )
                self._thread.start()
        return event

    def unwatch(self, delegate_id: str, event: threading.Event) -> None:
        with self._lock:
            events = self._watched.get(delegate_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._watched[delegate_id]

    def stop(self) -> None:
        self._stop.set()

    def _on_notice(self, notice: LaneNotice | None) -> None:
        with self._lock:
            if notice is None:  # (re)connected: something may have been missed
                self.connected.set()
                targets = [e for events in self._watched.values() for e in events]
            else:
                targets = list(self._watched.get(notice.delegate_id, ()))
        for event in targets:
            event.set()
        if notice is not None and targets:
            logs.emit("lane_notice", delegate=notice.delegate_id, what=notice.what)


_by_url: dict[str, LaneNotices] = {}
_lock = threading.Lock()


def lane_notices(database_url: str) -> LaneNotices:
    """The process's listener for this journal."""
    with _lock:
        found = _by_url.get(database_url)
        if found is None:
            found = _by_url[database_url] = LaneNotices(database_url)
        return found
