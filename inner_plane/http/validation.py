"""Parameters FastAPI refuses (a query parameter out of range, a malformed date) are answered
like every other error of the API (the declared ``ErrorBody``: ``guards.handle_validation_error``).

On the operator API the credential is checked first, as the README promises: without one, a bad
parameter is 401 like any other request (FastAPI validates parameters before the handler runs,
where the credential check lives, so the check is made here for a refused request).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool

from inner_plane.http.operator_auth import OperatorGate
from inner_plane.sources.errors import ApiError, AsciiJSONResponse

Handler = Callable[[Request, Exception], Awaitable[AsciiJSONResponse]]


def handler(gate: OperatorGate, refuse: Handler) -> Handler:
    """The app's RequestValidationError handler: the operator credential first on the operator
    API's routes, then ``refuse`` (the API's error body for the refused parameter)."""

    async def handle(request: Request, error: Exception) -> AsciiJSONResponse:
        assert isinstance(error, RequestValidationError)
        route = request.scope.get("route")
        if "operator" in getattr(route, "tags", ()):
            action = request.method not in {"GET", "HEAD", "OPTIONS"}
            try:
                await run_in_threadpool(gate.check, request, action)
            except ApiError as refused:
                return refused.response()
        return await refuse(request, error)

    return handle
