"""The trace tests' OTLP/HTTP receiver is as strict as a collector: the SDK's own exporter is
accepted and decoded, and what the OTLP specification does not allow is refused (so a test that
passes against it shows the plane speaks OTLP, not merely something the receiver tolerates)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, SpanKind

from tests.support.otlp import PROTOBUF, Receiver

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_sdk_exporter_is_received_and_decoded(
    receiver: Receiver, compression: Compression
) -> None:
    provider = TracerProvider(resource=Resource({"service.name": "unit"}))
    exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces", compression=compression)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("parent") as parent,
        tracer.start_as_current_span(
            "child", kind=SpanKind.CLIENT, attributes={"n": 3, "tags": ["a", "b"]}
        ),
    ):
        pass
    linked = tracer.start_span("linked", links=[Link(parent.get_span_context(), {"why": "x"})])
    linked.end()
    provider.shutdown()
    spans = {s.name: s for s in receiver.snapshot()}
    assert receiver.refusals == []
    assert spans["child"].parent_id == spans["parent"].span_id
    assert spans["child"].trace_id == spans["parent"].trace_id
    assert spans["child"].attributes == {"n": 3, "tags": ["a", "b"]}
    assert spans["child"].service == "unit" and spans["child"].kind == 3
    assert spans["linked"].links == [
        (spans["parent"].trace_id, spans["parent"].span_id, {"why": "x"})
    ]


def test_what_otlp_does_not_allow_is_refused(receiver: Receiver) -> None:
    url = f"{receiver.endpoint}/v1/traces"
    with httpx.Client(timeout=10) as client:
        json_body = client.post(url, content=json.dumps({"resourceSpans": []}),
                                headers={"Content-Type": "application/json"})  # fmt: skip
        assert json_body.status_code == 415
        garbage = client.post(url, content=b"\xff\x00not protobuf",
                              headers={"Content-Type": PROTOBUF})  # fmt: skip
        assert garbage.status_code == 400
        gzipped = {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}
        assert client.post(url, content=b"not gzip", headers=gzipped).status_code == 400
        brotli = {"Content-Type": PROTOBUF, "Content-Encoding": "br"}
        assert client.post(url, content=gzip.compress(b""), headers=brotli).status_code == 415
        assert client.post(f"{receiver.endpoint}/v1/metrics", content=b"",
                           headers={"Content-Type": PROTOBUF}).status_code == 404  # fmt: skip
        assert client.get(url).status_code == 405
        empty = client.post(url, content=b"", headers={"Content-Type": PROTOBUF})
        assert empty.status_code == 200  # an empty request is a valid (empty) export
    assert len(receiver.refusals) == 6 and receiver.snapshot() == []
