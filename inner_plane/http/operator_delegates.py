"""The operator API's delegate and activation routes: the delegates overview, one delegate, its
conversation timeline, its activations and charts; one activation in full, and retrying the dead
signals an activation had claimed.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from inner_plane import operators
from inner_plane import timeline as timeline_view
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
from inner_plane.journal.operator import continuity as continuity_reads
from inner_plane.journal.operator import delegates as delegate_reads
from inner_plane.journal.operator import reads
from inner_plane.journal.people import questions
from inner_plane.people import directory
from inner_plane.runtime import Runtime
from inner_plane.sources import errors, person_auth
from inner_plane.sources.errors import ApiError


class TimelineBody(BaseModel):
    delegate_id: str
    entries: list[dict[str, Any]] = Field(description="Timeline entries, oldest first")
    older: int | None = Field(description="`before` for the page of older entries")
    newer: int | None = Field(description="`after` for entries newer than this page")


def add_delegate_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @page_route(router, "/delegates", summary="Delegates overview")
    async def delegates(
        request: Request,
        cursor: Cursor = None,
        limit: Limit = 50,
        name: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=200,
                description="Only delegates whose person's display name starts with this (any "
                "case), in name order",
            ),
        ] = None,
    ) -> Response:
        """For each delegate: lane state (idle, waiting, running) with holder, epoch and the
        running activation; counts by state, the oldest pending signal's age, the next due
        time; the wake budget used and the last activation. Keyset pages by delegate id, or by
        the person's name when searched by ``name``: a page costs the same however many
        delegates the plane serves."""
        return await calls.page(
            request,
            lambda rt: delegate_reads.delegates_overview(
                rt.engine,
                wake_budget_per_hour=rt.settings.wake_budget_per_hour,
                daily_token_budget=rt.settings.daily_token_budget,
                name=name,
                cursor=cursor,
                limit=limit,
            ),
        )

    @router.get("/delegates/{delegate_id}", summary="One delegate's overview", responses=NOT_FOUND)
    async def delegate(request: Request, delegate_id: str) -> Response:
        page = await calls.read(
            request,
            lambda rt: delegate_reads.delegates_overview(
                rt.engine,
                wake_budget_per_hour=rt.settings.wake_budget_per_hour,
                daily_token_budget=rt.settings.daily_token_budget,
                delegate_id=delegate_id,
            ),
        )
        return json_response(page.items[0])

    @router.get(
        "/delegates/{delegate_id}/context",
        summary="A delegate's context window, token usage by day and continuity capsule versions",
    )
    async def context(request: Request, delegate_id: str) -> Response:
        """The window's state (compaction method, version, items, tokens, failures and the
        last error, when a failed compaction is retried), the delegate's tokens and estimated
        cost per UTC day (newest first), and every capsule version with its diff from the one
        before."""
        return json_response(
            await calls.read(
                request, lambda rt: continuity_reads.continuity(rt.engine, delegate_id)
            )
        )

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
        events = await calls.read(
            request,
            lambda rt: reads.timeline_events(
                rt.engine, delegate_id, after=after, before=before, limit=limit
            ),
        )
        entries = [timeline_view.entry(e) for e in events]
        return json_response(
            {
                "delegate_id": delegate_id,
                "entries": entries,
                "older": entries[0]["seq"] if entries else None,
                "newer": entries[-1]["seq"] if entries else after,
            }
        )

    @page_route(
        router,
        "/delegates/{delegate_id}/activations",
        summary="A delegate's activations, newest first",
    )
    async def activations(
        request: Request, delegate_id: str, cursor: Cursor = None, limit: Limit = 50
    ) -> Response:
        return await calls.page(
            request, lambda rt: reads.activations_page(rt.engine, delegate_id, cursor, limit)
        )

    @router.get(
        "/delegates/{delegate_id}/charts",
        summary="Signals per minute by kind, activation durations, pending depth",
    )
    async def charts(
        request: Request,
        delegate_id: str,
        minutes: Annotated[int, Query(ge=5, le=1440)] = 60,
    ) -> Response:
        return json_response(
            await calls.read(
                request, lambda rt: delegate_reads.chart_series(rt.engine, delegate_id, minutes)
            )
        )


def _person(rt: Runtime, delegate_id: str) -> dict[str, Any] | None:
    found = directory.get(rt, delegate_id)
    if found is None:
        return None
    return {
        **found.public(),
        # Labels and dates only: a token is shown once, at creation, and never stored.
        "tokens": [token.public() for token in person_auth.tokens_of(rt, delegate_id)],
        "questions": [q.public() for q in questions.of(rt.engine, delegate_id, limit=20)],
    }


def add_person_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @router.get(
        "/delegates/{delegate_id}/person",
        summary="The person a delegate serves: contact points, time zone, quiet hours",
        responses=NOT_FOUND,
    )
    async def person(request: Request, delegate_id: str) -> Response:
        """Display name, IANA time zone, email addresses, E.164 phone numbers, webhook,
        preferred channel and quiet hours; the labels of the person's tokens (never a token or
        its hash); the latest questions put to them. Set with `inner-plane delegates`."""
        found = await calls.read(request, lambda rt: _person(rt, delegate_id))
        if found is None:
            raise ApiError(404, "not_found", "no person for this delegate")
        return json_response(found)


def add_activation_routes(router: APIRouter, calls: OperatorCalls) -> None:
    @router.get(
        "/activations/{activation_id}",
        summary="An activation: claimed batch, envelope, ThoughtFlow, conversation events",
        responses=NOT_FOUND,
    )
    async def activation(request: Request, activation_id: UuidPath) -> Response:
        found = await calls.read(
            request,
            lambda rt: reads.activation_detail(
                rt.engine, parse_uuid("activation_id", activation_id)
            ),
        )
        if found is None:
            raise ApiError(404, "not_found", "no such activation")
        return json_response(found)

    @router.post(
        "/activations/{activation_id}/retry-dead",
        response_model=ActionBody,
        summary="Retry every dead signal an activation had claimed",
        responses=NOT_FOUND,
    )
    async def retry_activation(request: Request, activation_id: UuidPath) -> Response:
        def work(rt: Runtime, operator: str) -> Any:
            key = parse_uuid("activation_id", activation_id)  # after the credential check
            done = operators.retry_dead_of_activation(rt, key, operator)
            if done is None:
                raise ApiError(404, "not_found", "no such activation")
            return done

        return await calls.act(request, work)
