"""The operator UI at ``/``: server-rendered pages (Jinja2, autoescaped) over the same journal
reads as the JSON API, with a little JavaScript from ``/static`` that follows the live feed.

Every payload is text: templates autoescape, the script writes with ``textContent`` or inserts
fragments the server escaped, and a strict Content-Security-Policy (no inline script or style,
nothing from elsewhere) stands behind both. The assets ship inside the package; nothing is
fetched at run time and nothing is built on the user's machine.
"""

from __future__ import annotations

import hmac
import secrets
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import redis
from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inner_plane import operators
from inner_plane import timeline as timeline_view
from inner_plane.http.operator_auth import COOKIE, Caller, OperatorGate
from inner_plane.http.ui_simulate import simulate_page
from inner_plane.http.ui_views import (
    SIGNAL_STATES,
    activation_outcome,
    agent_notice,
    charts,
    dead_letter_view,
    entry_view,
    linked_activation_ids,
    merged,
    overview_view,
    pretty,
    quiet_view,
    signal_page_view,
    signal_view,
    timer_named_by,
    trace_link,
    when,
    zone_of,
)
from inner_plane.journal.database import reading
from inner_plane.journal.operator import continuity as continuity_reads
from inner_plane.journal.operator import delegates as delegate_reads
from inner_plane.journal.operator import quiet as quiet_reads
from inner_plane.journal.operator import reads
from inner_plane.journal.people import people as people_store
from inner_plane.people import directory
from inner_plane.runtime import Runtime
from inner_plane.signals.model import IDENTIFIER_PATTERN
from inner_plane.sources.auth import Throttled
from inner_plane.sources.errors import ApiError
from inner_plane.sources.intake import JOURNAL_DOWN, client_of
from inner_plane.sources.sessions import Session, SessionStore

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=str(HERE / "templates"))
TEMPLATES.env.filters["pretty"] = pretty
TEMPLATES.env.filters["when"] = when
STATIC_DIR = HERE / "static"
LOGIN_COOKIE = "inner_plane_login"
TIMELINE_PAGE = 200
# How far back a timeline that shows its whole conversation looks for quiet entries.
QUIET_SPAN = timedelta(days=1)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


# The interactive docs (INNER_PLANE_API_DOCS) are FastAPI's pages: an inline script, and Swagger
# UI or ReDoc from their CDN. They get a policy allowing exactly that, and are never framed.
DOCS_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
    "img-src 'self' data: https://fastapi.tiangolo.com https://cdn.redoc.ly; "
    "font-src https://fonts.gstatic.com; worker-src blob:; connect-src 'self'; "
    "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def _encoded(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


