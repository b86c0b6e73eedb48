"""Trust fencing: signal data and memory text rendered so that no payload can close or spoof its
fence, speak as a role, or pose as an instruction header.

Content is rendered as one line of ASCII JSON: newlines cannot start a fake header line, every
non-ASCII character (bidi overrides, zero-width characters, homoglyphs of the fence characters)
shows as a visible ``\\uXXXX`` escape, and ``<``, ``>``, backtick and ``#`` are escaped too, so
the fence markers (which are built from ``<<<``/``>>>`` and a per-context random token) cannot
occur inside content at all. Role words followed by a colon and bracketed role tags are escaped
the same way, also where a JSON escape stands next to them (``\\nuser:``, ``\\tSYSTEM:``,
``user\\t:``, ``[ user ]``): a model reads an escape as the whitespace it stands for. The escapes
are JSON escapes: a JSON reader still gets the original data back. Labels the plane renders
inside the envelope (kind, source: processor names travel in them) go through :func:`label`.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

MAX_STRING_CHARS = 4_000
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "`": "\\u0060", "#": "\\u0023"}
_SPECIAL = re.compile("[<>`#]")
_ROLES = r"system|developer|assistant|user|human|tool|function|instructions?"
# Whitespace as JSON text spells it: itself, or an escape (\n, \t, \u2028 ...).
_GAP = r"(?:\s|\\[nrtbf]|\\u[0-9a-fA-F]{4})*"
# The role word starts at a word boundary or right after an escape (in ``\nuser`` it follows a
# letter). The leading lookahead rejects most positions cheaply: this runs over every payload.
# A fullwidth colon (\uff1a in ASCII JSON) reads as a colon too.
_ROLE_START = r"(?=[sdauhtfi])(?:\b|(?<=\\[nrtbf])|(?<=\\u[0-9a-fA-F]{4}))"
_ROLE_COLON = re.compile(rf"(?i){_ROLE_START}({_ROLES})({_GAP})(:|\\uff1a)")
_ROLE_TAG = re.compile(rf"(?i)\[({_GAP}/?{_GAP}(?:inst|sys|{_ROLES}|im_start|im_end){_GAP})\]")
_SAFE_LABEL = re.compile(r"[A-Za-z0-9._-]+")


def new_token() -> str:
    return secrets.token_hex(8)


def _truncate(value: Any, limit: int, depth: int = 0) -> tuple[Any, int]:
    """Copy of value with strings longer than limit shortened; returns (copy, chars removed)."""
    if isinstance(value, str):
        if len(value) > limit:
            return value[:limit] + f"...[truncated {len(value) - limit} characters]", len(
                value
            ) - limit
        return value, 0
    if isinstance(value, dict):
        removed = 0
        out: dict[str, Any] = {}
        for key, item in value.items():
            short_key, key_removed = _truncate(str(key), 200)
            out[short_key], item_removed = _truncate(item, limit, depth + 1)
            removed += key_removed + item_removed
        return out, removed
    if isinstance(value, list):
        items = []
        removed = 0
        for item in value:
            short, item_removed = _truncate(item, limit, depth + 1)
            items.append(short)
            removed += item_removed
        return items, removed
    return value, 0


def neutralise(encoded: str) -> str:
    """Escape fence characters, role prefixes and role tags in already-JSON-encoded text."""
    encoded = _SPECIAL.sub(lambda m: _ESCAPES[m.group(0)], encoded)
    encoded = _ROLE_COLON.sub(_escape_colon, encoded)
    return _ROLE_TAG.sub(lambda m: f"\\u005b{m.group(1)}\\u005d", encoded)


def _escape_colon(match: re.Match[str]) -> str:
    colon = "\\u003a" if match.group(3) == ":" else match.group(3)
    if colon == match.group(3):  # already an escape (fullwidth): escape the role word instead
        word = match.group(1)
        return f"\\u{ord(word[0]):04x}{word[1:]}{match.group(2)}{colon}"
    return f"{match.group(1)}{match.group(2)}{colon}"


def label(value: str) -> str:
    """A value the plane renders inside the envelope outside a fence (a kind, a source), as
    is when it is plain (letters, digits, ``._-``), else as neutralised JSON like any data."""
    if _SAFE_LABEL.fullmatch(value):
        return value
    return encode_text(value)


def encode_data(data: Any, max_string: int = MAX_STRING_CHARS) -> tuple[str, int]:
    """One line of neutralised ASCII JSON, and how many characters long strings lost."""
    short, removed = _truncate(data, max_string)
    encoded = json.dumps(short, ensure_ascii=True, separators=(", ", ": "), default=str)
    return neutralise(encoded), removed


def encode_text(text: str, max_chars: int = MAX_STRING_CHARS) -> str:
    """A text as a neutralised JSON string literal."""
    encoded, _ = encode_data(text, max_chars)
    return encoded


def open_marker(token: str, label: str) -> str:
    return f"<<<DATA {token} {label}>>>"


def close_marker(token: str) -> str:
    return f"<<<END DATA {token}>>>"


def fenced(token: str, label: str, body: str) -> str:
    return f"{open_marker(token, label)}\n{body}\n{close_marker(token)}"
