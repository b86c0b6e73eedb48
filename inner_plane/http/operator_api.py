"""The operator API under ``/v1``: reads of the journal (cursor-paged JSON), operator actions,
and the live feed as server-sent events at ``/v1/events``.

Every handler checks the operator credential first (:mod:`inner_plane.http.operator_auth`),
then runs its journal read in a worker thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Body, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from inner_plane import operators
from inner_plane import timeline as timeline_view
from inner_plane.http.live_feed import LiveFeed, wanted_by
from inner_plane.http.operator_auth import Caller, OperatorGate
from inner_plane.journal import reads
from inner_plane.journal.live import Position
from inner_plane.runtime import Runtime
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError, AsciiJSONResponse
from inner_plane.sources.intake import JOURNAL_DOWN

T = TypeVar("T")

SignalState = Literal["pending", "claimed", "delivered", "dismissed", "expired", "dead"]
Limit = Annotated[int, Query(ge=1, le=reads.MAX_LIMIT, description="Items per page")]
Cursor = Annotated[
    str | None, Query(max_length=512, description="`next` of the previous page (opaque)")
]


class PageBody(BaseModel):
    items: list[dict[str, Any]]
    next: str | None = Field(description="Cursor of the next page; null on the last page")


class TimelineBody(BaseModel):
    delegate_id: str
    entries: list[dict[str, Any]] = Field(description="Timeline entries, oldest first")
    older: int | None = Field(description="`before` for the page of older entries")
    newer: int | None = Field(description="`after` for entries newer than this page")


class DismissBody(BaseModel):
    reason: str = Field(default="dismissed by operator", min_length=1, max_length=500)


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


def _uuid(field: str, value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise errors.invalid(field, "must be a UUID") from None


def _page(page: reads.Page) -> Response:
    return _json({"items": page.items, "next": page.next})


def _json(body: Any) -> Response:
    """The reads answer already-serialisable data: written straight out, not re-validated
    against the documented model (that costs more than the read itself on a page of 100)."""
    return AsciiJSONResponse(body)


def build_router(
    runtime_factory: Callable[[], Runtime], gate: OperatorGate, feed: Callable[[], LiveFeed]
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["operator"], responses=OPERATOR_ERRORS)

    async def read(request: Request, work: Callable[[Runtime], T], action: bool = False) -> T:
        def run() -> T:
            gate.check(request, action)
            try:
                return work(runtime_factory())
            except reads.CursorError:
                raise errors.invalid("cursor", "not a cursor of this list") from None
            except JOURNAL_DOWN:
                raise errors.unavailable() from None

        return await run_in_threadpool(run)

    async def act(request: Request, work: Callable[[Runtime, str], Any]) -> Response:
        def run() -> dict[str, Any]:
            caller: Caller = gate.check(request, action=True)
            assert caller.operator is not None
            try:
                result = work(runtime_factory(), caller.operator)
            except operators.OperatorError as error:
                field, _, reason = str(error).partition(": ")
                raise errors.invalid(field, reason) from None
            except JOURNAL_DOWN:
                raise errors.unavailable() from None
            return {"operator": caller.operator, "result": result}

        return AsciiJSONResponse(await run_in_threadpool(run))

    # --- reads ---

    @router.get(
        "/delegates",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="Delegates overview",
    )
    async def delegates(request: Request, cursor: Cursor = None, limit: Limit = 50) -> Response:
        """For each delegate: lane state (idle, waiting, running) with holder, epoch and the
        running activation; counts by state, the oldest pending signal's age, the next due
        time; the wake budget used and the last activation."""
        page = await read(
            request,
            lambda rt: reads.delegates_overview(
                rt.engine,
                wake_budget_per_hour=rt.settings.wake_budget_per_hour,
                cursor=cursor,
                limit=limit,
            ),
        )
        return _page(page)

    @router.get("/delegates/{delegate_id}", summary="One delegate's overview", responses=NOT_FOUND)
    async def delegate(request: Request, delegate_id: str) -> Response:
        page = await read(
            request,
            lambda rt: reads.delegates_overview(
                rt.engine,
                wake_budget_per_hour=rt.settings.wake_budget_per_hour,
                delegate_id=delegate_id,
            ),
        )
        return _json(page.items[0])

    @router.get(
        "/delegates/{delegate_id}/timeline",
        responses={200: {"model": TimelineBody}},
        response_model=None,
        summary="A delegate's conversation timeline (the entries and order replay gives)",
    )
    async def timeline(
        request: Request,
        delegate_id: str,
        after: Annotated[int | None, Query(ge=0, description="Entries after this seq")] = None,
        before: Annotated[int | None, Query(ge=1, description="Latest entries before")] = None,
        limit: Limit = 100,
    ) -> Response:
        """Without a cursor: the latest `limit` entries, oldest first. With `after`: the
        entries that follow it (what a live view appends). With `before`: the page before."""
        if after is not None and before is not None:
            raise errors.invalid("after", "give either after or before, not both")
        events = await read(
            request,
            lambda rt: reads.timeline_events(
                rt.engine, delegate_id, after=after, before=before, limit=limit
            ),
        )
        entries = [timeline_view.entry(e) for e in events]
        return _json(
            {
                "delegate_id": delegate_id,
                "entries": entries,
                "older": entries[0]["seq"] if entries else None,
                "newer": entries[-1]["seq"] if entries else after,
            }
        )

    @router.get(
        "/delegates/{delegate_id}/activations",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="A delegate's activations, newest first",
    )
    async def activations(
        request: Request, delegate_id: str, cursor: Cursor = None, limit: Limit = 50
    ) -> Response:
        page = await read(
            request, lambda rt: reads.activations_page(rt.engine, delegate_id, cursor, limit)
        )
        return _page(page)

    @router.get(
        "/delegates/{delegate_id}/charts",
        summary="Signals per minute by kind, activation durations, pending depth",
    )
    async def charts(
        request: Request,
        delegate_id: str,
        minutes: Annotated[int, Query(ge=5, le=1440)] = 60,
    ) -> Response:
        return _json(
            await read(request, lambda rt: reads.chart_series(rt.engine, delegate_id, minutes))
        )

    @router.get(
        "/activations/{activation_id}",
        summary="An activation: claimed batch, envelope, ThoughtFlow, conversation events",
        responses=NOT_FOUND,
    )
    async def activation(request: Request, activation_id: str) -> Response:
        key = _uuid("activation_id", activation_id)
        found = await read(request, lambda rt: reads.activation_detail(rt.engine, key))
        if found is None:
            raise ApiError(404, "not_found", "no such activation")
        return _json(found)

    @router.get(
        "/signals",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="Search signals, newest first",
    )
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
        page = await read(
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
        return _page(page)

    @router.get(
        "/signals/{signal_id}/detail",
        summary="One signal with its events (operators)",
        responses=NOT_FOUND,
    )
    async def signal_detail(request: Request, signal_id: str) -> Response:
        key = _uuid("signal_id", signal_id)
        found = await read(request, lambda rt: reads.get_signal(rt.engine, key))
        if found is None:
            raise ApiError(404, "not_found", "no such signal")
        return _json(found)

    @router.get(
        "/dead-letters",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="Dead signals, newest first",
    )
    async def dead_letters(
        request: Request,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        page = await read(
            request, lambda rt: reads.dead_letters(rt.engine, delegate, cursor, limit)
        )
        return _page(page)

    @router.get(
        "/timers",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="A delegate's timers",
    )
    async def timers(
        request: Request,
        delegate: Annotated[str, Query(max_length=128)] = "default",
        include_finished: bool = False,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        page = await read(
            request,
            lambda rt: reads.timers_page(
                rt.engine,
                delegate,
                include_finished=include_finished,
                cursor=cursor,
                limit=limit,
            ),
        )
        return _page(page)

    @router.get(
        "/memories",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="A delegate's memories",
    )
    async def memories(
        request: Request,
        delegate: Annotated[str, Query(max_length=128)] = "default",
        kind: Literal["standing", "learned"] | None = None,
        include_superseded: bool = False,
        cursor: Cursor = None,
        limit: Limit = 50,
    ) -> Response:
        page = await read(
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
        return _page(page)

    @router.get(
        "/processors",
        responses={200: {"model": PageBody}},
        response_model=None,
        summary="Processors (never secrets)",
    )
    async def processors(request: Request, cursor: Cursor = None, limit: Limit = 50) -> Response:
        page = await read(request, lambda rt: reads.processors_page(rt.engine, cursor, limit))
        return _page(page)

    # --- actions ---

    @router.post(
        "/signals/{signal_id}/retry",
        response_model=ActionBody,
        summary="Retry a dead, dismissed or expired signal",
        responses={**NOT_FOUND, 409: errors._doc("The signal is not in a retryable state")},
    )
    async def retry(request: Request, signal_id: str) -> Response:
        key = _uuid("signal_id", signal_id)

        def work(rt: Runtime, operator: str) -> Any:
            done = operators.retry_signal(rt, key, operator)
            if done is None:
                _missing_or_conflict(rt, key, "is not dead, dismissed or expired")
            return done

        return await act(request, work)

    @router.post(
        "/signals/{signal_id}/dismiss",
        response_model=ActionBody,
        summary="Dismiss a pending or dead signal",
        responses={**NOT_FOUND, 409: errors._doc("The signal is not pending or dead")},
    )
    async def dismiss(
        request: Request, signal_id: str, body: Annotated[DismissBody | None, Body()] = None
    ) -> Response:
        key = _uuid("signal_id", signal_id)
        reason = (body or DismissBody()).reason

        def work(rt: Runtime, operator: str) -> Any:
            done = operators.dismiss_signal(rt, key, operator, reason)
            if done is None:
                _missing_or_conflict(rt, key, "is not pending or dead")
            return done

        return await act(request, work)

    @router.post(
        "/activations/{activation_id}/retry-dead",
        response_model=ActionBody,
        summary="Retry every dead signal an activation had claimed",
        responses=NOT_FOUND,
    )
    async def retry_activation(request: Request, activation_id: str) -> Response:
        key = _uuid("activation_id", activation_id)

        def work(rt: Runtime, operator: str) -> Any:
            done = operators.retry_dead_of_activation(rt, key, operator)
            if done is None:
                raise ApiError(404, "not_found", "no such activation")
            return done

        return await act(request, work)

    @router.post(
        "/timers/{timer_id}/cancel",
        response_model=ActionBody,
        summary="Cancel an active timer",
        responses={**NOT_FOUND, 409: errors._doc("The timer is not active")},
    )
    async def cancel(request: Request, timer_id: str) -> Response:
        key = _uuid("timer_id", timer_id)

        def work(rt: Runtime, operator: str) -> Any:
            done = operators.cancel_timer(rt, key, operator)
            if done is None:
                from inner_plane.journal.timers import TimerJournal

                if TimerJournal(rt.engine).get(key) is None:
                    raise ApiError(404, "not_found", "no such timer")
                raise ApiError(409, "conflict", "the timer is not active")
            return done

        return await act(request, work)

    # --- live feed ---

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
        await run_in_threadpool(gate.check, request)
        start: Position | None = None
        resume = last_event_id or after
        if resume:
            try:
                start = Position.parse(resume)
            except ValueError as error:
                raise errors.invalid("Last-Event-ID", str(error)) from None
        topics = None if topic is None else [t for t in topic.split(",") if t]
        live_feed = feed()
        await run_in_threadpool(live_feed.start)  # blocks until it listens, the first time
        subscription = live_feed.subscribe()
        stream = live_feed.stream(
            subscription, start, wanted_by(delegate, topics), request.is_disconnected
        )
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router


def _missing_or_conflict(rt: Runtime, key: uuid.UUID, why: str) -> None:
    if rt.signals.get(key) is None:
        raise ApiError(404, "not_found", "no such signal")
    raise ApiError(409, "conflict", f"the signal {why}")
