"""The conversation API under ``/v1/delegates/{delegate_id}/conversation``: a host application
(a web or mobile app, a voice gateway, a bot) or the chat page sends the person's turns and
follows the conversation.

- ``POST …/turns`` ``{"text", "channel"?, "in_reply_to"?}`` with ``Idempotency-Key``: 202 with
  the turn's id and state. The same key is the same turn (a unique constraint decides, so
  concurrent retries make one turn). Order of checks, cheapest refusal first: body size (413),
  credentials (401), scope (403), rate (429), the body and headers (422 naming the field, or
  413 for a text over the limit), the reply it answers (422). Nothing is stored on any error.
- ``GET …/messages?before=…``: a keyset page of the person's and the assistant's messages.
- ``GET …/stream``: server-sent events (:mod:`inner_plane.http.conversation_stream`).
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import redis
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from inner_plane import logs, redis_keys
from inner_plane.http import guards
from inner_plane.http.conversation_auth import ConversationCaller, ConversationGate, Scope
from inner_plane.http.conversation_stream import ConversationStreams, Cursor
from inner_plane.http.json_body import NotJson, json_document
from inner_plane.journal.conversation import person
from inner_plane.lane.user_turns import wake_for_user_turn
from inner_plane.runtime import Runtime
from inner_plane.signals.model import IDENTIFIER_RE
from inner_plane.sources import errors
from inner_plane.sources.errors import ApiError, AsciiJSONResponse, ErrorBody
from inner_plane.sources.intake import JOURNAL_DOWN, read_body
from inner_plane.sources.streams import process_slots

PREFIX = "/v1/delegates/{delegate_id}/conversation"
MAX_TURN_BODY = 256 * 1024
IDEMPOTENCY_RE = re.compile(r"[!-~]{1,200}")
CHANNEL_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
TURN_FIELDS = ("text", "channel", "in_reply_to")
RATE_WINDOW_S = 60
PAGE_DEFAULT, PAGE_MAX = 50, 200

# Every conversation route and who may use it (conversation_auth.Scope). A route added without
# an entry here fails tests/integration/test_conversation_api.py's route-table test.
SCOPES: dict[tuple[str, str], Scope] = {
    ("POST", f"{PREFIX}/turns"): Scope.SEND,
    ("GET", f"{PREFIX}/messages"): Scope.READ,
    ("GET", f"{PREFIX}/stream"): Scope.READ,
}


class FieldError(Exception):
    def __init__(self, field: str, reason: str, status: int = 422) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.status = status

    def api_error(self) -> ApiError:
        if self.status == 413:
            return ApiError(413, "too_large", str(self), field=self.field, reason=self.reason)
        return ApiError(422, "invalid", str(self), field=self.field, reason=self.reason)


@dataclass(frozen=True)
class TurnRequest:
    text: str
    channel: str
    in_reply_to: uuid.UUID | None
    idempotency_key: str


def _bad_character(text: str) -> str | None:
    """Why a person's text cannot be stored or shown as it is, or None."""
    for index, char in enumerate(text):
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            return f"holds a lone surrogate (U+{code:04X}) at {index}"
        if (code < 0x20 and char not in "\t\n\r") or 0x7F <= code <= 0x9F:
            return f"holds a control character (U+{code:04X}) at {index}"
    return None


def parse_turn(body: bytes, headers: Mapping[str, str], max_text: int) -> TurnRequest:
    """The turn a request asks for, or raise FieldError naming the field (pure)."""
    key = headers.get("idempotency-key")
    if key is None:
        raise FieldError("Idempotency-Key", "is required (any 1 to 200 printable ASCII)")
    if not IDEMPOTENCY_RE.fullmatch(key):
        raise FieldError("Idempotency-Key", "must be 1 to 200 printable ASCII characters")
    try:
        document = json_document(body)
    except NotJson as error:
        raise FieldError("body", f"is not valid JSON: {error.reason}"[:200]) from None
    if not isinstance(document, dict):
        raise FieldError("body", f"must be a JSON object, not {type(document).__name__}")
    for name in document:
        if name not in TURN_FIELDS:
            shown = json.dumps(name[:64], ensure_ascii=True)
            raise FieldError(name[:64], f"{shown} is not a turn field ({', '.join(TURN_FIELDS)})")
    text = document.get("text")
    if not isinstance(text, str):
        raise FieldError("text", "is required and must be a string")
    if len(text) > max_text:
        raise FieldError("text", f"must be at most {max_text} characters", 413)
    if not text.strip():
        raise FieldError("text", "must not be empty")
    bad = _bad_character(text)
    if bad is not None:
        raise FieldError("text", bad)
    channel = document.get("channel", "app")
    if not isinstance(channel, str) or not CHANNEL_RE.fullmatch(channel):
        raise FieldError("channel", "must be a name of a-z, 0-9, '_' and '-' (default: app)")
    reply_to = document.get("in_reply_to")
    in_reply_to = None
    if reply_to is not None:
        if not isinstance(reply_to, str) or len(reply_to) > 64:
            raise FieldError("in_reply_to", "must be the id (a UUID) of a question")
        try:
            in_reply_to = uuid.UUID(reply_to)
        except ValueError:
            raise FieldError("in_reply_to", "must be the id (a UUID) of a question") from None
    return TurnRequest(text, channel, in_reply_to, key)


