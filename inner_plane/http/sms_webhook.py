"""``POST /v1/channels/sms/twilio``: texts from the person's phone, through a Twilio-compatible
provider (docs/channels.md).

A door like the others (issue 29): an address over its failure limit is refused (429) before
any signature is computed; the body is bounded (SMS_MAX_BODY_BYTES, 413) before it is read
whole; then ``X-Twilio-Signature`` is checked by the ``twilio`` package's ``RequestValidator``
(HMAC-SHA1 of the public URL and the sorted form parameters, keyed by the auth token), over
SMS_WEBHOOK_URL when the plane is behind a proxy (the signature covers the URL the provider
called). A refused signature counts toward the address's failure limit. A signed text is
journaled (:mod:`inner_plane.channels.sms_in`) and answered at once with an empty TwiML
response; the answer to the person follows asynchronously, through the Messages API.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from twilio.request_validator import RequestValidator

from inner_plane import logs
from inner_plane.channels.sms_in import TextRefused, read_text, take_text
from inner_plane.runtime import Runtime
from inner_plane.sources import auth_throttle, errors
from inner_plane.sources.errors import ApiError
from inner_plane.sources.intake import JOURNAL_DOWN, client_of, read_body, refuse_known_throttled

PATH = "/v1/channels/sms/twilio"
SIGNATURE_HEADER = "x-twilio-signature"
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
MAX_PARAMETERS = 100


def _refused(status: int, error: str, message: str, field: str | None = None) -> ApiError:
    return ApiError(status, error, message, field=field)


def parameters(body: bytes) -> dict[str, str]:
    """The form's parameters; each name once (a repeated name is refused: the signature's
    sorted concatenation would be ambiguous)."""
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=bool(body),
            max_num_fields=MAX_PARAMETERS,
        )
    except (UnicodeDecodeError, ValueError):
        raise _refused(400, "invalid_form", "the body is not a URL-encoded form") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name in found:
            raise _refused(400, "invalid_form", "a parameter is repeated", field=name[:100])
        found[name] = value
    return found


def build_router(runtime_factory: Callable[[], Runtime]) -> APIRouter:
    router = APIRouter()

    @router.post(
        PATH,
        summary="A text message from the person's phone (Twilio-compatible webhook)",
        responses={
            200: {"description": "Accepted (or from an unknown number): an empty TwiML answer"},
            400: {"model": errors.ErrorBody, "description": "Not a text message"},
            403: {"model": errors.ErrorBody, "description": "Signature missing or wrong"},
            404: {"model": errors.ErrorBody, "description": "SMS is not configured"},
            413: {"model": errors.ErrorBody, "description": "Body too large"},
            415: {"model": errors.ErrorBody, "description": "Not a form"},
            429: {"model": errors.ErrorBody, "description": "Too many refused requests"},
        },
        response_class=Response,
    )
    async def sms_webhook(request: Request) -> Response:
        runtime = runtime_factory()
        settings = runtime.settings
        client = client_of(request)
        if not (settings.twilio_auth_token and settings.twilio_account_sid):
            raise _refused(404, "not_found", "SMS is not configured")
        # Throttle before hash: a known-throttled address costs a dictionary lookup, and one
        # over its limit in Redis a round trip; neither computes a signature.
        refuse_known_throttled(request, client)
        verdict = await run_in_threadpool(auth_throttle.check, runtime, client, None)
        if verdict.retry_after is not None:
            raise errors.rate_limited(verdict.retry_after)
        body = await read_body(request, settings.sms_max_body_bytes)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise _refused(415, "unsupported_media_type", "the body must be a URL-encoded form")
        params = parameters(body)
        signature = request.headers.get(SIGNATURE_HEADER)
        url = settings.sms_webhook_url or str(request.url)
        validator = RequestValidator(settings.twilio_auth_token)
        if not signature or len(signature) > 200 or not validator.validate(url, params, signature):
            await run_in_threadpool(auth_throttle.record_failure, runtime, client, None)
            logs.emit("sms_refused", client=client, reason="signature")
            raise _refused(403, "forbidden", "missing or invalid X-Twilio-Signature")
        try:
            text = read_text(params, settings.twilio_account_sid)
        except TextRefused as refused:
            logs.emit("sms_refused", client=client, reason=refused.field)
            raise _refused(400, "invalid_text", refused.problem, field=refused.field) from None
        try:
            await run_in_threadpool(take_text, runtime, text)
        except JOURNAL_DOWN:
            raise errors.unavailable() from None  # the provider retries a 5xx
        return Response(EMPTY_TWIML, media_type="text/xml")

    return router
