"""The operator API under ``/v1``: reads of the journal (cursor-paged JSON), operator actions,
and the live feed as server-sent events at ``/v1/events``.

Every handler checks the operator credential first (:mod:`inner_plane.http.operator_auth`),
then runs its journal work in a worker thread (:mod:`inner_plane.http.operator_calls`). The
routes, by resource: :mod:`inner_plane.http.operator_delegates` (delegates and activations),
:mod:`inner_plane.http.operator_signals` (signals, dead letters, processors),
:mod:`inner_plane.http.operator_timers_memories` (timers and memories); the live feed is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from inner_plane.http import guards
from inner_plane.http.live_feed import LiveFeed, wanted_by
from inner_plane.http.operator_auth import OperatorGate
from inner_plane.http.operator_calls import OPERATOR_ERRORS, OperatorCalls
from inner_plane.http.operator_delegates import (
    add_activation_routes,
    add_delegate_routes,
    add_person_routes,
)
from inner_plane.http.operator_policy import add_policy_routes, add_simulate_route
from inner_plane.http.operator_signals import add_signal_routes
from inner_plane.http.operator_timers_memories import add_memory_routes, add_timer_routes
from inner_plane.journal.operator.live import Position
from inner_plane.runtime import Runtime
from inner_plane.sources import errors
from inner_plane.sources.intake import client_of
from inner_plane.sources.streams import process_slots


def build_router(
    runtime_factory: Callable[[], Runtime], gate: OperatorGate, feed: Callable[[], LiveFeed]
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["operator"], responses=OPERATOR_ERRORS)
    calls = OperatorCalls(runtime_factory, gate)
    add_delegate_routes(router, calls)
    add_person_routes(router, calls)
    add_activation_routes(router, calls)
    add_signal_routes(router, calls)
    add_timer_routes(router, calls)
    add_memory_routes(router, calls)
    add_policy_routes(router, calls)
    add_simulate_route(router, calls)

    @router.get(
        "/events",
        summary="Live feed (server-sent events), resumable with Last-Event-ID",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def events(
        request: Request,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        topic: Annotated[
            str | None,
            Query(
                max_length=200,
                description="Comma-separated: signals, activations, timeline, timers, "
                "memories, user_turns, live",
            ),
        ] = None,
        last_event_id: Annotated[str | None, Header(max_length=64)] = None,
        after: Annotated[str | None, Query(max_length=64, description="As Last-Event-ID")] = None,
    ) -> Response:
        """Each event names what changed (topic, delegate, ids); fetch the items through the
        reads above. Live-only events (topic `live`) carry their small data. Events are sent
        only once their transaction has committed."""
        caller = await run_in_threadpool(gate.check, request)
        start: Position | None = None
        resume = last_event_id or after
        if resume:
            try:
                start = Position.parse(resume)
            except ValueError as error:
                raise errors.invalid("Last-Event-ID", str(error)) from None
        topics = None if topic is None else [t for t in topic.split(",") if t]
        credential = (
            f"operator:{caller.operator}"
            if caller.operator is not None
            else f"open:{client_of(request)}"
        )
        slots = process_slots()
        slots.acquire(credential)
        try:
            live_feed = feed()
            await run_in_threadpool(live_feed.start)  # blocks until it listens, the first time
            subscription = live_feed.subscribe()
        except BaseException:
            slots.release(credential)
            raise
        stream = live_feed.stream(
            subscription, start, wanted_by(delegate, topics), request.is_disconnected
        )
        return guards.HeldStream(
            stream,
            release=lambda: slots.release(credential),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router