def _delegate(delegate_id: str) -> str:
    if not IDENTIFIER_RE.match(delegate_id):
        raise errors.invalid("delegate_id", "must be 1 to 128 of letters, digits and '._:-'")
    return delegate_id


def turn_rate_retry_after(
    runtime: Runtime, delegate_id: str, now: float | None = None
) -> int | None:
    """Count one turn of the delegate's person; the seconds to wait if over the limit. Redis
    is the fast path: unreachable, the turn goes through (and a line is logged)."""
    now = time.time() if now is None else now
    window = int(now // RATE_WINDOW_S)
    key = redis_keys.turn_rate(delegate_id, window)
    try:
        with runtime.redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, 2 * RATE_WINDOW_S)
            count = int(pipe.execute()[0])
    except redis.RedisError as error:
        logs.emit("rate_limit_unavailable", delegate=delegate_id, reason=str(error)[:200])
        return None
    limit = runtime.settings.chat_turns_per_minute
    if count <= limit:
        return None
    logs.emit("rate_limited", delegate=delegate_id, count=count, limit=limit)
    return max(1, math.ceil((window + 1) * RATE_WINDOW_S - now))


class AcceptedTurnJson(BaseModel):
    turn_id: str
    state: str = Field(description="queued, running, answered or failed")
    duplicate: bool = Field(description="True: this Idempotency-Key gave this turn before")


class MessagePage(BaseModel):
    items: list[dict[str, Any]] = Field(
        description="Oldest first: {id, role (person|assistant), kind (message|question|notice), "
        "text, subject (a notice's), question {id, about} (what a question asks: answer with "
        "in_reply_to = its id), in_reply_to (the question a person's message answers), at, "
        "channel, turn_id, state (queued|running|answered|failed), reason, "
        "interrupted {reason, then}, proactive}"
    )
    before: str | None = Field(description="Cursor of the page before these (older); null: none")


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in (
        (401, "Missing or invalid credentials"),
        (403, "Another delegate's token, an operator sending, or a processor"),
        (413, "Body or text over the limit"),
        (422, "A field is invalid (the body names it)"),
        (429, "Too many turns or failed sign-ins; see Retry-After"),
        (503, "The journal is unreachable"),
    )
}
TURN_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["text"],
                "additionalProperties": False,
                "properties": {
                    "text": {"type": "string", "minLength": 1},
                    "channel": {"type": "string", "default": "app"},
                    "in_reply_to": {
                        "type": "string",
                        "format": "uuid",
                        "description": "The id of the question (needs_input) this answers",
                    },
                },
            }
        }
    },
}
TURN_PARAMETERS = [
    {
        "name": "Idempotency-Key",
        "in": "header",
        "required": True,
        "description": "The same key gives the same turn, never two",
        "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
    }
]


