"""Structured ``[inner-context]`` log lines.

Each line is written straight to the process's real stderr: inside a Celery worker, stdout and
stderr are redirected into Celery's logger, which would prefix our lines and break ``grep '^\\['``.

One record is one line, whatever a field holds: in logfmt a value with a space, ``=``, ``"``,
a backslash, any control character (C0, DEL, C1 including U+0085), a Unicode line or paragraph
separator (U+2028/U+2029) or a lone surrogate is written as a JSON string literal in which all
of those are escapes; the JSON format escapes the same characters. :func:`parse_logfmt` reads a
line back.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import Enum
from typing import IO, Any
from uuid import UUID

TAG = "[inner-context]"
STABLE_FIELDS = ("event", "id", "kind", "source", "mode", "priority", "delegate")

_lock = threading.Lock()
_stream: IO[str] | None = None
_format: str | None = None
# Called with every record after it is written (the metrics recorder counts them).
Observer = Callable[[str, dict[str, Any]], None]
_observers: list[Observer] = []


def observe(observer: Observer) -> None:
    """Register ``observer(event, fields)`` for every record written from now on."""
    if observer not in _observers:
        _observers.append(observer)


def _notify(entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
    for observer in _observers:
        # An observer may take a batch's records at once (``observe_many``), as the metrics
        # recorder does: one call per batch instead of one per record.
        many = getattr(observer, "observe_many", None)
        if many is not None:
            with contextlib.suppress(Exception):
                many(entries)
            continue
        for event, fields in entries:
            with contextlib.suppress(Exception):
                observer(event, fields)


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


# One compiled search instead of many substring scans: this runs for every field of every line.
# Space, '=', '"', backslash, every control character (C0, DEL, C1 incl. U+0085), U+2028/U+2029
# and lone surrogates: a value holding any of them is written as an escaped string literal.
_NEEDS_QUOTES = re.compile(r'[\x00-\x20"=\\\x7f-\x9f\u2028\u2029\ud800-\udfff]')
# What json.dumps(ensure_ascii=False) leaves raw but a log reader may split a line on (or cannot
# encode): escaped after dumping, inside string literals (the only place they can occur).
_RAW_AFTER_DUMPS = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escape_rest(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _quoted(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    return _RAW_AFTER_DUMPS.sub(_escape_rest, encoded)


def _logfmt_value(value: Any) -> str:
    if value is None:
        return ""
    text = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    if text == "" or _NEEDS_QUOTES.search(text):
        return _quoted(text)
    return text


def format_line(fields: dict[str, Any], log_format: str) -> str:
    if log_format == "json":
        encoded = json.dumps({"log": "inner-context", **fields}, ensure_ascii=False, default=str)
        return _RAW_AFTER_DUMPS.sub(_escape_rest, encoded)
    body = " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())
    return f"{TAG} {body}"


def _ordered(event: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The stable fields first, in order, then the rest; values made plain."""
    ordered: dict[str, Any] = {"event": event}
    for key in STABLE_FIELDS[1:]:
        if key in fields:
            ordered[key] = _plain(fields[key])
    for key, value in fields.items():
        if key not in ordered:
            ordered[key] = _plain(value)
    return ordered


def _logfmt_text(value: Any) -> str:
    """``_logfmt_value(_plain(value))`` with the common types decided by one type test: the
    fields of every line of every batch pass through here."""
    cls = value.__class__
    if cls is str:
        text: str = value
        if text and not _NEEDS_QUOTES.search(text):
            return text
        return _quoted(text)
    if cls is UUID or cls is int or cls is bool:
        return str(value)  # hex digits and dashes, digits, True/False: never quoted
    if value is None:
        return ""
    if isinstance(value, Enum) and value.value.__class__ is str:
        return _logfmt_text(value.value)
    return _logfmt_value(_plain(value))


_STABLE_REST = STABLE_FIELDS[1:]
_STABLE_SET = frozenset(STABLE_FIELDS)


