"""What every model adapter shares: streamed calls that can be abandoned within milliseconds,
retries that honour ``Retry-After`` inside the activation's time budget, tool calls, usage, and
failures that keep the work done so far.

A model call streams on a reader thread; the agent's thread takes its events from a queue and,
between events and while waiting for the next one, asks the step guard's cheap in-process
``checkpoint()`` whether to yield. If it must, the call's socket is shut down at once (the
server sees the stream closed) and nothing of the step is applied: the step's events were only
collected, never acted on, until the stream completed.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from inner_plane import tracing
from inner_plane.activation import AgentResult
from inner_plane.activation.storable import first_unstorable
from inner_plane.agent.port import StepGuard
from inner_plane.tools import ToolContext, ToolError, ToolRegistry

# How often the agent's thread looks at the guard's flag while no stream event arrives.
POLL_S = 0.02
_T = TypeVar("_T")


class ModelCallFailed(Exception):
    """A model call failed for good (not retryable, or the time budget is spent)."""


class ContextTooLong(ModelCallFailed):
    """The model refused the input as longer than its context window."""


class AgentRunFailed(Exception):
    """The agent failed after doing some work: ``partial`` holds the tool actions, usage and
    model calls up to the failure, for the ThoughtFlow."""

    def __init__(self, message: str, partial: AgentResult) -> None:
        super().__init__(message)
        self.partial = partial


def pause(guard: StepGuard, seconds: float) -> None:
    """Sleep between retries, still yielding within POLL_S when the guard says so."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        guard.checkpoint()
        time.sleep(min(left, POLL_S))
    guard.checkpoint()


# --- streaming -----------------------------------------------------------------------------


def _shut(stream: Any) -> None:
    """Close a stream now, even while its reader is blocked in a read: shutting the socket down
    wakes the read and sends the server a FIN (closing alone would wait for the next byte)."""
    network = getattr(getattr(stream, "response", None), "extensions", {}).get("network_stream")
    sock = None if network is None else network.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):  # already closed or broken: nothing to release
        stream.close()


_END = object()


def stream_events(open_stream: Callable[[], Iterable[Any]], guard: StepGuard) -> Iterator[Any]:
    """Yield a streamed call's events; between them (and every POLL_S while none arrives) the
    guard may raise Preempted or LeaseLost, which abandons the call: its socket is shut down
    and the reader thread ends on its own."""
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    abandoned = threading.Event()
    holder: dict[str, Any] = {}
    lock = threading.Lock()

    def read() -> None:
        try:
            stream = open_stream()
            with lock:
                holder["stream"] = stream
                if abandoned.is_set():  # abandoned before the answer's headers came
                    _shut(stream)
                    return
            for event in stream:
                if abandoned.is_set():
                    return
                events.put(event)
            events.put(_END)
        except BaseException as error:  # handed to the agent's thread
            if not abandoned.is_set():
                events.put(error)

    reader = threading.Thread(target=read, name="model-stream", daemon=True)
    reader.start()
    finished = False
    try:
        while True:
            guard.checkpoint()
            try:
                item = events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item is _END:
                finished = True
                return
            if isinstance(item, BaseException):
                finished = True
                raise item
            yield item
    finally:
        if not finished:
            with lock:
                abandoned.set()
                stream = holder.get("stream")
            if stream is not None:
                _shut(stream)


# --- retries -------------------------------------------------------------------------------


def retry_after_s(headers: Any) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, ``retry-after`` in seconds, or
    ``retry-after`` as an HTTP date."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context window",
    "maximum context length",
    "context length",
    "too many tokens",
    "prompt is too long",
)


def is_context_too_long(error: BaseException) -> bool:
    import openai  # loaded when a model is called, not when the worker starts

    if not isinstance(error, openai.APIStatusError | openai.APIError):
        return False
    if isinstance(error, openai.APIStatusError) and error.status_code not in (400, 413, 422):
        return False
    code = getattr(error, "code", None)
    text = f"{code} {error.message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def _retryable(error: BaseException) -> tuple[bool, float | None, str]:
    """(retry?, the server's Retry-After, a short description)."""
    import openai

    if isinstance(error, openai.APITimeoutError):
        return True, None, "timed out"
    if isinstance(error, openai.APIConnectionError):
        return True, None, f"connection failed ({error.__cause__ or error})"[:200]
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        described = f"HTTP {status}: {error.message}"[:300]
        if status in (408, 409, 429) or status >= 500:
            return True, retry_after_s(error.response.headers), described
        return False, None, described
    if isinstance(error, StreamFailed):
        return error.retryable, None, str(error)
    return False, None, f"{type(error).__name__}: {error}"[:300]


class StreamFailed(Exception):
    """The server reported a failure inside a stream (an ``error`` or ``response.failed``
    event)."""

    def __init__(self, message: str, code: str | None, retryable: bool) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


