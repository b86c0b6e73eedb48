"""How an operator route calls the journal, written once for every route of the operator API:
the credential check first (:mod:`inner_plane.http.operator_auth`), the journal work in a worker
thread, journal and cursor failures as the API's errors; a list read answered as one cursor page
(:func:`page_route` with :meth:`OperatorCalls.page`); an action answered with the operator who
took it. Also the query parameters, bodies and error documents the route groups share.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from fastapi.types import DecoratedCallable
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from inner_plane import operators
from inner_plane.http.operator_auth import Caller, OperatorGate
from inner_plane.journal.operator import reads
from inner_plane.runtime import Runtime
from inner_plane.sources import errors
from inner_plane.sources.errors import AsciiJSONResponse
from inner_plane.sources.intake import JOURNAL_DOWN

T = TypeVar("T")

Limit = Annotated[int, Query(ge=1, le=reads.MAX_LIMIT, description="Items per page")]
Cursor = Annotated[
    str | None, Query(max_length=512, description="`next` of the previous page (opaque)")
]
# A path id the server requires to be a UUID, declared so (format: uuid). Kept a string for
# FastAPI: the handler parses it after the credential check (parse_uuid), so a request without
# a credential is 401 whatever its id, and a bad id is 422 in the API's error body.
UuidPath = Annotated[str, Path(json_schema_extra={"format": "uuid"})]


class PageBody(BaseModel):
    items: list[dict[str, Any]]
    next: str | None = Field(description="Cursor of the next page; null on the last page")


class ActionBody(BaseModel):
    operator: str
    result: Any


OPERATOR_ERRORS: dict[int | str, dict[str, Any]] = {
    401: errors._doc("Missing or invalid operator credential"),
    403: errors._doc("A processor's credential (operators only)"),
    422: errors._doc("Invalid parameter: `field` and `reason` say which and why"),
    503: errors._doc("The journal is unreachable", errors.RETRY_AFTER),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: errors._doc("No such item")}


def parse_uuid(field: str, value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise errors.invalid(field, "must be a UUID") from None


def json_response(body: Any) -> Response:
    """The reads answer already-serialisable data: written straight out, not re-validated
    against the documented model (that costs more than the read itself on a page of 100)."""
    return AsciiJSONResponse(body)


def page_route(
    router: APIRouter, path: str, summary: str
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """A GET route answering one cursor page, documented as :class:`PageBody`."""
    return router.get(
        path, responses={200: {"model": PageBody}}, response_model=None, summary=summary
    )


class OperatorCalls:
    """The journal as the operator routes call it: credential checked, in a worker thread."""

    def __init__(self, runtime_factory: Callable[[], Runtime], gate: OperatorGate) -> None:
        self.runtime_factory = runtime_factory
        self.gate = gate

    async def read(self, request: Request, work: Callable[[Runtime], T], action: bool = False) -> T:
        def run() -> T:
            self.gate.check(request, action)
            try:
                return work(self.runtime_factory())
            except reads.CursorError:
                raise errors.invalid("cursor", "not a cursor of this list") from None
            except JOURNAL_DOWN:
                raise errors.unavailable() from None

        return await run_in_threadpool(run)

    async def page(self, request: Request, read_page: Callable[[Runtime], reads.Page]) -> Response:
        """One page of a list read, as ``{"items": [...], "next": cursor or null}``."""
        found = await self.read(request, read_page)
        return json_response({"items": found.items, "next": found.next})

    async def act(self, request: Request, work: Callable[[Runtime, str], Any]) -> Response:
        """An operator action, given the operator's name; its refusals as 422."""

        def run() -> dict[str, Any]:
            caller: Caller = self.gate.check(request, action=True)
            assert caller.operator is not None
            try:
                result = work(self.runtime_factory(), caller.operator)
            except operators.OperatorError as error:
                field, _, reason = str(error).partition(": ")
                raise errors.invalid(field, reason) from None
            except JOURNAL_DOWN:
                raise errors.unavailable() from None
            return {"operator": caller.operator, "result": result}

        return AsciiJSONResponse(await run_in_threadpool(run))
