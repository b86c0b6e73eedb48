"""The plane running on a data dir, as `inner-plane up` records it in ``<data dir>/plane.json``.

A CLI command with no store URLs configured reads this file to talk to the running plane (its
embedded servers, its API and Flower) instead of starting servers of its own. The file names the
owning process; it counts only while that process is alive.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "plane.json"


@dataclass(frozen=True)
class PlaneState:
    pid: int
    database_url: str
    redis_url: str
    broker_url: str
    api_url: str | None = None
    flower_url: str | None = None
    # Child name -> pid, for `status` (what `up` supervises).
    children: dict[str, int] = field(default_factory=dict)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not running.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def state_path(data_dir: Path) -> Path:
    return data_dir.resolve() / STATE_FILE


def write_state(data_dir: Path, state: PlaneState) -> None:
    """Replace the state file atomically, readable by its owner only (it holds store URLs)."""
    path = state_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(state), handle)
    os.replace(tmp, path)


def clear_state(data_dir: Path, pid: int) -> None:
    """Remove the state file if it is still the one ``pid`` wrote."""
    current = read_state(data_dir)
    if current is not None and current.pid == pid:
        with contextlib.suppress(OSError):
            state_path(data_dir).unlink()


def read_state(data_dir: Path) -> PlaneState | None:
    try:
        raw = json.loads(state_path(data_dir).read_text())
        return PlaneState(
            pid=int(raw["pid"]),
            database_url=str(raw["database_url"]),
            redis_url=str(raw["redis_url"]),
            broker_url=str(raw["broker_url"]),
            api_url=raw.get("api_url"),
            flower_url=raw.get("flower_url"),
            children={str(k): int(v) for k, v in (raw.get("children") or {}).items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_plane(data_dir: Path) -> PlaneState | None:
    """The plane `up` runs on this data dir, or None when none is running."""
    state = read_state(data_dir)
    if state is None or not pid_alive(state.pid):
        return None
    return state