@dataclass
class RetryPolicy:
    deadline: float  # time.monotonic() by which the activation's model calls must be done
    base_s: float = 0.5
    max_s: float = 20.0
    attempts: list[dict[str, Any]] = field(default_factory=list)  # every failed try, recorded

    def run(self, step: int, call: Callable[[], _T], guard: StepGuard) -> _T:
        """Run ``call`` until it succeeds, retrying 429s, 5xx, timeouts and dropped streams
        with backoff (the server's Retry-After when it gives one) while the budget lasts."""
        import openai

        tries = 0
        while True:
            try:
                return call()
            except (openai.APIError, StreamFailed) as error:
                if is_context_too_long(error) or (
                    isinstance(error, StreamFailed) and error.code == "context_length_exceeded"
                ):
                    raise ContextTooLong(str(error)) from error
                retry, asked, described = _retryable(error)
                if not retry:
                    raise ModelCallFailed(described) from error
                backoff = min(self.max_s, self.base_s * 2**tries) * (0.5 + random.random() / 2)
                wait = backoff if asked is None else asked
                left = self.deadline - time.monotonic()
                record = {"step": step, "error": described, "wait_s": round(wait, 3)}
                if wait > left:
                    record["gave_up"] = "past the activation's model time budget"
                    self.attempts.append(record)
                    raise ModelCallFailed(
                        f"{described}; giving up after {tries + 1} attempt(s): waiting "
                        f"{wait:.1f} s would pass the activation's model time budget "
                        f"({max(0.0, left):.1f} s left)"
                    ) from error
                self.attempts.append(record)
                tries += 1
                pause(guard, wait)


def call_timeout(policy: RetryPolicy, per_call_s: float) -> float:
    """A single call's timeout: its own limit, never past the budget."""
    return max(1.0, min(per_call_s, policy.deadline - time.monotonic()))


# --- tools and usage -----------------------------------------------------------------------


def call_tool(
    tools: ToolRegistry,
    call_id: str,
    name: str,
    raw_arguments: str | None,
    tool_context: ToolContext,
) -> dict[str, Any]:
    """Run one tool call; a refusal becomes the action's error (and the model's tool output).
    Traced, in an ``execute_tool`` span (the name a model gave is hostile: an unknown one is not
    put in the span's name, and is cut short in its attribute)."""
    if not tracing.on:
        return _call_tool(tools, call_id, name, raw_arguments, tool_context)
    known = tools.get(name) is not None
    with tracing.span(
        f"execute_tool {name}" if known else "execute_tool",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name[:100],
            "gen_ai.tool.call.id": call_id[:100],
            "gen_ai.tool.type": "function",
            "inner_plane.step": tool_context.step,
        },
    ) as current:
        action = _call_tool(tools, call_id, name, raw_arguments, tool_context)
        if action["error"] is not None:
            tracing.failed(current, "tool_error")
        return action


def _call_tool(
    tools: ToolRegistry,
    call_id: str,
    name: str,
    raw_arguments: str | None,
    tool_context: ToolContext,
) -> dict[str, Any]:
    action: dict[str, Any] = {
        "step": tool_context.step,
        "call_id": call_id,
        "name": name,
        "arguments": raw_arguments,
        "output": None,
        "error": None,
    }
    tool = tools.get(name)
    try:
        if tool is None:
            raise ToolError(f"no tool named {name!r}")
        try:
            arguments = json.loads(raw_arguments or "{}", parse_constant=_not_json)
        except (json.JSONDecodeError, RecursionError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deep"
            raise ToolError(f"arguments are not JSON: {reason}") from None
        except ValueError as error:
            raise ToolError(f"arguments are not JSON: {error}") from None
        if not isinstance(arguments, dict):
            raise ToolError("arguments must be a JSON object")
        # A tool writes its arguments to the journal: what PostgreSQL cannot store is refused
        # here, naming the field, and the model can correct it.
        unstorable = first_unstorable(arguments)
        if unstorable is not None:
            raise ToolError(f"arguments.{unstorable[0]}: {unstorable[1]}")
        action["arguments"] = arguments
        action["output"] = tool.handler(arguments, tool_context)
    except ToolError as error:
        action["error"] = str(error)
    return action


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def tool_output(action: dict[str, Any]) -> str:
    output = action["output"] if action["error"] is None else {"error": action["error"]}
    return json.dumps(output, default=str)


USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


def new_usage(model: str) -> dict[str, Any]:
    usage: dict[str, Any] = {key: 0 for key in USAGE_KEYS}
    usage.update(model=model, requests=0, cached_tokens=0, reasoning_tokens=0, retries=0)
    return usage


def settled_summary(settlements: dict[Any, Any]) -> str:
    return ", ".join(f"{k}={v.disposition.value}" for k, v in settlements.items()) or "none"