def _key_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The order :func:`_ordered` writes these keys in (after ``event``)."""
    return tuple(k for k in _STABLE_REST if k in keys) + tuple(
        k for k in keys if k not in _STABLE_SET
    )


# Classes whose equal values always print alike (unlike float: 0.0 == -0.0), so a line's text
# can be remembered by its values. Enums too (members are singletons).
_MEMO_SAFE = frozenset({str, int, bool, type(None), UUID})


def _memo_safe(classes: tuple[type, ...]) -> bool:
    return all(cls in _MEMO_SAFE or issubclass(cls, Enum) for cls in classes)


def _logfmt_pairs(
    fields: dict[str, Any], order: Iterable[str], pairs: dict[tuple[str, type, Any], str]
) -> list[str]:
    """The ``key=value`` texts of ``fields`` in ``order``; each distinct one formatted once per
    ``pairs`` memo."""
    parts = []
    for key in order:
        value = fields[key]
        cls = value.__class__
        if cls is UUID:
            parts.append(f"{key}={value}")
        elif cls is str or cls is int or cls is bool or isinstance(value, Enum):
            # The class is part of the memo key: True == 1 but they print differently.
            memo = (key, cls, value)
            pair = pairs.get(memo)
            if pair is None:
                pair = pairs[memo] = f"{key}={_logfmt_text(value)}"
            parts.append(pair)
        else:
            parts.append(f"{key}={_logfmt_text(value)}")
    return parts


# Memos of the texts of signal lines, kept from one batch to the next: the lines of a delegate's
# signals of one kind repeat everything but their id from batch to batch (a timer tick's
# `published` lines, say). Bounded: emptied when full, so any input costs at most a reformat.
_MEMO_LIMIT = 4_096
_orders: dict[tuple[str, ...], tuple[str, ...]] = {}
_safe: dict[tuple[type, ...], bool] = {}
# (event, keys, values after the id, their classes) -> (text before the id, text after it)
_around_id: dict[tuple[Any, ...], tuple[str, str]] = {}


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value


def _logfmt_lines(entries: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """logfmt lines of many entries. The lines of a batch repeat most of their values (kind,
    source, mode, ...): each distinct ``key=value`` text is formatted once per call, and the
    lines of entries that differ only in their leading ``id`` share everything after it, in
    this batch and the next ones."""
    orders, safe, around_id = _orders, _safe, _around_id
    pairs: dict[tuple[str, type, Any], str] = {}
    lines = []
    for event, fields in entries:
        keys = tuple(fields)
        order = orders.get(keys)
        if order is None:
            order = _key_order(keys)
            _remember(orders, keys, order)
        if keys and keys[0] == "id" and event.__class__ is str:  # a signal's line
            values = tuple(fields.values())
            rest = values[1:]
            classes = tuple(map(type, rest))
            memo_safe = safe.get(classes)
            if memo_safe is None:
                memo_safe = _memo_safe(classes)
                _remember(safe, classes, memo_safe)
            if memo_safe:
                memo = (event, keys, rest, classes)
                texts = around_id.get(memo)
                if texts is None:
                    after = _logfmt_pairs(fields, order[1:], pairs)
                    texts = (
                        f"{TAG} event={_logfmt_text(event)} id=",
                        "".join(" " + part for part in after),
                    )
                    _remember(around_id, memo, texts)
                ident = values[0]
                text = str(ident) if ident.__class__ is UUID else _logfmt_text(ident)
                lines.append(texts[0] + text + texts[1])
                continue
        parts = [TAG, f"event={_logfmt_text(event)}", *_logfmt_pairs(fields, order, pairs)]
        lines.append(" ".join(parts))
    return lines


def _write(text: str) -> None:
    stream = _stream or sys.__stderr__ or sys.stderr
    with _lock:
        stream.write(text)
        stream.flush()


def emit(event: str, **fields: Any) -> dict[str, Any]:
    """Write one line: the stable fields first, in order, then the rest."""
    ordered = _ordered(event, fields)
    _write(format_line(ordered, _current_format()) + "\n")
    if _observers:
        _notify([(event, fields)])
    return ordered


def emit_many(entries: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Write one line per ``(event, fields)``, exactly as :func:`emit` would, with one write and
    one flush for all of them (a batch of publications)."""
    batch = entries if isinstance(entries, list) else list(entries)
    if _current_format() == "json":
        lines = [format_line(_ordered(event, fields), "json") for event, fields in batch]
    else:
        lines = _logfmt_lines(batch)
    if lines:
        lines.append("")
        _write("\n".join(lines))
    if _observers:
        _notify(batch)


_DECODER = json.JSONDecoder()


def parse_logfmt(line: str) -> dict[str, str | None]:
    """The fields of one logfmt ``[inner-context]`` line, as written: bare values as they are,
    quoted values decoded, an empty value as None. Raise ValueError on anything else."""
    if not line.startswith(TAG + " "):
        raise ValueError("not an [inner-context] line")
    fields: dict[str, str | None] = {}
    position = len(TAG) + 1
    end = len(line)
    while position < end:
        equals = line.find("=", position)
        if equals < 0:
            raise ValueError(f"no '=' after position {position}")
        key = line[position:equals]
        position = equals + 1
        value: str | None
        if position < end and line[position] == '"':
            value, position = _DECODER.raw_decode(line, position)
        else:
            space = line.find(" ", position)
            stop = end if space < 0 else space
            value = line[position:stop] or None
            position = stop
        fields[key] = value
        if position < end:
            if line[position] != " ":
                raise ValueError(f"expected a space at position {position}")
            position += 1
    return fields


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
