"""The chat page's sign-in: a server-side session (:mod:`inner_plane.sources.sessions`) whose
random id is the HttpOnly, SameSite=Strict cookie; the person token itself never reaches the
browser's storage after the sign-in form.

The session's principal is ``person:<token id>``: every request reads that token's row, so a
revoked token (its row deleted) ends its sessions at once, wherever they are.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import Request, Response

from inner_plane.journal.people.tokens import PersonTokens
from inner_plane.runtime import Runtime
from inner_plane.sources.sessions import Session, SessionStore

COOKIE = "inner_plane_chat"
LOGIN_COOKIE = "inner_plane_chat_login"  # the sign-in form's anti-CSRF token
_PERSON = "person:"


@dataclass(frozen=True)
class PersonSession:
    delegate_id: str
    session: Session


def principal(token_id: uuid.UUID) -> str:
    return f"{_PERSON}{token_id}"


def cookie(request: Request) -> str | None:
    return request.cookies.get(COOKIE) or None


def start(runtime: Runtime, request: Request, response: Response, token_id: uuid.UUID) -> None:
    """A new session for the person token (the one the browser brought ends)."""
    session = SessionStore.of(runtime).create(principal(token_id), replacing=cookie(request))
    response.set_cookie(
        COOKIE,
        session.id,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=runtime.settings.session_absolute_s,
        path="/",
    )


def person(runtime: Runtime, request: Request) -> PersonSession | None:
    """The person of the request's live session (its token not revoked), or None. Raises
    ``redis.RedisError`` when the session store is unreachable."""
    session_id = cookie(request)
    if session_id is None:
        return None
    session = SessionStore.of(runtime).get(session_id)
    if session is None or not session.principal.startswith(_PERSON):
        return None
    try:
        token_id = uuid.UUID(session.principal.removeprefix(_PERSON))
    except ValueError:
        return None
    record = PersonTokens(runtime.engine).get(token_id)
    return None if record is None else PersonSession(record.delegate_id, session)


def end(runtime: Runtime, request: Request, response: Response) -> None:
    session_id = cookie(request)
    if session_id is not None:
        SessionStore.of(runtime).end(session_id)
    response.delete_cookie(COOKIE, path="/")
