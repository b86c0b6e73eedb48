"""The operator API's routes for a delegate's timers (listing them, cancelling an active one)
and its memories.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from inner_plane import operators
from inner_plane.http.operator_calls import (
    NOT_FOUND,
    ActionBody,
    Cursor,
    Limit,
    OperatorCalls,
    UuidPath,
    page_route,
    parse_uuid,
)
from inner_plane.journal.operator import reads
from inner_plane.runtime import Runtime
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError


def add_timer_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @page_route(router, "/timers", summary="A delegate's timers")
    async def timers(
        request: Request,
        delegate: Annotated[str, Query(max_length=128)] = "default",
        include_finished: bool = False,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        return await calls.page(
            request,
            lambda rt: reads.timers_page(
                rt.engine,
                delegate,
                include_finished=include_finished,
                cursor=cursor,
                limit=limit,
            ),
        )

    @router.post(
        "/timers/{timer_id}/cancel",
        response_model=ActionBody,
        summary="Cancel an active timer",
        responses={**NOT_FOUND, 409: errors._doc("The timer is not active")},
    )
    async def cancel(request: Request, timer_id: UuidPath) -> Response:
        def work(rt: Runtime, operator: str) -> Any:
            key = parse_uuid("timer_id", timer_id)  # after the credential check
            done = operators.cancel_timer(rt, key, operator)
            if done is None:
                from inner_plane.journal.timers.store import TimerJournal

                if TimerJournal(rt.engine).get(key) is None:
                    raise ApiError(404, "not_found", "no such timer")
                raise ApiError(409, "conflict", "the timer is not active")
            return done

        return await calls.act(request, work)


def add_memory_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @page_route(router, "/memories", summary="A delegate's memories")
    async def memories(
        request: Request,
        delegate: Annotated[str, Query(max_length=128)] = "default",
        kind: Literal["standing", "learned"] | None = None,
        include_superseded: bool = False,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        return await calls.page(
            request,
            lambda rt: reads.memories_page(
                rt.engine,
                delegate,
                kind=kind,
                include_superseded=include_superseded,
                cursor=cursor,
                limit=limit,
            ),
        )
