"""Who may use the operator API: an operator credential, never a processor's.

A request proves an operator with ``Authorization: Bearer ipo.<name>.<secret>`` or with the
UI's session cookie holding the same token. Without one the answer is 401; with a valid
processor credential it is 403 (a processor is known, but not allowed here). Reads stay open
without a credential only while no operator exists and the API listens on loopback; actions
always need one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request

from inner_plane import operators
from inner_plane.operators import is_loopback
from inner_plane.runtime import Runtime
from inner_plane.sources import auth, errors
from inner_plane.sources.intake import JOURNAL_DOWN

COOKIE = "inner_plane_operator"
UI_HEADER = "x-inner-plane-ui"


def forbidden_processor() -> errors.ApiError:
    return errors.ApiError(
        403, "forbidden", "a processor credential cannot use the operator API; use an operator's"
    )


@dataclass(frozen=True)
class Caller:
    """The operator making a request (None: an open read on loopback)."""

    operator: str | None


class OperatorGate:
    def __init__(self, runtime_factory: Callable[[], Runtime], bind_host: str) -> None:
        self.runtime_factory = runtime_factory
        self.loopback = is_loopback(bind_host)

    def token(self, request: Request) -> str | None:
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
        return request.cookies.get(COOKIE) or None

    def check(self, request: Request, action: bool = False) -> Caller:
        """The caller, or raise ApiError 401 / 403 / 503. Blocking: run in a worker thread."""
        try:
            runtime = self.runtime_factory()
            token = self.token(request)
            if token is not None:
                operator = operators.authenticate(runtime, token)
                if operator is not None:
                    if action and self._cookie_without_ui_header(request):
                        raise errors.ApiError(
                            403, "forbidden", f"a cookie-borne action needs {UI_HEADER}"
                        )
                    return Caller(operator.name)
            if self._is_processor(runtime, request):
                raise forbidden_processor()
            if (
                token is None
                and request.headers.get("authorization") is None
                and not action
                and self.loopback
                and not operators.any_configured(runtime)
            ):
                return Caller(None)
        except JOURNAL_DOWN:
            raise errors.unavailable() from None
        raise errors.unauthorized()

    def open_reads(self) -> bool:
        """Reads need no credential right now (loopback, no operator configured)."""
        try:
            return self.loopback and not operators.any_configured(self.runtime_factory())
        except JOURNAL_DOWN:
            return False

    @staticmethod
    def _cookie_without_ui_header(request: Request) -> bool:
        """The UI's session cookie proves an action only with the UI's header, which a page of
        another site cannot send (cross-site request forgery)."""
        return request.headers.get("authorization") is None and UI_HEADER not in request.headers

    @staticmethod
    def _is_processor(runtime: Runtime, request: Request) -> bool:
        if request.headers.get("authorization") is None and (
            request.headers.get(auth.SIGNATURE_HEADER) is None
        ):
            return False
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        client = request.client.host if request.client else None
        try:
            auth.authenticate(runtime, request.method, path, request.headers, b"", client=client)
        except auth.Throttled as throttled:
            raise errors.rate_limited(throttled.retry_after) from None
        except (auth.AuthError, auth.Unavailable):
            return False
        return True
