"""Parameters FastAPI refuses (a query parameter out of range, a malformed date) are answered
like every other error of the API (the declared ``ErrorBody``: ``guards.handle_validation_error``).

On the operator API the credential is checked first, as the README promises: without one, a bad
parameter is 401 like any other request (FastAPI validates parameters before the handler runs,
where the credential check lives, so the check is made here for a refused request).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response

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


# Why json.loads could not read a body at all (a syntax error is FastAPI's own 422 already).
_UNDECODABLE: dict[type[BaseException], str] = {
    UnicodeDecodeError: "must be UTF-8",
    RecursionError: "is nested too deeply",
}


def undecodable_body(validation: Handler) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's HTTPException handler. FastAPI answers a JSON body it cannot decode at all (not
    UTF-8, or nested deeper than Python's recursion limit) with a 400 of its own, one no route
    declares; it is a refused body like any other: 422 naming ``body``, through ``validation``
    (so the operator credential still comes first). Every other HTTPException as FastAPI's."""

    async def handle(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        cause = error.__cause__
        reason = None if cause is None else _UNDECODABLE.get(type(cause))
        if error.status_code == 400 and reason is not None:
            refused = RequestValidationError(
                [{"type": "json_invalid", "loc": ("body",), "msg": reason, "input": {}}]
            )
            return await validation(request, refused)
        return await http_exception_handler(request, error)

    return handle
