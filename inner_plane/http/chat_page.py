"""The person's chat page at ``/chat``, apart from the operator UI: sign in with a person token
(a server-side session in an HttpOnly cookie, :mod:`inner_plane.http.chat_session`), then the
page talks to the conversation API with that cookie.

Same rules as the operator UI: Jinja2 autoescaping, the strict Content-Security-Policy (no
inline script or style), assets inside the package, no build step; the sign-in form carries an
anti-CSRF token bound to a SameSite=Strict cookie, sign-out the session's own, and a turn sent
with the cookie needs the page's header. The page's script writes every message with
``textContent``; the server sends only the person's and the assistant's words
(:mod:`inner_plane.journal.conversation.person`).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from typing import Annotated

import redis
from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from inner_plane.http import chat_session
from inner_plane.http.conversation_auth import AuthenticatePerson
from inner_plane.http.ui import TEMPLATES
from inner_plane.runtime import Runtime
from inner_plane.sources import auth
from inner_plane.sources.intake import JOURNAL_DOWN, client_of

# Every route of the page and who may open it (the route-table test checks there is one).
PAGE_SCOPES = {
    ("GET", "/chat"): "a person's session (else the sign-in form)",
    ("POST", "/chat/login"): "anyone with the form's anti-CSRF token: proves a person token",
    ("POST", "/chat/logout"): "the session's own anti-CSRF token: ends this browser's session",
}


def build_router(
    runtime_factory: Callable[[], Runtime], authenticate_person: AuthenticatePerson
) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def sign_in_form(request: Request, error: str | None, status: int) -> Response:
        csrf = secrets.token_urlsafe(32)
        response = TEMPLATES.TemplateResponse(
            request, "chat_login.html", {"error": error, "csrf": csrf}, status
        )
        response.set_cookie(
            chat_session.LOGIN_COOKIE, csrf, httponly=True, samesite="strict",
            path="/chat/login", secure=request.url.scheme == "https", max_age=3600,
        )  # fmt: skip
        return response

    @router.get("/chat", response_class=HTMLResponse)
    async def chat(request: Request) -> Response:
        runtime = runtime_factory()
        try:
            found = await run_in_threadpool(chat_session.person, runtime, request)
        except (redis.RedisError, *JOURNAL_DOWN):
            return sign_in_form(request, "The plane's stores are unreachable; retry.", 503)
        if found is None:
            return sign_in_form(request, None, 200)
        return TEMPLATES.TemplateResponse(
            request,
            "chat.html",
            {
                "delegate": found.delegate_id,
                "csrf": found.session.csrf,
                "max_text": runtime.settings.chat_max_text,
            },
            headers={"Cache-Control": "no-store"},
        )

    @router.post("/chat/login", response_class=HTMLResponse)
    async def login(
        request: Request,
        token: Annotated[str, Form(max_length=300)],
        csrf: Annotated[str, Form(max_length=100)] = "",
    ) -> Response:
        expected = request.cookies.get(chat_session.LOGIN_COOKIE, "")
        if not csrf or not hmac.compare_digest(csrf.encode(), expected.encode()):
            return sign_in_form(request, "The sign-in form expired: sign in again.", 403)
        runtime = runtime_factory()
        response = RedirectResponse("/chat", 303)

        def sign_in() -> bool:
            try:
                principal = authenticate_person(runtime, token.strip(), client_of(request))
            except auth.AuthError:
                return False
            chat_session.start(runtime, request, response, principal.token_id)
            return True

        try:
            signed_in = await run_in_threadpool(sign_in)
        except auth.Throttled as throttled:
            refused = sign_in_form(request, "Too many failed sign-ins: wait a minute.", 429)
            refused.headers["Retry-After"] = str(throttled.retry_after)
            return refused
        except (redis.RedisError, *JOURNAL_DOWN):
            return sign_in_form(request, "The plane's stores are unreachable; retry.", 503)
        if not signed_in:
            return sign_in_form(request, "That is not a valid token.", 401)
        response.delete_cookie(chat_session.LOGIN_COOKIE, path="/chat/login")
        return response

    @router.post("/chat/logout")
    async def logout(request: Request, csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
        runtime = runtime_factory()
        response = RedirectResponse("/chat", 303)

        def sign_out() -> bool:
            found = chat_session.person(runtime, request)
            if found is not None and not hmac.compare_digest(
                csrf.encode(), found.session.csrf.encode()
            ):
                return False
            chat_session.end(runtime, request, response)
            return True

        try:
            ended = await run_in_threadpool(sign_out)
        except (redis.RedisError, *JOURNAL_DOWN):
            return sign_in_form(request, "The plane's stores are unreachable; retry.", 503)
        if not ended:
            return sign_in_form(request, "Sign out from the page's own button.", 403)
        return response

    return router
