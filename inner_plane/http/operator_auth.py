"""Who may use the operator API: an operator credential, never a processor's.

A request proves an operator with ``Authorization: Bearer ipo.<name>.<secret>`` or with the
UI's session cookie: a random session id (:mod:`inner_plane.sources.sessions`), never the token
itself, so signing out or removing the operator ends it at once. Without one the answer is 401;
with a valid processor credential it is 403 (a processor is known, but not allowed here). Every
failed proof, whatever its face (bearer, signature, cookie), counts against the caller's address
and is logged with it; past the limit the answer is 429 before anything is hashed.

Reads stay open without a credential only while no operator exists, the API listens on loopback
and the request names the API by a loopback name (a page of another site that rebinds its name
to 127.0.0.1 does not); actions always need an operator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis
from fastapi import Request

from inner_plane import logs, operators
from inner_plane.http.guards import is_loopback_host
from inner_plane.journal.operator.operators import OperatorJournal
from inner_plane.operators import is_loopback
from inner_plane.runtime import Runtime
from inner_plane.sources import auth, auth_throttle, errors
from inner_plane.sources.intake import JOURNAL_DOWN, client_of
from inner_plane.sources.sessions import Session, SessionStore

COOKIE = "inner_plane_session"
UI_HEADER = "x-inner-plane-ui"
_OPERATOR = "operator:"


def forbidden_processor() -> errors.ApiError:
    return errors.ApiError(
        403, "forbidden", "a processor credential cannot use the operator API; use an operator's"
    )


@dataclass(frozen=True)
class Caller:
    """The operator making a request (None: an open read on loopback); the session it came
    with, if it came with the UI's cookie."""

    operator: str | None
    session: Session | None = None


class OperatorGate:
    def __init__(self, runtime_factory: Callable[[], Runtime], bind_host: str) -> None:
        self.runtime_factory = runtime_factory
        self.loopback = is_loopback(bind_host)

    def check(self, request: Request, action: bool = False) -> Caller:
        """The caller, or raise ApiError 401 / 403 / 429 / 503. Blocking: run in a worker
        thread."""
        client = client_of(request)
        try:
            runtime = self.runtime_factory()
            header = request.headers.get("authorization")
            if header is not None:
                scheme, _, token = header.partition(" ")
                token = token.strip()
                if scheme.lower() == "bearer" and operators.token_operator(token) is not None:
                    operator = operators.authenticate(runtime, token, client, "operator bearer")
                    if operator is not None:
                        return Caller(operator.name)
                elif self._is_processor(runtime, request, client):
                    raise forbidden_processor()
                raise errors.unauthorized()
            if request.headers.get(auth.SIGNATURE_HEADER) is not None:
                if self._is_processor(runtime, request, client):
                    raise forbidden_processor()
                raise errors.unauthorized()
            cookie = request.cookies.get(COOKIE)
            if cookie is not None:
                caller = self._session_caller(runtime, cookie, client)
                if action and UI_HEADER not in request.headers:
                    # The cookie proves an action only with the UI's header, which a page of
                    # another site cannot send (cross-site request forgery).
                    raise errors.ApiError(
                        403, "forbidden", f"a cookie-borne action needs {UI_HEADER}"
                    )
                return caller
            if not action and self._open_reads(runtime, request):
                return Caller(None)
        except auth.Throttled as throttled:
            raise errors.rate_limited(throttled.retry_after) from None
        except JOURNAL_DOWN:
            raise errors.unavailable() from None
        except redis.RedisError:
            raise errors.unavailable("the session store (Redis)") from None
        raise errors.unauthorized()

    def session(self, request: Request) -> Session | None:
        """The live operator session the request's cookie names (no throttle: for the sign-in
        and sign-out pages, which only replace or end it)."""
        cookie = request.cookies.get(COOKIE)
        if cookie is None:
            return None
        found = SessionStore.of(self.runtime_factory()).get(cookie)
        return found if found is not None and found.principal.startswith(_OPERATOR) else None

    def _open_reads(self, runtime: Runtime, request: Request) -> bool:
        return (
            self.loopback
            and is_loopback_host(request.headers.get("host", ""))
            and not operators.any_configured(runtime)
        )

    @staticmethod
    def _session_caller(runtime: Runtime, cookie: str, client: str | None) -> Caller:
        """The operator of a live session, or raise (401, or 429 past the failure limit)."""
        session = SessionStore.of(runtime).get(cookie)
        if session is not None and session.principal.startswith(_OPERATOR):
            name = session.principal.removeprefix(_OPERATOR)
            # Removing an operator ends its sessions; this holds even if Redis missed that.
            if OperatorJournal(runtime.engine).get(name) is not None:
                return Caller(name, session)
        verdict = auth_throttle.check(runtime, client, None)
        if verdict.retry_after is not None:
            raise auth.Throttled(verdict.retry_after)
        auth_throttle.record_failure(runtime, client, None)
        logs.emit("auth_failed", face="operator cookie", reason="no such session", client=client)
        raise errors.unauthorized()

    @staticmethod
    def _is_processor(runtime: Runtime, request: Request, client: str | None) -> bool:
        """Whether the request carries a valid processor credential (its failure counts)."""
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            auth.authenticate(runtime, request.method, path, request.headers, b"", client=client)
        except (auth.AuthError, auth.Unavailable):
            return False
        return True
