"""Tracing's pure parts: when the standard OTEL_* variables turn it on, and what a stored or
received traceparent may be (hostile: only the W3C form is ever linked or stored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inner_plane import tracing

ROOT = Path(__file__).resolve().parents[2]
VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("environ", "exporter"),
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            "otlp",
        ),
    ],
)
def test_tracing_is_on_only_where_the_standard_variables_ask(
    environ: dict[str, str], exporter: str | None
) -> None:
    assert tracing.wanted(environ) == exporter


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"),
    ],
)
def test_what_the_plane_cannot_do_is_refused_naming_the_variable(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        tracing.wanted(environ)


def test_a_traceparent_is_parsed_only_in_its_w3c_form() -> None:
    assert tracing.trace_id(VALID) == "0af7651916cd43dd8448eb211c80319c"
    link = tracing.link(VALID, **{"messaging.message.id": "x"})
    assert link is not None and f"{link.context.span_id:016x}" == "b7ad6b7169203331"
    assert link.attributes == {"messaging.message.id": "x"}
    for bad in (
        None,
        "",
        VALID.upper(),
        VALID + " ",
        "01" + VALID[2:],  # another version
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",  # an invalid (zero) trace id
        "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",  # an invalid span id
        VALID.replace("-", "_"),
    ):
        assert tracing.link(bad) is None and tracing.trace_id(bad) is None
        assert tracing.parent_of(bad) is None
        assert tracing.extracted({"traceparent": bad}) is None


@given(st.text(max_size=80) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_any_header_value_is_either_a_valid_traceparent_or_ignored(value: str) -> None:
    found = tracing.extracted({"traceparent": value})
    assert found is None or (found == value and tracing.TRACEPARENT_RE.fullmatch(value))
    assert tracing.link(value) is None or tracing.trace_id(value) is not None


def test_off_every_helper_is_a_no_op() -> None:
    assert not tracing.on
    with tracing.span("anything") as span:
        assert span is None
    assert tracing.start("anything") is None
    assert tracing.traceparent() is None
    assert tracing.inject({}) == {}


# redis-py loads the SDK's metrics module for its own (unused) observability: only the trace SDK,
# the exporters and the instrumentations are the plane's.
LOADED = ("opentelemetry.sdk.trace", "opentelemetry.exporter", "opentelemetry.instrumentation")
CHILD = f"""
import json, sys
from opentelemetry import trace
from inner_plane import tracing
import inner_plane.publish, inner_plane.lane.runner, inner_plane.agent.tool_loop, inner_plane.asgi
import workers.app
print(json.dumps({{
    "on": tracing.setup("test"),
    "provider": type(trace.get_tracer_provider()).__name__,
    "sdk": sorted(m for m in sys.modules if m.startswith({LOADED!r})),
}}))
"""


def test_off_by_default_no_tracer_provider_and_no_trace_sdk_is_loaded() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ = {k: v for k, v in environ.items() if not k.startswith("INNER_PLANE_")}
    result = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=environ, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer == {"on": False, "provider": "ProxyTracerProvider", "sdk": []}
