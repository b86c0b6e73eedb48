"""Who may use a delegate's conversation: its person, and operators (reading only).

A request proves a person with ``Authorization: Bearer ipp.…`` (a token of
``inner-plane delegates token``) or with the chat page's session cookie; an operator with an
operator token. Every conversation route declares its scope in
:data:`SCOPES` (a test fails for a route without one):

- ``read``: the delegate's own person, or an operator;
- ``send``: the delegate's own person only (an operator or processor may not speak as them);
  a cookie-borne send needs the page's header as well (cross-site request forgery: another
  site's page cannot send it).

A person token of another delegate answers 403, no or a bad credential 401, a processor's
credential 403. Person tokens are checked by
:func:`inner_plane.sources.person_auth.authenticate_person` (the throttle, negative cache and
timing rules of processors).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis
from fastapi import Request

from inner_plane import operators
from inner_plane.http import chat_session
from inner_plane.http.operator_auth import UI_HEADER
from inner_plane.runtime import Runtime
from inner_plane.sources import auth, errors, person_auth
from inner_plane.sources.intake import JOURNAL_DOWN, client_of


class Scope(enum.Enum):
    READ = "read"
    SEND = "send"


class Principal(Protocol):
    @property
    def delegate_id(self) -> str: ...

    @property
    def token_id(self) -> uuid.UUID: ...


# (runtime, bare token or None, client address) -> the person, or raise auth.AuthError /
# auth.Throttled: inner_plane.sources.person_auth.authenticate_person's contract.
AuthenticatePerson = Callable[[Runtime, str | None, str | None], Principal]


@dataclass(frozen=True)
class ConversationCaller:
    """A person (``delegate_id``) or an operator (``operator``). ``unconfirmed``: the person's
    token (id, hash) was vouched for from memory, and the write must confirm it stands."""

    delegate_id: str | None
    operator: str | None
    via_cookie: bool
    unconfirmed: tuple[uuid.UUID, str] | None = None

    def allow(self, scope: Scope, delegate_id: str, request: Request) -> None:
        """Raise ApiError 403 unless this caller may do ``scope`` on the delegate."""
        if self.delegate_id is None:
            if scope is Scope.SEND:
                raise errors.forbidden(
                    "authorization", "an operator may read a conversation but not send a turn"
                )
            return
        if self.delegate_id != delegate_id:
            raise errors.forbidden("delegate_id", "this token belongs to another delegate")
        if scope is Scope.SEND and self.via_cookie and UI_HEADER not in request.headers:
            raise errors.forbidden(UI_HEADER, "a turn sent with the session cookie needs it")


class ConversationGate:
    def __init__(
        self, runtime_factory: Callable[[], Runtime], authenticate_person: AuthenticatePerson
    ) -> None:
        self.runtime_factory = runtime_factory
        self.authenticate_person = authenticate_person

    def check(self, request: Request, vouch: bool = False) -> ConversationCaller:
        """The caller, or raise ApiError 401 / 403 / 429 / 503. Blocking: a worker thread.
        ``vouch``: a person token this process proved before passes without reading its row
        (``unconfirmed`` then says what the caller's write must confirm; any refusal of the
        request confirms first, with :meth:`confirm`)."""
        header = request.headers.get("authorization")
        if vouch and header is not None:
            vouched = person_auth.vouched_person(_bearer(header))
            if vouched is not None:
                return ConversationCaller(
                    vouched.delegate_id,
                    None,
                    via_cookie=False,
                    unconfirmed=(vouched.token_id, vouched.secret_hash),
                )
        client = client_of(request)
        try:
            runtime = self.runtime_factory()
            if header is not None:
                token = _bearer(header)
                return self._token(runtime, request, token, client, via_cookie=False)
            if chat_session.cookie(request) is not None:
                found = chat_session.person(runtime, request)
                if found is not None:
                    return ConversationCaller(found.delegate_id, None, via_cookie=True)
            if request.headers.get(auth.SIGNATURE_HEADER) is not None:
                self._refuse_processor(runtime, request, client)
            self.authenticate_person(runtime, None, client)  # counts the failure, raises
        except auth.Throttled as throttled:
            raise errors.rate_limited(throttled.retry_after) from None
        except auth.AuthError:
            raise errors.unauthorized() from None
        except JOURNAL_DOWN:
            raise errors.unavailable() from None
        except redis.RedisError:
            raise errors.unavailable("the session store (Redis)") from None
        raise errors.unauthorized()

    def confirm(self, request: Request, caller: ConversationCaller) -> ConversationCaller:
        """A caller vouched for from memory, checked against the journal as :meth:`check` does
        (raise ApiError 401 if its token was revoked); any other caller as it is."""
        if caller.unconfirmed is None:
            return caller
        token = _bearer(request.headers.get("authorization") or "")
        if token is not None:
            person_auth.forget(token)
        return self.check(request)

    def _token(
        self,
        runtime: Runtime,
        request: Request,
        token: str | None,
        client: str | None,
        via_cookie: bool,
    ) -> ConversationCaller:
        if token is not None and operators.token_operator(token) is not None:
            operator = operators.authenticate(runtime, token, client, "conversation bearer")
            if operator is None:
                raise auth.AuthError("bad operator token")
            return ConversationCaller(None, operator.name, via_cookie)
        if token is not None and not token.startswith("ipp."):
            self._refuse_processor(runtime, request, client)
        principal = self.authenticate_person(runtime, token, client)
        return ConversationCaller(principal.delegate_id, None, via_cookie)

    @staticmethod
    def _refuse_processor(runtime: Runtime, request: Request, client: str | None) -> None:
        """403 if the request carries a valid processor credential (a known caller that may
        not use the conversation); otherwise return (and the caller refuses with 401)."""
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            auth.authenticate(runtime, request.method, path, request.headers, b"", client=client)
        except (auth.AuthError, auth.Unavailable):
            return
        raise errors.forbidden("authorization", "a processor credential cannot use a conversation")


def _bearer(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