def build_router(
    runtime_factory: Callable[[], Runtime], gate: ConversationGate, streams: ConversationStreams
) -> APIRouter:
    router = APIRouter(tags=["conversation"], responses=ERRORS)

    def caller_for(request: Request, delegate_id: str, scope: Scope) -> ConversationCaller:
        caller = gate.check(request)
        caller.allow(scope, delegate_id, request)
        return caller

    def accept(request: Request, delegate_id: str, body: bytes) -> Response:
        """The whole POST in one worker thread (auth and journal calls block). A token this
        process proved before is not read again: the insert runs only while its row stands
        (one round trip less per turn), and any refusal confirms it first, so a revoked token
        is answered 401 whatever else is wrong with the request."""
        try:
            caller = gate.check(request, vouch=True)
            try:
                caller.allow(Scope.SEND, delegate_id, request)
                runtime = runtime_factory()
                turn = _accept_checked(runtime, request, delegate_id, body, caller.unconfirmed)
            except person.TokenGone:
                gate.confirm(request, caller)  # raises 401: the row is gone
                raise errors.unauthorized() from None
            except errors.ApiError:
                gate.confirm(request, caller)
                raise
        except JOURNAL_DOWN:
            raise errors.unavailable() from None
        return _accepted(runtime, delegate_id, *turn)

    def _accept_checked(
        runtime: Runtime,
        request: Request,
        delegate_id: str,
        body: bytes,
        token: tuple[uuid.UUID, str] | None,
    ) -> tuple[TurnRequest, person.AcceptedTurn]:
        wait = turn_rate_retry_after(runtime, delegate_id)
        if wait is not None:
            raise errors.rate_limited(wait)
        try:
            turn = parse_turn(body, request.headers, runtime.settings.chat_max_text)
        except FieldError as error:
            raise error.api_error() from None
        try:
            accepted = person.accept_turn(
                runtime.engine,
                delegate_id,
                turn.channel,
                turn.text,
                turn.idempotency_key,
                turn.in_reply_to,
                token=token,
            )
        except person.UnknownQuestion:
            raise errors.invalid(
                "in_reply_to", "is not a question of this delegate's assistant"
            ) from None
        except person.IdempotencyConflict:
            raise errors.invalid(
                "Idempotency-Key", "was used before for a turn with other content"
            ) from None
        return turn, accepted

    def _accepted(
        runtime: Runtime, delegate_id: str, turn: TurnRequest, accepted: person.AcceptedTurn
    ) -> Response:
        wake = None
        if accepted.created:
            logs.emit(
                "user_turn_queued", id=accepted.id, delegate=delegate_id, channel=turn.channel
            )
            # After the answer is sent: the turn is journaled, and a wake lost with the process
            # costs one sweep period (the sweeper wakes queued turns), not the turn.
            wake = BackgroundTask(wake_for_user_turn, runtime, delegate_id)
        return AsciiJSONResponse(
            {
                "turn_id": str(accepted.id),
                "state": accepted.state,
                "duplicate": not accepted.created,
            },
            status_code=202,
            background=wake,
        )

    @router.post(
        f"{PREFIX}/turns",
        status_code=202,
        summary="Send the person's turn",
        response_model=AcceptedTurnJson,
        openapi_extra={"requestBody": TURN_BODY, "parameters": TURN_PARAMETERS},
    )
    async def post_turn(delegate_id: str, request: Request) -> Response:
        _delegate(delegate_id)
        body = await read_body(request, MAX_TURN_BODY)
        return await anyio.to_thread.run_sync(accept, request, delegate_id, body)

    @router.get(
        f"{PREFIX}/messages",
        summary="A page of the person's and the assistant's messages, newest page first",
        response_model=MessagePage,
    )
    async def get_messages(
        delegate_id: str, request: Request, before: str | None = None, limit: str | None = None
    ) -> Response:
        _delegate(delegate_id)
        count = PAGE_DEFAULT
        if limit is not None:
            if not limit.isascii() or not limit.isdigit() or not 1 <= int(limit[:4]) <= PAGE_MAX:
                raise errors.invalid("limit", f"must be a whole number from 1 to {PAGE_MAX}")
            count = int(limit)

        def read() -> person.Page:
            caller_for(request, delegate_id, Scope.READ)
            try:
                return person.messages_page(runtime_factory().engine, delegate_id, before, count)
            except person.CursorError:
                raise errors.invalid("before", "not a cursor of this list") from None
            except JOURNAL_DOWN:
                raise errors.unavailable() from None

        page = await run_in_threadpool(read)
        return AsciiJSONResponse({"items": page.items, "before": page.before})

    @router.get(
        f"{PREFIX}/stream",
        summary="The conversation live (server-sent events), resumable with Last-Event-ID",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def stream(delegate_id: str, request: Request, after: str | None = None) -> Response:
        """Events: `message` (durable: the person's message, a reply, a proactive message, a
        question the delegate asks, a message it sent on the app channel),
        `turn` (durable: a turn's state changed), `delta` and `aborted` (the reply while the
        model writes it; not replayed), `status` (idle, answering, busy). Durable events carry
        ids: reconnect with `Last-Event-ID` to get every one missed, exactly once."""
        _delegate(delegate_id)
        resume: Cursor | None = None
        token = request.headers.get("last-event-id") or after
        if token:
            try:
                resume = Cursor.parse(token)
            except ValueError:
                raise errors.invalid("Last-Event-ID", "not an id of this stream") from None
        caller = await run_in_threadpool(caller_for, request, delegate_id, Scope.READ)
        credential = (
            f"operator:{caller.operator}" if caller.delegate_id is None else f"person:{delegate_id}"
        )
        slots = process_slots()
        slots.acquire(credential)  # 429 past the credential's streams, 503 past the process's
        try:
            await run_in_threadpool(streams.feed().start)  # blocks until it listens, first time
            body = await streams.open(delegate_id, resume)
        except BaseException:
            slots.release(credential)
            raise
        return guards.HeldStream(
            body,
            release=lambda: slots.release(credential),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router
