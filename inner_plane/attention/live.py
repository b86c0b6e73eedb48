"""The attention policy in force, cached in each process and picked up without a restart.

Two ways in, one cache:

- the lane reads the version in force inside its opening statement (the due window carries it),
  so every decision is made under the version in force at that very moment, with no statement
  added; only a change costs one read of the new document (:meth:`PolicySource.for_window`);
- everything else (the publish path: a rule's mode and priority, the wake countdown) asks
  :meth:`PolicySource.current`, which looks at the pointer at most every :data:`POLL_S`
  seconds, and at once after a NOTIFY on ``inner_plane_policy`` when a listener is running
  (:meth:`PolicySource.listen`, started by long-running workers).

A stored document that no longer parses (a row edited by hand) is logged and the settings decide:
no stored row may stall a lane.
"""

from __future__ import annotations

import os
import threading
import time
import tomllib
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy import Connection, Engine

from inner_plane import logs
from inner_plane.attention.document import (
    AttentionPolicy,
    PolicyDocument,
    SettingsDefaults,
    settings_policy,
)
from inner_plane.journal import policy as journal
from inner_plane.journal.database import reading
from inner_plane.journal.lane.claims import DueWindow
from inner_plane.runtime import Runtime

POLL_S = 1.0

Stamp = tuple[int | None, datetime | None]


def stored_policy(document: str, version: int, base: SettingsDefaults) -> AttentionPolicy:
    """A stored version as a policy; the settings if the row does not parse."""
    try:
        parsed = PolicyDocument.model_validate(tomllib.loads(document))
    except (tomllib.TOMLDecodeError, ValidationError, TypeError) as error:
        logs.emit("policy_unreadable", version=version, reason=str(error)[:300])
        return AttentionPolicy.build(PolicyDocument(), base, version)
    return AttentionPolicy.build(parsed, base, version)


class PolicySource:
    """One process's cache of the policy in force, for one journal and one set of settings."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.base = SettingsDefaults.of(runtime.settings)
        self._lock = threading.Lock()
        self._stamp: Stamp = (None, None)
        self._policy = settings_policy(self.base)
        self._checked = float("-inf")
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()

    def for_window(self, connection: Connection, window: DueWindow) -> AttentionPolicy:
        """The policy the lane decides ``window`` by: the version its statement read."""
        return self._at((window.policy_version, window.policy_changed_at), connection)

    def is_cached(self, window: DueWindow) -> bool:
        """Whether the version ``window`` read is the one cached (deciding by it reads nothing)."""
        return (window.policy_version, window.policy_changed_at) == self._stamp

    def current(self) -> AttentionPolicy:
        """The policy in force, at most :data:`POLL_S` old."""
        if time.monotonic() - self._checked < POLL_S:
            return self._policy
        return self.refresh()

    def refresh(self) -> AttentionPolicy:
        with reading(self.runtime.engine) as connection:
            found = journal.pointer(connection)
            stamp: Stamp = (None, None) if found is None else (found.version, found.changed_at)
            policy = self._at(stamp, connection)
        self._checked = time.monotonic()
        return policy

    def _at(self, stamp: Stamp, connection: Connection) -> AttentionPolicy:
        if stamp == self._stamp:
            return self._policy
        version = stamp[0]
        if version is None:
            policy = settings_policy(self.base)
        else:
            document = journal.document_of(connection, version)
            policy = (
                settings_policy(self.base)
                if document is None
                else stored_policy(document, version, self.base)
            )
        with self._lock:
            previous = self._stamp[0]
            self._stamp, self._policy = stamp, policy
        if previous != version:
            logs.emit("policy_loaded", version=version, previous=previous, pid=os.getpid())
        return policy

    def listen(self) -> None:
        """Refresh at once on every NOTIFY of a new version (a daemon thread; idempotent)."""
        if self._listener is not None:
            return
        url = self.runtime.engine.url.render_as_string(hide_password=False)

        def on_notice() -> None:
            self._checked = float("-inf")
            try:
                self.refresh()
            except Exception as error:  # the poll on use catches up
                logs.emit("policy_refresh_failed", reason=str(error)[:200])

        self._listener = threading.Thread(
            target=journal.listen, args=(url, on_notice, self._stop), daemon=True
        )
        self._listener.start()


_sources: dict[tuple[int, Engine, SettingsDefaults], PolicySource] = {}
_sources_lock = threading.Lock()


def policy_source(runtime: Runtime) -> PolicySource:
    """The process's source for this runtime's journal and settings."""
    key = (os.getpid(), runtime.engine, SettingsDefaults.of(runtime.settings))
    source = _sources.get(key)
    if source is None:
        with _sources_lock:
            source = _sources.get(key)
            if source is None:
                if len(_sources) > 64:
                    _sources.clear()
                source = _sources[key] = PolicySource(runtime)
    return source
