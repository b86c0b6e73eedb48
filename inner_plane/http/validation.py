"""Parameters FastAPI refuses (a query parameter out of range, a malformed date) answered like
every other error of the API: the declared ``ErrorBody`` (``error``, ``message``, ``field``,
``reason``), never FastAPI's default ``{"detail": [...]}``, and never the submitted value (the
field's name and pydantic's bounded reason only).

On the operator API the credential is checked first, as the README promises: without one, a bad
parameter is 401 like any other request (FastAPI validates parameters before the handler runs,
where the credential check lives, so the check is made here for a refused request).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool

from inner_plane.http.operator_auth import OperatorGate
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError, AsciiJSONResponse

MAX_REASON = 200
# Where a parameter came from: not part of its name.
_SOURCES = {"query", "path", "header", "cookie", "body"}


def field_of(location: Any) -> str:
    """``('query', 'limit')`` -> ``limit``; ``('body', 'items', 2)`` -> ``items[2]``."""
    parts = list(location) if isinstance(location, list | tuple) else [location]
    if parts and parts[0] in _SOURCES:
        parts = parts[1:]
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += ("." if name else "") + str(part)[:64]
    return name[:200] or "request"


def _first_error(error: RequestValidationError) -> tuple[str, str]:
    for entry in error.errors():
        field = field_of(entry.get("loc", ()))
        reason = str(entry.get("msg", "is not valid")).removeprefix("Value error, ")
        return field, reason[:MAX_REASON]
    return "request", "is not valid"


def handler(gate: OperatorGate) -> Any:
    """The app's RequestValidationError handler, checking the operator credential first on the
    operator API's routes."""

    async def handle(request: Request, error: Exception) -> AsciiJSONResponse:
        assert isinstance(error, RequestValidationError)
        route = request.scope.get("route")
        if "operator" in getattr(route, "tags", ()):
            action = request.method not in {"GET", "HEAD", "OPTIONS"}
            try:
                await run_in_threadpool(gate.check, request, action)
            except ApiError as refused:
                return refused.response()
        return errors.invalid(*_first_error(error)).response()

    return handle
