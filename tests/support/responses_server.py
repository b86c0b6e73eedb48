"""The Responses API test server: the strict one in tests/support/responses_wire.py."""

from tests.support.responses_wire import (
    ResponsesServer,
    compaction,
    function_call,
    message,
    reasoning,
    response,
)

__all__ = ["ResponsesServer", "compaction", "function_call", "message", "reasoning", "response"]
