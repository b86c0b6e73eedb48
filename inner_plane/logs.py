"""Structured ``[inner-context]`` log lines.

Each line is written straight to the process's real stderr: inside a Celery worker, stdout and
stderr are redirected into Celery's logger, which would prefix our lines and break ``grep '^\\['``.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from datetime import datetime
from enum import Enum
from typing import IO, Any
from uuid import UUID

TAG = "[inner-context]"
STABLE_FIELDS = ("event", "id", "kind", "source", "mode", "priority", "delegate")

_lock = threading.Lock()
_stream: IO[str] | None = None
_format: str | None = None


def configure(log_format: str | None = None, stream: IO[str] | None = None) -> None:
    """Override the format (``logfmt`` or ``json``) or the stream, e.g. in tests."""
    global _format, _stream
    if log_format is not None:
        _format = log_format
    if stream is not None:
        _stream = stream


def _current_format() -> str:
    global _format
    if _format is None:
        from inner_plane.config import load_settings

        _format = load_settings().log_format
    return _format


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# One compiled search instead of five substring scans: this runs for every field of every line.
_NEEDS_QUOTES = re.compile(r'[ ="\n\\]')


def _logfmt_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    text = str(value)
    if text == "" or _NEEDS_QUOTES.search(text):
        return json.dumps(text, ensure_ascii=False)
    return text


def format_line(fields: dict[str, Any], log_format: str) -> str:
    if log_format == "json":
        return json.dumps({"log": "inner-context", **fields}, ensure_ascii=False, default=str)
    body = " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())
    return f"{TAG} {body}"


def emit(event: str, **fields: Any) -> dict[str, Any]:
    """Write one line: the stable fields first, in order, then the rest."""
    ordered: dict[str, Any] = {"event": event}
    for key in STABLE_FIELDS[1:]:
        if key in fields:
            ordered[key] = _plain(fields.pop(key))
    for key, value in fields.items():
        ordered[key] = _plain(value)
    line = format_line(ordered, _current_format())
    stream = _stream or sys.__stderr__ or sys.stderr
    with _lock:
        stream.write(line + "\n")
        stream.flush()
    return ordered


def signal_fields(
    signal_id: Any, kind: str, source: str, mode: Any, priority: int, delegate: str
) -> dict[str, Any]:
    return {
        "id": signal_id,
        "kind": kind,
        "source": source,
        "mode": mode,
        "priority": priority,
        "delegate": delegate,
    }


def of_signal(signal: Any) -> dict[str, Any]:
    """The stable fields of a journaled signal (anything with the Signal attributes)."""
    return signal_fields(
        signal.id, signal.kind, signal.source, signal.mode, signal.priority, signal.delegate_id
    )
