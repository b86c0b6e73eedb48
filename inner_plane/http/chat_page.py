"""The person's chat page at ``/chat``, apart from the operator UI: sign in with a person token
(kept in an HttpOnly cookie session, :mod:`inner_plane.http.chat_session`), then the page talks
to the conversation API with that cookie.

Same rules as the operator UI: Jinja2 autoescaping, the strict Content-Security-Policy (no
inline script or style), assets inside the package, no build step. The page's script writes
every message with ``textContent``; the server sends only the person's and the assistant's
words (:mod:`inner_plane.journal.conversation.person`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from inner_plane.http import chat_session
from inner_plane.http.conversation_auth import ConversationCaller, ConversationGate
from inner_plane.http.ui import TEMPLATES
from inner_plane.runtime import Runtime
from inner_plane.sources.errors import ApiError

# Every route of the page and who may open it (the route-table test checks there is one).
PAGE_SCOPES = {
    ("GET", "/chat"): "a person's session (else the sign-in form)",
    ("POST", "/chat/login"): "anyone: proves a person token",
    ("POST", "/chat/logout"): "anyone: ends this browser's session",
}


def build_router(runtime_factory: Callable[[], Runtime], gate: ConversationGate) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def sign_in_form(request: Request, error: str | None, status: int) -> Response:
        return TEMPLATES.TemplateResponse(request, "chat_login.html", {"error": error}, status)

    @router.get("/chat", response_class=HTMLResponse)
    async def chat(request: Request) -> Response:
        if chat_session.token(request) is None:
            return sign_in_form(request, None, 200)
        try:
            caller: ConversationCaller = await run_in_threadpool(gate.check, request)
        except ApiError as error:
            if error.status == 429:
                return sign_in_form(request, "Too many attempts; wait a minute.", 429)
            response = sign_in_form(request, "Please sign in again.", 401)
            chat_session.end(response)
            return response
        if caller.delegate_id is None:  # an operator's cookie: this page is the person's
            return sign_in_form(request, None, 200)
        return TEMPLATES.TemplateResponse(
            request,
            "chat.html",
            {
                "delegate": caller.delegate_id,
                "max_text": runtime_factory().settings.chat_max_text,
            },
            headers=_private(),
        )

    @router.post("/chat/login", response_class=HTMLResponse)
    async def login(request: Request, token: Annotated[str, Form(max_length=300)]) -> Response:
        bare = token.strip()
        probe = _with_token(request, bare)
        try:
            caller = await run_in_threadpool(gate.check, probe)
        except ApiError as error:
            if error.status == 429:
                return sign_in_form(request, "Too many attempts; wait a minute.", 429)
            return sign_in_form(request, "That is not a valid token.", 401)
        if caller.delegate_id is None:
            return sign_in_form(request, "That is an operator token; use a person's.", 401)
        response = RedirectResponse("/chat", 303)
        chat_session.start(response, request, bare)
        return response

    @router.post("/chat/logout")
    async def logout() -> Response:
        response = RedirectResponse("/chat", 303)
        chat_session.end(response)
        return response

    return router


def _private() -> dict[str, str]:
    return {"Cache-Control": "no-store"}


def _with_token(request: Request, token: str) -> Request:
    """The sign-in request as if it carried the token as a bearer credential (the gate then
    applies the person-token rules: throttle, negative cache, timing)."""
    scope = dict(request.scope)
    headers = [(k, v) for k, v in scope["headers"] if k not in (b"authorization", b"cookie")]
    headers.append((b"authorization", b"Bearer " + token.encode("latin-1", "replace")))
    scope["headers"] = headers
    return Request(scope)
