"""Error responses of the API faces (HTTP and MCP): one JSON shape, precise status codes, nothing
leaked."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    error: str = Field(description="Machine-readable code, e.g. invalid_signal, forbidden")
    message: str = Field(description="One human-readable sentence")
    field: str | None = Field(
        default=None, description="The offending field, e.g. signals[2].priority"
    )
    reason: str | None = Field(default=None, description="Why the field was refused")


class AsciiJSONResponse(JSONResponse):
    """JSON escaped to ASCII: an echoed field name can never break the encoding."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        field: str | None = None,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorBody(error=error, message=message, field=field, reason=reason)
        self.headers = headers or {}

    def response(self) -> AsciiJSONResponse:
        return AsciiJSONResponse(
            self.body.model_dump(exclude_none=True), status_code=self.status, headers=self.headers
        )


def unauthorized() -> ApiError:
    return ApiError(
        401,
        "unauthorized",
        "missing or invalid credentials",
        headers={"WWW-Authenticate": 'Bearer realm="inner-plane"'},
    )


def unavailable(what: str = "the journal") -> ApiError:
    return ApiError(
        503, "unavailable", f"{what} is unreachable; retry later", headers={"Retry-After": "5"}
    )


def too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"request body exceeds {limit} bytes")


def invalid(field: str, reason: str) -> ApiError:
    return ApiError(422, "invalid_signal", f"{field}: {reason}", field=field, reason=reason)


def forbidden(field: str, reason: str) -> ApiError:
    return ApiError(403, "forbidden", f"{field}: {reason}", field=field, reason=reason)


def rate_limited(retry_after: int) -> ApiError:
    return ApiError(
        429,
        "rate_limited",
        f"too many requests; retry after {retry_after} s",
        headers={"Retry-After": str(retry_after)},
    )


async def handle_api_error(_request: Request, error: Exception) -> AsciiJSONResponse:
    assert isinstance(error, ApiError)
    return error.response()


def _doc(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"model": ErrorBody, "description": description}
    if headers:
        entry["headers"] = headers
    return entry


RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}}
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _doc("Missing or invalid credentials (no detail is given)"),
    429: _doc("Over the processor's rate limit", RETRY_AFTER),
    503: _doc("The journal (or replay protection) is unreachable", RETRY_AFTER),
}
PUBLISH_ERRORS: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS,
    403: _doc("Kind, delegate, mode, source or trust outside the processor's grant"),
    413: _doc("Request body too large"),
    422: _doc("Invalid signal: `field` and `reason` say which and why"),
}
STATUS_ERRORS: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS,
    404: _doc("No signal with this id published by this processor"),
    422: _doc("The id is not a UUID"),
}
