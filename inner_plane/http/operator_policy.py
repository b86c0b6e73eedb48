"""The operator API's routes for the attention policy: the version in force, its history, a
diff against a candidate, apply and roll back (recorded with the operator who did it). A refused
document answers 422 naming the first field and why (``message`` lists every problem) and
changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, ValidationError

from inner_plane.attention import versions
from inner_plane.attention.document import (
    MAX_DOCUMENT_BYTES,
    PolicyError,
    SettingsDefaults,
    parse_document,
)
from inner_plane.http.json_body import NotJson, json_document
from inner_plane.http.operator_calls import NOT_FOUND, ActionBody, OperatorCalls, json_response
from inner_plane.runtime import Runtime
from inner_plane.signals.model import IDENTIFIER_PATTERN
from inner_plane.simulator.replay import simulate as replay
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError
from inner_plane.sources.intake import read_body

Body = TypeVar("Body", bound=BaseModel)
# JSON escapes can double a document's size; anything beyond is refused before it is read.
MAX_BODY = 2 * MAX_DOCUMENT_BYTES + 1024


class PolicyBody(BaseModel):
    document: str = Field(
        max_length=MAX_DOCUMENT_BYTES, description="A policy TOML document (docs/policy.md)"
    )


class RollbackBody(BaseModel):
    version: int = Field(ge=1, le=2**31 - 1)


async def capped_body(request: Request) -> bytes:
    """The request body, read here with a cap rather than by FastAPI (which would buffer any
    size and answer without a field); refused by size before the credential is checked, as
    every route of the API."""
    try:
        return await read_body(request, MAX_BODY)
    except ApiError as error:
        if error.status != 413:
            raise
        raise ApiError(
            413,
            "too_large",
            f"document: larger than {MAX_DOCUMENT_BYTES} bytes",
            field="document",
            reason=f"a policy holds at most {MAX_DOCUMENT_BYTES} bytes",
        ) from None


def parsed(raw: bytes, model: type[Body]) -> Body:
    """The JSON body as ``model`` (after the credential check), or 422 naming the field."""
    try:
        document = json_document(raw)
    except NotJson as error:
        raise errors.invalid("body", f"not valid JSON: {error.reason}") from None
    try:
        return model.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise errors.invalid(field, first["msg"]) from None


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


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

    @router.post(
        "/policy/diff",
        summary="What applying a candidate document would change",
        openapi_extra=_documented(PolicyBody),
    )
    async def diff(request: Request) -> Response:
        raw = await capped_body(request)

        def work(rt: Runtime) -> dict[str, Any]:
            body = parsed(raw, PolicyBody)
            checked(rt, body.document)
            return {"diff": versions.diff(rt, body.document)}

        return json_response(await calls.read(request, work))

    @router.post(
        "/policy",
        response_model=ActionBody,
        summary="Validate a document and put it in force as a new version",
        openapi_extra=_documented(PolicyBody),
    )
    async def apply(request: Request) -> Response:
        raw = await capped_body(request)

        def work(rt: Runtime, operator: str) -> dict[str, Any]:
            body = parsed(raw, PolicyBody)
            checked(rt, body.document)
            return {"version": versions.apply(rt, body.document, f"operator:{operator}")}

        return await calls.act(request, work)

    @router.post(
        "/policy/rollback",
        response_model=ActionBody,
        summary="Put an earlier version's document back in force (as a new version)",
        responses=NOT_FOUND,
        openapi_extra=_documented(RollbackBody),
    )
    async def rollback(request: Request) -> Response:
        raw = await capped_body(request)

        def work(rt: Runtime, operator: str) -> dict[str, Any]:
            body = parsed(raw, RollbackBody)
            new = versions.rollback(rt, body.version, f"operator:{operator}")
            if new is None:
                raise ApiError(404, "not_found", f"no policy version {body.version}")
            return {"version": new, "restored": body.version}

        return await calls.act(request, work)


class SimulateBody(BaseModel):
    document: str = Field(max_length=MAX_DOCUMENT_BYTES, description="The candidate policy (TOML)")
    since: datetime = Field(description="ISO-8601 instant with its offset")
    until: datetime | None = Field(default=None, description="ISO-8601 instant (default: now)")
    delegate: str | None = Field(default=None, max_length=128, pattern=IDENTIFIER_PATTERN)
    tolerance_s: float = Field(default=2.0, ge=0, le=3600)


def add_simulate_route(router: APIRouter, calls: OperatorCalls) -> None:
    @router.post(
        "/simulate",
        summary="Replay the journal's recorded signals under a candidate policy (reads only)",
        openapi_extra=_documented(SimulateBody),
    )
    async def simulate(request: Request) -> Response:
        raw = await capped_body(request)

        def work(rt: Runtime) -> dict[str, Any]:
            body = parsed(raw, SimulateBody)
            for name, moment in (("since", body.since), ("until", body.until)):
                if moment is not None and moment.tzinfo is None:
                    raise errors.invalid(name, "give the offset (e.g. Z or +00:00)")
            until = body.until or datetime.now(UTC)
            if until <= body.since:
                raise errors.invalid("until", "must be after since")
            try:
                document = parse_document(
                    body.document,
                    (k.kind for k in rt.registry.kinds()),
                    SettingsDefaults.of(rt.settings),
                )
            except PolicyError as error:
                raise refused(error) from None
            return replay(
                rt.engine,
                rt.registry,
                rt.settings,
                document,
                body.since,
                until,
                body.delegate,
                tolerance_s=body.tolerance_s,
                label="candidate (API)",
            )

        return json_response(await calls.read(request, work))
