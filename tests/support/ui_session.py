"""Signing in to the operator UI as a browser does: fetch the form (its anti-CSRF token and the
cookie set with it), then post it."""

from __future__ import annotations

import re
from typing import Any

import httpx

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def form_csrf(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "no csrf field in the page"
    return found.group(1)


def sign_in(client: Any, token: str, next: str = "/", **kwargs: Any) -> httpx.Response:
    """POST the sign-in form fetched with ``client`` (a TestClient or an httpx.Client)."""
    form = client.get("/login")
    data = {"token": token, "next": next, "csrf": form_csrf(form.text)}
    response: httpx.Response = client.post("/login", data=data, **kwargs)
    return response
