"""The operator API's signal routes: searching signals, one signal with its events, the dead
letters, retrying and dismissing a signal; and the processors that publish signals (never their
secrets).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from inner_plane import operators
from inner_plane.http.operator_calls import (
    NOT_FOUND,
    ActionBody,
    Cursor,
    Limit,
    OperatorCalls,
    UuidPath,
    json_response,
    page_route,
    parse_uuid,
)
from inner_plane.journal.operator import reads
from inner_plane.runtime import Runtime
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError

SignalState = Literal["pending", "claimed", "delivered", "dismissed", "expired", "dead"]


class DismissBody(BaseModel):
    reason: str = Field(default="dismissed by operator", min_length=1, max_length=500)


def add_signal_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @page_route(router, "/signals", summary="Search signals, newest first")
    async def search(
        request: Request,
        state: SignalState | None = None,
        kind_prefix: Annotated[str | None, Query(max_length=128)] = None,
        source: Annotated[str | None, Query(max_length=128)] = None,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        since: Annotated[datetime | None, Query(description="created at or after")] = None,
        until: Annotated[datetime | None, Query(description="created before")] = None,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        """Each signal comes with its events (claims, deferrals, retries, operator actions)."""
        for name, value in (("since", since), ("until", until)):
            if value is not None and value.tzinfo is None:
                raise errors.invalid(name, "must carry a UTC offset")
        return await calls.page(
            request,
            lambda rt: reads.search_signals(
                rt.engine,
                state=state,
                kind_prefix=kind_prefix,
                source=source,
                delegate_id=delegate,
                since=since,
                until=until,
                cursor=cursor,
                limit=limit,
            ),
        )

    @router.get(
        "/signals/{signal_id}/detail",
        summary="One signal with its events (operators)",
        responses=NOT_FOUND,
    )
    async def signal_detail(request: Request, signal_id: UuidPath) -> Response:
        found = await calls.read(
            request, lambda rt: reads.get_signal(rt.engine, parse_uuid("signal_id", signal_id))
        )
        if found is None:
            raise ApiError(404, "not_found", "no such signal")
        return json_response(found)

    @page_route(router, "/dead-letters", summary="Dead signals, newest first")
    async def dead_letters(
        request: Request,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        return await calls.page(
            request, lambda rt: reads.dead_letters(rt.engine, delegate, cursor, limit)
        )

    @router.post(
        "/signals/{signal_id}/retry",
        response_model=ActionBody,
        summary="Retry a dead, dismissed or expired signal",
        responses={**NOT_FOUND, 409: errors._doc("The signal is not in a retryable state")},
    )
    async def retry(request: Request, signal_id: UuidPath) -> Response:
        def work(rt: Runtime, operator: str) -> Any:
            key = parse_uuid("signal_id", signal_id)  # after the credential check
            done = operators.retry_signal(rt, key, operator)
            if done is None:
                _missing_or_conflict(rt, key, "is not dead, dismissed or expired")
            return done

        return await calls.act(request, work)

    @router.post(
        "/signals/{signal_id}/dismiss",
        response_model=ActionBody,
        summary="Dismiss a pending or dead signal",
        responses={**NOT_FOUND, 409: errors._doc("The signal is not pending or dead")},
    )
    async def dismiss(
        request: Request, signal_id: UuidPath, body: Annotated[DismissBody | None, Body()] = None
    ) -> Response:
        reason = (body or DismissBody()).reason

        def work(rt: Runtime, operator: str) -> Any:
            key = parse_uuid("signal_id", signal_id)  # after the credential check
            done = operators.dismiss_signal(rt, key, operator, reason)
            if done is None:
                _missing_or_conflict(rt, key, "is not pending or dead")
            return done

        return await calls.act(request, work)

    @page_route(router, "/processors", summary="Processors (never secrets)")
    async def processors(request: Request, cursor: Cursor = None, limit: Limit = 50) -> Response:
        return await calls.page(request, lambda rt: reads.processors_page(rt.engine, cursor, limit))


def _missing_or_conflict(rt: Runtime, key: uuid.UUID, why: str) -> None:
    if rt.signals.get(key) is None:
        raise ApiError(404, "not_found", "no such signal")
    raise ApiError(409, "conflict", f"the signal {why}")
