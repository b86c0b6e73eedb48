"""One IDLE watch per mailbox, kept while the mailbox exists (:func:`inner_plane.channels.
imap.watch` each, on a thread of its own).

Where it runs: inside ``inner-plane beat`` (MAIL_WATCH_IN_BEAT, the default), or as
``inner-plane mail watch``. Beat is the plane's one singleton process and already runs wherever
the plane does (``up``, compose, systemd, Kubernetes), supervised and health-checked; each
mailbox needs one long-lived connection, not a worker pool, so a few threads there cost less
than a process, unit and Deployment of their own. Two watchers (two beats, or beat and the
command) are harmless: the journal decides what is new, and beat's poll of every mailbox each
MAIL_POLL_INTERVAL_S covers a watcher that died and a server without IDLE.
"""

from __future__ import annotations

import threading

from inner_plane import logs
from inner_plane.channels import imap
from inner_plane.journal.channels.mailboxes import Mailboxes
from inner_plane.runtime import Runtime

REFRESH_S = 30.0  # how often the mailbox list is read again (added and removed mailboxes)


class MailWatcher:
    def __init__(self, runtime: Runtime, refresh_s: float = REFRESH_S) -> None:
        self.runtime = runtime
        self.refresh_s = refresh_s
        self.stop_all = threading.Event()
        self._watches: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._thread: threading.Thread | None = None

    def start(self) -> MailWatcher:
        self._thread = threading.Thread(target=self._supervise, name="mail-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_all.set()
        for _, stop in self._watches.values():
            stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for thread, _ in self._watches.values():
            thread.join(timeout)

    def watching(self) -> list[str]:
        return sorted(d for d, (thread, _) in self._watches.items() if thread.is_alive())

    def _supervise(self) -> None:
        while not self.stop_all.is_set():
            try:
                self.refresh()
            except Exception as error:  # the journal is down: try again at the next refresh
                logs.emit("mail_watch_failed", reason=str(error)[:200])
            self.stop_all.wait(self.refresh_s)

    def refresh(self) -> None:
        """Start a watch for each mailbox without a live one; stop those of removed ones."""
        wanted = {box.delegate_id for box in Mailboxes(self.runtime.engine).all()}
        for delegate in list(self._watches):
            thread, stop = self._watches[delegate]
            if delegate not in wanted:
                stop.set()
            if delegate not in wanted or not thread.is_alive():
                del self._watches[delegate]
        for delegate in sorted(wanted - set(self._watches)):
            stop = threading.Event()
            thread = threading.Thread(
                target=self._watch,
                args=(delegate, stop),
                name=f"mail-watch-{delegate}",
                daemon=True,
            )
            self._watches[delegate] = (thread, stop)
            thread.start()

    def _watch(self, delegate: str, stop: threading.Event) -> None:
        both = _Either(stop, self.stop_all)
        try:
            imap.watch(self.runtime, delegate, both)
        except Exception as error:  # the supervisor starts it again at its next refresh
            logs.emit("mail_watch_failed", delegate=delegate, reason=str(error)[:200])


class _Either:
    """Set when either event is (what ``imap.watch`` waits on)."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.first.is_set() or self.second.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        step = 0.25
        waited = 0.0
        while not self.is_set() and (timeout is None or waited < timeout):
            self.first.wait(step)
            waited += step
        return self.is_set()
