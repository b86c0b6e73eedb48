"""A local OTLP/HTTP trace receiver, strict as a collector is: what the exporters really send,
decoded with ``opentelemetry-proto``.

It serves ``POST /v1/traces`` only, as the OTLP specification's HTTP transport says:
- the body is a binary protobuf ``ExportTraceServiceRequest`` with ``Content-Type:
  application/x-protobuf`` (any other type: 415), optionally gzip-encoded
  (``Content-Encoding: gzip``; another encoding: 415), with a ``Content-Length`` (411);
- a body that does not decode is a 400 carrying a ``google.rpc.Status``;
- success is 200 with an ``ExportTraceServiceResponse``, as protobuf;
- another path is 404, another method 405.

Every refusal is recorded, so a test can assert there were none.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from google.rpc import status_pb2  # type: ignore[import-untyped]  # has .pyi, no py.typed
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    attributes: dict[str, Any]
    links: list[tuple[str, str, dict[str, Any]]]  # (trace id, span id, attributes)
    status: int


def _value(value: common_pb2.AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return None if which is None else getattr(value, which)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


@dataclass
class Receiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    refusals: list[tuple[int, str]] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                receiver._refuse(self, 405, "only POST")

            def do_POST(self) -> None:
                receiver._export(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _refuse(self, handler: BaseHTTPRequestHandler, status: int, message: str) -> None:
        with self._lock:
            self.refusals.append((status, message))
        body = status_pb2.Status(code=3, message=message).SerializeToString()
        handler.send_response(status)
        handler.send_header("Content-Type", PROTOBUF)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _export(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path != "/v1/traces":
            return self._refuse(handler, 404, f"no such path {handler.path[:80]}")
        content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != PROTOBUF:
            return self._refuse(handler, 415, f"Content-Type {content_type[:80]!r}")
        encoding = (handler.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in {"identity", "gzip"}:
            return self._refuse(handler, 415, f"Content-Encoding {encoding[:40]!r}")
        length = handler.headers.get("Content-Length")
        if length is None or not length.isdigit():
            return self._refuse(handler, 411, "Content-Length required")
        body = handler.rfile.read(int(length))
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        except (DecodeError, OSError, EOFError) as error:
            return self._refuse(handler, 400, f"undecodable body: {error}")
        received = list(self._spans_of(request))
        with self._lock:
            self.requests += 1
            self.spans.extend(received)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        handler.send_response(200)
        handler.send_header("Content-Type", PROTOBUF)
        handler.send_header("Content-Length", str(len(answer)))
        handler.end_headers()
        handler.wfile.write(answer)
        return None

    @staticmethod
    def _spans_of(request: trace_service_pb2.ExportTraceServiceRequest) -> Any:
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if len(span.trace_id) != 16 or len(span.span_id) != 8:
                        raise AssertionError(f"malformed ids on span {span.name!r}")
                    yield ReceivedSpan(
                        service=service,
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes=_attributes(span.attributes),
                        links=[
                            (link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                            for link in span.links
                        ],
                        status=span.status.code,
                    )

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], Any], what: str, timeout: float = 60.0
    ) -> Any:
        """Poll until ``found(spans)`` is truthy; return it."""
        deadline = time.monotonic() + timeout
        while True:
            result = found(self.snapshot())
            if result:
                return result
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in self.snapshot()})
                raise AssertionError(f"timed out waiting for {what}; received {names}")
            time.sleep(0.1)


def exporting_env(receiver: Receiver, service: str) -> dict[str, str]:
    """The standard variables that point a process's traces at ``receiver``."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": service,
        # Exported within a tenth of a second, not the default five.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


def main() -> None:
    """A receiver in a process of its own (a benchmark's collector must not share the measured
    process's CPU): prints its endpoint, serves until its standard input closes, then prints how
    many spans it received and how many requests it refused."""
    import json
    import sys

    receiver = Receiver()
    print(receiver.endpoint, flush=True)
    sys.stdin.read()
    print(json.dumps({"spans": len(receiver.snapshot()), "refused": len(receiver.refusals)}))
    receiver.close()


if __name__ == "__main__":
    main()
