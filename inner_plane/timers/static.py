"""Static timers: the ``[timers.<name>]`` tables of beat_schedule/timers.toml (or
``INNER_PLANE_TIMERS_FILE``), which ops edit and beat validates at start."""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path
from typing import Any

from inner_plane.config import Settings
from inner_plane.timers.spec import TimerError, TimerSpec

# beat_schedule/ sits beside inner_plane/ both in the checkout and in site-packages.
DEFAULT_FILE = Path(__file__).resolve().parents[2] / "beat_schedule" / "timers.toml"
# The file says `delegate`; the model (shared with dynamic timers) says `delegate_id`.
_RENAMES = {"delegate": "delegate_id"}


def timers_file(settings: Settings) -> Path:
    return settings.timers_file or DEFAULT_FILE


def parse_static_timers(text: str, origin: str) -> list[TimerSpec]:
    """Parse the file's text; raise TimerError naming the file, the timer and the field."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise TimerError(None, "toml", str(error), origin) from None
    unknown = set(document) - {"timers"}
    if unknown:
        raise TimerError(
            None, sorted(unknown)[0], "is not a section (only [timers.<name>])", origin
        )
    tables = document.get("timers", {})
    if not isinstance(tables, dict):
        raise TimerError(None, "timers", "must be a table of [timers.<name>] tables", origin)
    specs: list[TimerSpec] = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise TimerError(name, "timer", "must be a [timers.<name>] table", origin)
        if "name" in table or "delegate_id" in table:
            field = "name" if "name" in table else "delegate_id"
            raise TimerError(name, field, "is not a timer field (the table name is the name; "
                             "use `delegate`)", origin)  # fmt: skip
        raw: dict[str, Any] = {_RENAMES.get(str(k), str(k)): v for k, v in table.items()}
        try:
            spec = TimerSpec.parse({"name": name, **raw}, origin)
        except TimerError as error:
            field = "delegate" if error.field == "delegate_id" else error.field
            raise TimerError(name, field, error.reason, origin) from None
        specs.append(spec)
    return specs


def load_static_timers(path: Path) -> list[TimerSpec]:
    """Read and validate a timers file. A missing file holds no timers."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise TimerError(None, "file", f"cannot read: {error.strerror}", str(path)) from None
    return parse_static_timers(text, str(path))


class StaticTimers:
    """The static timers of one process, re-read when the file changes (ops edit it live)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._specs: list[TimerSpec] = []
        self.error: TimerError | None = None

    def _current_stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def get(self) -> tuple[list[TimerSpec], bool]:
        """The timers and whether the file was (re)read just now. An invalid edit keeps the
        last valid timers and sets ``error`` (beat refuses to start on it; a running tick
        carries on)."""
        with self._lock:
            stamp = self._current_stamp()
            if stamp == self._stamp and self._stamp is not None:
                return self._specs, False
            self._stamp = stamp
            try:
                self._specs = load_static_timers(self.path)
                self.error = None
            except TimerError as error:
                self.error = error
            return self._specs, True
