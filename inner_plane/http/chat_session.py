"""The chat page's sign-in: an HttpOnly, SameSite=Strict cookie naming the person's session.

Today the cookie holds the person token itself (as the operator UI's does); the server-side
session store replaces these three functions and nothing else.
"""

from __future__ import annotations

from fastapi import Request, Response

COOKIE = "inner_plane_chat"
MAX_AGE_S = 30 * 24 * 3600  # a person stays signed in on their device for a month


def start(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=MAX_AGE_S,
        path="/",
    )


def token(request: Request) -> str | None:
    """The person token of this request's session, or None."""
    return request.cookies.get(COOKIE) or None


def end(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")
