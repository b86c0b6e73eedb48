"""The operator API's routes for the attention policy: the version in force, its history, a
diff against a candidate, apply and roll back (recorded with the operator who did it). A refused
document answers 422 naming the first field and why (``message`` lists every problem) and
changes nothing."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from inner_plane.attention import versions
from inner_plane.attention.document import MAX_DOCUMENT_BYTES, PolicyError
from inner_plane.http.operator_calls import NOT_FOUND, ActionBody, OperatorCalls, json_response
from inner_plane.runtime import Runtime
from inner_plane.sources.errors import ApiError


class PolicyBody(BaseModel):
    document: str = Field(
        max_length=MAX_DOCUMENT_BYTES, description="A policy TOML document (docs/policy.md)"
    )


class RollbackBody(BaseModel):
    version: int = Field(ge=1, le=2**31 - 1)


def refused(error: PolicyError) -> ApiError:
    where, why = error.problems[0]
    field = f"document.{where}" if where != "document" else "document"
    return ApiError(422, "invalid_policy", str(error), field=field, reason=why)


def checked(runtime: Runtime, document: str) -> None:
    if len(document.encode()) > MAX_DOCUMENT_BYTES:
        raise refused(PolicyError([("document", f"larger than {MAX_DOCUMENT_BYTES} bytes")]))
    try:
        versions.validate(runtime, document)
    except PolicyError as error:
        raise refused(error) from None


def add_policy_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @router.get("/policy", summary="The attention policy in force, as a document")
    async def show(request: Request) -> Response:
        found = await calls.read(request, lambda rt: versions.show(rt).public())
        return json_response(found)

    @router.get("/policy/history", summary="Every policy version, newest first")
    async def history(request: Request, limit: int = Query(50, ge=1, le=1000)) -> Response:
        found = await calls.read(request, lambda rt: versions.history(rt, limit))
        return json_response({"items": found})

    @router.post("/policy/diff", summary="What applying a candidate document would change")
    async def diff(request: Request, body: PolicyBody) -> Response:
        def work(rt: Runtime) -> dict[str, Any]:
            checked(rt, body.document)
            return {"diff": versions.diff(rt, body.document)}

        return json_response(await calls.read(request, work))

    @router.post(
        "/policy",
        response_model=ActionBody,
        summary="Validate a document and put it in force as a new version",
    )
    async def apply(request: Request, body: PolicyBody) -> Response:
        def work(rt: Runtime, operator: str) -> dict[str, Any]:
            checked(rt, body.document)
            return {"version": versions.apply(rt, body.document, f"operator:{operator}")}

        return await calls.act(request, work)

    @router.post(
        "/policy/rollback",
        response_model=ActionBody,
        summary="Put an earlier version's document back in force (as a new version)",
        responses=NOT_FOUND,
    )
    async def rollback(request: Request, body: RollbackBody) -> Response:
        def work(rt: Runtime, operator: str) -> dict[str, Any]:
            new = versions.rollback(rt, body.version, f"operator:{operator}")
            if new is None:
                raise ApiError(404, "not_found", f"no policy version {body.version}")
            return {"version": new, "restored": body.version}

        return await calls.act(request, work)
