"""OpenTelemetry traces: off unless the standard ``OTEL_*`` variables ask for them.

Tracing is on in a process when :func:`setup` ran there and the environment names a place to
send spans: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``, or
``OTEL_TRACES_EXPORTER`` set to ``otlp`` or ``console``; ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` keeps it off. Everything else is read by the OpenTelemetry SDK
itself, as every SDK reads it: the OTLP exporter's endpoint, headers, timeout, compression and
certificates, the sampler (``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``), the batch
processor's delays and sizes (``OTEL_BSP_*``), the service name and resource attributes. The
exporter is OTLP over HTTP with protobuf bodies (``http/protobuf``, the specification's
default); another protocol is refused with one log line and tracing stays off.

Off, it costs one boolean test per hook: no span, no context, no SDK import. Every helper here
returns at once when :data:`on` is false, so call sites need no guard of their own except to
skip building attributes.

Span names and attributes follow the OpenTelemetry semantic conventions for generative AI
(``invoke_agent``, ``chat``, ``execute_tool``, ``gen_ai.*``) and for messaging (the publish of a
signal). A signal's publish span context is stored on its row as a W3C ``traceparent``
(:func:`traceparent`), so the activation that claims it minutes later links to it
(:func:`link`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from inner_plane import logs

TRACER_NAME = "inner_plane"
PROTOCOL = "http/protobuf"
# The W3C traceparent of version 00, as :func:`traceparent` writes it (lower-case hex).
TRACEPARENT_RE = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRUE = {"true", "1", "yes", "on"}

_tracer: trace.Tracer | None = None
on = False


def wanted(environ: Mapping[str, str]) -> str | None:
    """The exporter the environment asks for (``otlp`` or ``console``), or None: tracing off.
    Raises ValueError naming the variable when it asks for something this plane cannot do."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter == "none" or (not exporter and not endpoint):
        return None
    if "," in exporter:
        raise ValueError("OTEL_TRACES_EXPORTER: one exporter only (otlp, console or none)")
    exporter = exporter or "otlp"
    if exporter not in {"otlp", "console"}:
        raise ValueError(f"OTEL_TRACES_EXPORTER: {exporter[:40]!r} is not otlp, console or none")
    if exporter == "otlp":
        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = environ.get(name, "").strip()
            if protocol:
                if protocol != PROTOCOL:
                    raise ValueError(f"{name}: {protocol[:40]!r} is not supported; use {PROTOCOL}")
                break
    return exporter


def setup(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the SDK's tracer provider for this process if the environment asks for traces
    (once; later calls change nothing). ``service`` is the service name unless
    ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` gives one. True if tracing is on."""
    global _tracer, on
    if on:
        return True
    try:
        exporter_name = wanted(os.environ if environ is None else environ)
    except ValueError as error:
        logs.emit("tracing_off", reason=str(error))
        return False
    if exporter_name is None:
        return False
    # The SDK is imported only here: a process with tracing off never loads it.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    # Batched off the caller's thread (OTEL_BSP_*); re-made in a forked pool child.
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer(TRACER_NAME)
    on = True
    logs.emit("tracing_on", service=str(provider.resource.attributes.get(SERVICE_NAME)))
    return True


def switch(enabled: bool) -> None:
    """Turn tracing off or back on in a process where :func:`setup` turned it on: for a
    benchmark that measures what tracing costs, runs against runs, in one process."""
    global _tracer, on
    if enabled and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _tracer, on = trace.get_tracer(TRACER_NAME), True
    else:
        _tracer, on = None, False


def flush(timeout_ms: int = 5_000) -> None:
    """Export what is buffered now (before a process that will not run its exit hooks ends)."""
    if not on:
        return
    provider: Any = trace.get_tracer_provider()
    with contextlib.suppress(Exception):
        provider.force_flush(timeout_ms)


@contextlib.contextmanager
def span(
    name: str,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    links: Sequence[Link] = (),
    parent: otel_context.Context | None = None,
) -> Iterator[Span | None]:
    """A span, current for the block (None when tracing is off). An exception leaving the block
    is recorded on it and sets its status to error."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=dict(attributes) if attributes else None,
        links=list(links) or None,
    ) as current:
        yield current


def start(
    name: str,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    parent: otel_context.Context | None = None,
) -> Span | None:
    """A span the caller ends (``end``), not made current (None when tracing is off)."""
    if _tracer is None:
        return None
    return _tracer.start_span(
        name, context=parent, kind=kind, attributes=dict(attributes) if attributes else None
    )


def failed(current: Span | None, error: BaseException | str) -> None:
    """Mark ``current`` as failed with ``error`` (its type as ``error.type``)."""
    if current is None or not current.is_recording():
        return
    if isinstance(error, BaseException):
        current.record_exception(error)
        current.set_attribute("error.type", type(error).__name__)
        current.set_status(Status(StatusCode.ERROR, str(error)[:200]))
    else:
        current.set_attribute("error.type", error[:100])
        current.set_status(Status(StatusCode.ERROR, error[:200]))


def traceparent(current: Span | None = None) -> str | None:
    """The W3C traceparent of ``current`` (default: the current span), None without a valid
    one."""
    if not on:
        return None
    found = current if current is not None else trace.get_current_span()
    ctx = found.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags) & 0xFF:02x}"


def trace_id(value: str | None) -> str | None:
    """The trace id of a stored traceparent (None if it is not one)."""
    parsed = _parsed(value)
    return None if parsed is None else f"{parsed.trace_id:032x}"


def _parsed(value: str | None) -> SpanContext | None:
    if not isinstance(value, str) or len(value) != 55:
        return None
    match = TRACEPARENT_RE.fullmatch(value)
    if match is None:
        return None
    trace_hex, span_hex, flags = match.groups()
    ctx = SpanContext(
        int(trace_hex, 16),
        int(span_hex, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16)),
    )
    return ctx if ctx.is_valid else None


def link(value: str | None, **attributes: Any) -> Link | None:
    """A link to the span a stored traceparent names (None if it names none)."""
    parsed = _parsed(value)
    return None if parsed is None else Link(parsed, attributes or None)


def parent_of(value: str | None) -> otel_context.Context | None:
    """A context whose parent is the span a traceparent names (None if it names none)."""
    parsed = _parsed(value)
    if parsed is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(parsed))


def inject(headers: dict[str, Any]) -> dict[str, Any]:
    """Add the current span's context to a message's ``headers`` (traceparent, tracestate)."""
    if on:
        propagate.inject(headers)
    return headers


def extracted(headers: Mapping[str, Any] | None) -> str | None:
    """The valid traceparent a message's headers carry (None if none, or a malformed one)."""
    if not headers:
        return None
    value = headers.get("traceparent")
    return value if _parsed(value) is not None else None


def current_span() -> Span:
    return trace.get_current_span()