class SecurityHeaders:
    """ASGI middleware adding the strict headers to every response (the interactive API docs
    get their own policy). Plain ASGI, not BaseHTTPMiddleware: it never buffers or re-wraps a
    body, so the live feed's stream passes straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.headers = _encoded(SECURITY_HEADERS)
        self.docs_headers = _encoded({**SECURITY_HEADERS, "Content-Security-Policy": DOCS_CSP})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"] in ("/docs", "/redoc", "/docs/oauth2-redirect")
        headers = self.docs_headers if docs else self.headers

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in headers if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def zones_for(rt: Runtime, delegate_ids: Iterable[Any]) -> dict[str, str]:
    """The time zones of the delegates a page shows (their people; one primary-key read)."""
    with reading(rt.engine) as connection:
        return people_store.time_zones(connection, delegate_ids)


class _Redirect(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


# The dashboard's page of delegates: 100 by id, or searched by the person's name (a prefix), a
# keyset page either way (never every delegate of a large plane).
DASHBOARD_PAGE = 100


def _overview_page(rt: Runtime, name: str | None, cursor: str | None) -> Any:
    return delegate_reads.delegates_overview(
        rt.engine,
        wake_budget_per_hour=rt.settings.wake_budget_per_hour,
        daily_token_budget=rt.settings.daily_token_budget,
        name=name or None,
        cursor=cursor or None,
        limit=DASHBOARD_PAGE,
    )


def build_router(runtime_factory: Callable[[], Runtime], gate: OperatorGate) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def page(
        request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> HTMLResponse:
        return TEMPLATES.TemplateResponse(
            request, name, {"caller": getattr(request.state, "caller", None), **context}, status
        )

    async def load(request: Request, work: Callable[[Runtime], Any]) -> Any:
        """Check the operator (redirect to the login page without one), then read."""

        def run() -> Any:
            try:
                caller: Caller = gate.check(request)
            except ApiError as error:
                if error.status == 401:
                    target = quote(str(request.url.path) + _query(request), safe="/")
                    raise _Redirect(RedirectResponse(f"/login?next={target}", 303)) from None
                raise
            request.state.caller = caller
            try:
                return work(runtime_factory())
            except JOURNAL_DOWN:
                raise ApiError(503, "unavailable", "the journal is unreachable") from None

        return await run_in_threadpool(run)

    async def guarded(request: Request, render: Callable[[], Any]) -> Response:
        try:
            response: Response = await render()
            return response
        except _Redirect as redirect:
            return redirect.response
        except ApiError as error:
            return page(
                request, "message.html", {"title": error.body.error, "text": error.body.message},
                error.status,
            )  # fmt: skip

    # --- pages ---

    @router.get("/", response_class=HTMLResponse)
    async def dashboard(
        request: Request,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        name: Annotated[str | None, Query(max_length=200)] = None,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response:
        async def render() -> Response:
            def work(rt: Runtime) -> dict[str, Any]:
                overview = _overview_page(rt, name, cursor)
                names = [d["delegate_id"] for d in overview.items]
                chosen = delegate or (names[0] if names else "default")
                agents = [(d.get("last_activation") or {}).get("agent") for d in overview.items]
                zones = zones_for(rt, [*names, chosen])
                return {
                    "delegates": [overview_view(d, zones) for d in overview.items],
                    "chosen": chosen,
                    "zone": zone_of(chosen, zones),
                    "charts": charts(
                        delegate_reads.chart_series(rt.engine, chosen), zone_of(chosen, zones)
                    ),
                    "agent_notice": agent_notice(rt.settings.agent, agents),
                    "search": name or "",
                    "next": overview.next,
                }

            try:
                found = await load(request, work)
            except reads.CursorError:
                raise ApiError(422, "invalid", "cursor: not a cursor of this list") from None
            return page(request, "dashboard.html", found)

        return await guarded(request, render)

    @router.get("/ui/overview", response_class=HTMLResponse)
    async def overview_fragment(
        request: Request,
        name: Annotated[str | None, Query(max_length=200)] = None,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response:
        async def render() -> Response:
            def work(rt: Runtime) -> list[dict[str, Any]]:
                found = _overview_page(rt, name, cursor)
                zones = zones_for(rt, [d["delegate_id"] for d in found.items])
                return [overview_view(d, zones) for d in found.items]

            try:
                rows = await load(request, work)
            except reads.CursorError:
                raise ApiError(422, "invalid", "cursor: not a cursor of this list") from None
            return page(request, "overview_rows.html", {"delegates": rows})

        return await guarded(request, render)

    @router.get("/delegates/{delegate_id}", response_class=HTMLResponse)
    async def delegate_timeline(request: Request, delegate_id: str) -> Response:
        async def render() -> Response:
            def work(rt: Runtime) -> dict[str, Any]:
                person = directory.get(rt, delegate_id)
                zone = zone_of(delegate_id) if person is None else str(person.time_zone)
                stored = reads.timeline_events(rt.engine, delegate_id, limit=TIMELINE_PAGE)
                entries = [entry_view(timeline_view.entry(e), zone) for e in stored]
                full = len(entries) == TIMELINE_PAGE
                # The quiet entries of the same span: since the first entry shown (or the last
                # day, when the page holds the whole conversation), up to now.
                now = datetime.now(UTC)
                since = (
                    datetime.fromisoformat(str(entries[0]["at"]))
                    if full and entries[0]["at"]
                    else now - QUIET_SPAN
                )
                quiet = [
                    quiet_view(q, zone)
                    for q in quiet_reads.quiet_entries(rt.engine, delegate_id, since, now)
                ]
                latest = reads.activations_page(rt.engine, delegate_id, limit=1).items
                return {
                    "delegate": delegate_id,
                    "zone": zone,
                    "continuity": continuity_reads.continuity(rt.engine, delegate_id, days=7),
                    "person": None if person is None else person.public(),
                    "entries": merged(entries, quiet),
                    "last_seq": entries[-1]["seq"] if entries else 0,
                    "quiet_since": now.isoformat(),
                    "older": entries[0]["seq"] if full else None,
                    "agent_notice": agent_notice(
                        rt.settings.agent, [a.get("agent") for a in latest]
                    ),
                }

            return page(request, "timeline.html", await load(request, work))

        return await guarded(request, render)

    @router.get("/ui/delegates/{delegate_id}/entries", response_class=HTMLResponse)
    async def entries_fragment(
        request: Request,
        delegate_id: str,
        after: Annotated[int, Query(ge=0)] = 0,
        since: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Response:
        """The entries after ``after`` (seq), with the quiet entries since ``since`` (an ISO
        moment the page was given): what the live view appends."""

        async def render() -> Response:
            quiet_from = _moment_field("since", since) if since else None

            def work(rt: Runtime) -> list[dict[str, Any]]:
                zone = zone_of(delegate_id, zones_for(rt, [delegate_id]))
                stored = reads.timeline_events(rt.engine, delegate_id, after=after, limit=500)
                entries = [entry_view(timeline_view.entry(e), zone) for e in stored]
                if quiet_from is None:
                    return entries
                found = quiet_reads.quiet_entries(
                    rt.engine, delegate_id, quiet_from, datetime.now(UTC)
                )
                return merged(entries, [quiet_view(q, zone) for q in found])

            entries = await load(request, work)
            return page(request, "entries.html", {"entries": entries})

        return await guarded(request, render)

    @router.get("/activations/{activation_id}", response_class=HTMLResponse)
    async def activation(request: Request, activation_id: str) -> Response:
        async def render() -> Response:
            try:
                key = uuid.UUID(activation_id)
            except ValueError:
                raise ApiError(404, "not_found", "no such activation") from None

            def work(rt: Runtime) -> dict[str, Any] | None:
                detail = reads.activation_detail(rt.engine, key)
                if detail is not None:
                    delegate_id = detail["activation"]["delegate_id"]
                    detail["zone"] = zone_of(delegate_id, zones_for(rt, [delegate_id]))
                    detail["trace"] = trace_link(detail, rt.settings.trace_url_template)
                return detail

            found = await load(request, work)
            if found is None:
                raise ApiError(404, "not_found", "no such activation")
            zone = found["zone"]
            found["zone"] = zone
            found["batch"] = [signal_view(s, zone) for s in found["batch"]]
            found["entries"] = [entry_view(timeline_view.entry(e), zone) for e in found["events"]]
            found["outcome"] = activation_outcome(found)
            return page(request, "activation.html", found)

        return await guarded(request, render)

    @router.get("/simulate", response_class=HTMLResponse)
    async def simulate_view(
        request: Request,
        since: Annotated[str | None, Query(max_length=64)] = None,
        until: Annotated[str | None, Query(max_length=64)] = None,
        delegate: Annotated[str | None, Query(max_length=128, pattern=IDENTIFIER_PATTERN)] = None,
        version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    ) -> Response:
        async def render() -> Response:
            def work(rt: Runtime) -> dict[str, Any]:
                return simulate_page(rt, since, until, delegate or None, version)

            return page(request, "simulate.html", await load(request, work))

        return await guarded(request, render)

    @router.get("/dead-letters", response_class=HTMLResponse)
    async def dead_letters(
        request: Request,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response:
        async def render() -> Response:
            def work(rt: Runtime) -> tuple[Any, dict[str, str]]:
                listed = reads.dead_letters(rt.engine, delegate, cursor, 50)
                return listed, zones_for(rt, [s.get("delegate_id") for s in listed.items])

            try:
                found, zones = await load(request, work)
            except reads.CursorError:
                raise ApiError(422, "invalid", "cursor: not a cursor of this list") from None
            return page(
                request,
                "dead_letters.html",
                {
                    "signals": [
                        dead_letter_view(signal_view(s, zone_of(s.get("delegate_id"), zones)))
                        for s in found.items
                    ],
                    "next": found.next,
                    "delegate": delegate,
                },
            )

        return await guarded(request, render)

    @router.get("/signals", response_class=HTMLResponse)
    async def signal_search(
        request: Request,
        q: Annotated[str | None, Query(max_length=200)] = None,
        kind: Annotated[str | None, Query(max_length=200)] = None,
        source: Annotated[str | None, Query(max_length=200)] = None,
        state: Annotated[str | None, Query(max_length=32)] = None,
        delegate: Annotated[str | None, Query(max_length=128)] = None,
        since: Annotated[str | None, Query(max_length=64)] = None,
        until: Annotated[str | None, Query(max_length=64)] = None,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
    ) -> Response:
        """Find signals: an id opens its page; otherwise by kind prefix, source, state,
        delegate and a time range of creation, newest first."""

        async def render() -> Response:
            form = {
                "q": q or "", "kind": kind or "", "source": source or "", "state": state or "",
                "delegate": delegate or "", "since": since or "", "until": until or "",
            }  # fmt: skip
            text_id = (q or "").strip()
            if text_id:
                try:
                    found_id = uuid.UUID(text_id)
                except ValueError:
                    raise ApiError(
                        422, "invalid", "q: a signal id is a UUID (search by kind, source ...)"
                    ) from None
                return RedirectResponse(f"/signals/{found_id}", 303)
            if state and state not in SIGNAL_STATES:
                raise ApiError(
                    422, "invalid", f"state: one of {', '.join(SIGNAL_STATES)}, not {state!r}"
                )
            since_at = _moment_field("since", since) if since else None
            until_at = _moment_field("until", until) if until else None
            searched = any(form.values())

            def work(rt: Runtime) -> Any:
                if not searched:
                    return None, {}
                listed = reads.search_signals(
                    rt.engine,
                    state=state or None,
                    kind_prefix=kind or None,
                    source=source or None,
                    delegate_id=delegate or None,
                    since=since_at,
                    until=until_at,
                    cursor=cursor,
                    limit=50,
                    with_events=False,
                )
                return listed, zones_for(rt, [s.get("delegate_id") for s in listed.items])

            try:
                found, zones = await load(request, work)
            except reads.CursorError:
                raise ApiError(422, "invalid", "cursor: not a cursor of this list") from None
            rows = (
                []
                if found is None
                else [signal_view(s, zone_of(s.get("delegate_id"), zones)) for s in found.items]
            )
            return page(
                request,
                "signals.html",
                {
                    "form": form,
                    "states": SIGNAL_STATES,
                    "searched": searched,
                    "signals": rows,
                    "next": None if found is None else found.next,
                    "next_query": urlencode(
                        {**{k: v for k, v in form.items() if v}, "cursor": found.next}
                    )
                    if found is not None and found.next
                    else None,
                },
            )

        return await guarded(request, render)

    @router.get("/signals/{signal_id}", response_class=HTMLResponse)
    async def signal_page(request: Request, signal_id: str) -> Response:
        async def render() -> Response:
            try:
                key = uuid.UUID(signal_id)
            except ValueError:
                raise ApiError(404, "not_found", "no such signal (a signal id is a UUID)") from None

            def work(rt: Runtime) -> dict[str, Any] | None:
                found = reads.get_signal(rt.engine, key)
                if found is None:
                    return None
                linked = linked_activation_ids(found)
                return {
                    "signal": found,
                    "activations": quiet_reads.activations_by_id(rt.engine, linked),
                    "zones": zones_for(rt, [found.get("delegate_id")]),
                }

            found = await load(request, work)
            if found is None:
                raise ApiError(404, "not_found", "no such signal")
            zone = zone_of(found["signal"].get("delegate_id"), found["zones"])
            return page(
                request,
                "signal.html",
                {
                    **signal_page_view(found["signal"], found["activations"], zone),
                    "timer_name": timer_named_by(found["signal"]),
                },
            )

        return await guarded(request, render)

    @router.get("/turns/{turn_id}", response_class=HTMLResponse)
    async def turn_page(request: Request, turn_id: str) -> Response:
        async def render() -> Response:
            try:
                key = uuid.UUID(turn_id)
            except ValueError:
                raise ApiError(404, "not_found", "no such user turn (an id is a UUID)") from None

            def work(rt: Runtime) -> dict[str, Any] | None:
                found = reads.turn_detail(rt.engine, key)
                if found is not None:
                    delegate_id = found["turn"]["delegate_id"]
                    found["zone"] = zone_of(delegate_id, zones_for(rt, [delegate_id]))
                return found

            found = await load(request, work)
            if found is None:
                raise ApiError(404, "not_found", "no such user turn")
            return page(request, "turn.html", found)

        return await guarded(request, render)

    @router.get("/timers/{timer_id}", response_class=HTMLResponse)
    async def timer_page(request: Request, timer_id: str) -> Response:
        async def render() -> Response:
            try:
                key = uuid.UUID(timer_id)
            except ValueError:
                raise ApiError(404, "not_found", "no such timer (an id is a UUID)") from None

            def work(rt: Runtime) -> dict[str, Any] | None:
                found = reads.timer_detail(rt.engine, key)
                if found is None:
                    return None
                delegate_id = found["delegate_id"]
                return {"timer": found, "zone": zone_of(delegate_id, zones_for(rt, [delegate_id]))}

            found = await load(request, work)
            if found is None:
                raise ApiError(404, "not_found", "no such timer")
            return page(request, "timer.html", found)

        return await guarded(request, render)

    @router.get("/delegates/{delegate_id}/timers/{name}", response_class=HTMLResponse)
    async def timer_by_name(request: Request, delegate_id: str, name: str) -> Response:
        """A timer as a ``timer.due`` signal names it: its delegate and name."""

        async def render() -> Response:
            found = await load(request, lambda rt: reads.timer_named(rt.engine, delegate_id, name))
            if found is None:
                raise ApiError(404, "not_found", f"no timer {name!r} of delegate {delegate_id!r}")
            return RedirectResponse(f"/timers/{found}", 303)

        return await guarded(request, render)

    @router.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return FileResponse(STATIC_DIR / "favicon.ico", media_type="image/x-icon")

    # --- sign in / out ---
    # The sign-in form carries a random token that must equal the one in a SameSite=Strict
    # cookie set with the form: a page of another site can post the form, but not with the
    # cookie, so it cannot sign a browser in as someone else (login CSRF).

    @router.get("/login", response_class=HTMLResponse)
    async def login_form(
        request: Request, next: Annotated[str, Query(max_length=2000)] = "/"
    ) -> Response:
        return _login_page(request, next, None, 200)

    def _login_page(request: Request, next: str, error: str | None, status: int) -> Response:
        csrf = secrets.token_urlsafe(32)
        context = {"next": _local(next), "error": error, "csrf": csrf}
        response = page(request, "login.html", context, status)
        response.set_cookie(
            LOGIN_COOKIE, csrf, httponly=True, samesite="strict", path="/login",
            secure=request.url.scheme == "https", max_age=3600,
        )  # fmt: skip
        return response

    @router.post("/login", response_class=HTMLResponse)
    async def login(
        request: Request,
        token: Annotated[str, Form(max_length=300)],
        csrf: Annotated[str, Form(max_length=100)] = "",
        next: Annotated[str, Form(max_length=2000)] = "/",
    ) -> Response:
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not csrf or not hmac.compare_digest(csrf.encode(), expected.encode()):
            return _login_page(request, next, "The sign-in form expired: sign in again.", 403)
        client = client_of(request)

        def sign_in() -> Session | None:
            runtime = runtime_factory()
            operator = operators.authenticate(runtime, token.strip(), client, "login form")
            if operator is None:
                return None
            # A new session every time (rotation): an id planted before sign-in is worthless.
            return SessionStore.of(runtime).create(
                operators.principal(operator.name), replacing=request.cookies.get(COOKIE)
            )

        try:
            session = await run_in_threadpool(sign_in)
        except Throttled as throttled:
            response = _login_page(request, next, "Too many failed sign-ins: wait a minute.", 429)
            response.headers["Retry-After"] = str(throttled.retry_after)
            return response
        except (redis.RedisError, *JOURNAL_DOWN):
            return _login_page(request, next, "The plane's stores are unreachable.", 503)
        if session is None:
            return _login_page(request, next, "That is not an operator token.", 401)
        response = RedirectResponse(_local(next), 303)
        lifetime = runtime_factory().settings.session_absolute_s
        response.set_cookie(
            COOKIE, session.id, httponly=True, samesite="strict",
            secure=request.url.scheme == "https", max_age=lifetime,
        )  # fmt: skip
        response.delete_cookie(LOGIN_COOKIE, path="/login")
        return response

    @router.post("/logout")
    async def logout(request: Request, csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
        def sign_out() -> bool:
            session = gate.session(request)
            if session is None:
                return True
            if not hmac.compare_digest(csrf.encode(), session.csrf.encode()):
                return False
            SessionStore.of(runtime_factory()).end(session.id)
            return True

        try:
            ended = await run_in_threadpool(sign_out)
        except (redis.RedisError, *JOURNAL_DOWN):
            return page(request, "message.html", {"title": "unavailable",
                        "text": "The session store is unreachable; retry."}, 503)  # fmt: skip
        if not ended:
            context = {"title": "forbidden", "text": "Sign out from the page's own button."}
            return page(request, "message.html", context, 403)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE)
        return response

    return router


def _query(request: Request) -> str:
    return f"?{request.url.query}" if request.url.query else ""


def _local(target: str) -> str:
    """Only paths of this site (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


def _moment_field(name: str, value: str) -> datetime:
    """An ISO 8601 moment from a query field (naive: UTC), or a 422 naming the field."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ApiError(
            422, "invalid", f"{name}: not a date and time (ISO 8601, e.g. 2026-12-02T17:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
