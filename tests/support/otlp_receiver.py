"""A real OTLP trace receiver: the protocol's own gRPC TraceService and HTTP `/v1/traces`
(protobuf, gzip or not), keeping what it receives in memory, bounded; and the part of Jaeger's
query API a test or an operator reads a trace with (`GET /api/traces/{trace_id}`).

In a test it runs in-process on loopback ports of its own (`with OtlpReceiver() as receiver`);
as a stand-in for a trace backend it runs alone on Jaeger's ports:

    python -m tests.support.otlp_receiver [--host H] [--grpc-port 4317] [--http-port 4318]
                                          [--query-port 16686] [--max-spans N] [--sink]

`--sink` (a benchmark's receiver, bench/tracing_overhead.py): exports are taken, counted and
answered, not decoded, so the receiver's own CPU does not compete with the process measured
on a small machine; `GET /stats` says how many exports and bytes came, by protocol.

Stdlib, grpcio and opentelemetry-proto only (the gateway's own dependencies).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

# Bounds: what one export may carry, and how many spans are kept (oldest dropped first).
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_SPANS = 100_000
_TRACE_PATH = re.compile(r"^/api/traces/([0-9a-fA-F]{1,32})$")
_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str
    status_code: int  # 0 unset, 1 ok, 2 error
    events: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    # How it arrived: "grpc" or "http".
    via: str = field(default="", compare=False)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(request: trace_service_pb2.ExportTraceServiceRequest, via: str) -> list[ReceivedSpan]:
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(_span(span, service, via))
    return spans


def _span(span: SpanProto, service: str, via: str) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        name=span.name,
        kind=_KINDS.get(span.kind, str(span.kind)),
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        attributes=_attributes(span.attributes),
        service=service,
        status_code=span.status.code,
        events=tuple(event.name for event in span.events),
        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
        via=via,
    )


class SpanStore:
    """What the receiver got, oldest dropped past `max_spans`; waiters wake on each export."""

    def __init__(self, max_spans: int = MAX_SPANS) -> None:
        self._spans: deque[ReceivedSpan] = deque(maxlen=max_spans)
        self._changed = threading.Condition()
        self.exports = 0
        # Exports and bytes by protocol ("grpc", "http"), decoded or not (a sink's count).
        self.received: dict[str, list[int]] = {"grpc": [0, 0], "http": [0, 0]}
        # The headers (gRPC metadata) of the latest export by protocol, names lower-cased.
        self.headers: dict[str, dict[str, str]] = {"grpc": {}, "http": {}}

    def count(self, via: str, size: int, headers: Iterable[tuple[str, str]] = ()) -> None:
        with self._changed:
            counted = self.received[via]
            counted[0] += 1
            counted[1] += size
            self.headers[via] = {name.lower(): value for name, value in headers}

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self._changed:
            self._spans.extend(spans)
            self.exports += 1
            self._changed.notify_all()

    def counts(self) -> dict[str, dict[str, int]]:
        with self._changed:
            return {via: {"exports": n, "bytes": b} for via, (n, b) in self.received.items()}

    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        with self._changed:
            found = list(self._spans)
        if trace_id is None:
            return found
        wanted = trace_id.lower().rjust(32, "0")
        return [span for span in found if span.trace_id == wanted]

    def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 10.0
    ) -> list[ReceivedSpan]:
        """Blocks until `done(spans)` holds (returns the spans) or raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                spans = list(self._spans)
                if done(spans):
                    return spans
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({s.name for s in spans})
                    raise TimeoutError(f"spans not received in {timeout_s}s; have {names}")
                self._changed.wait(left)

    def clear(self) -> None:
        with self._changed:
            self._spans.clear()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: SpanStore) -> None:
        self._store = store

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._store.count("grpc", request.ByteSize(), context.invocation_metadata())
        self._store.add(decode(request, "grpc"))
        return trace_service_pb2.ExportTraceServiceResponse()


def _sink_service(store: SpanStore) -> grpc.GenericRpcHandler:
    """TraceService/Export taking the request's bytes as they are (a sink: nothing decoded)."""

    def export(request: bytes, context: Any) -> bytes:
        store.count("grpc", len(request), context.invocation_metadata())
        return b""  # an empty ExportTraceServiceResponse

    handler = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=None
    )
    return grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
    )


def jaeger_trace(trace_id: str, spans: list[ReceivedSpan]) -> dict[str, Any]:
    """One trace as Jaeger's query API answers it (the fields a UI or a test reads)."""
    processes: dict[str, dict[str, Any]] = {}
    out = []
    for span in spans:
        process = next((k for k, v in processes.items() if v["serviceName"] == span.service), None)
        if process is None:
            process = f"p{len(processes) + 1}"
            processes[process] = {"serviceName": span.service, "tags": []}
        references = []
        if span.parent_span_id:
            references.append(
                {"refType": "CHILD_OF", "traceID": span.trace_id, "spanID": span.parent_span_id}
            )
        out.append(
            {
                "traceID": span.trace_id,
                "spanID": span.span_id,
                "operationName": span.name,
                "references": references,
                "startTime": span.start_ns // 1000,
                "duration": max(0, span.end_ns - span.start_ns) // 1000,
                "tags": [
                    {"key": key, "type": _jaeger_type(value), "value": _jaeger_value(value)}
                    for key, value in span.attributes.items()
                ]
                + [{"key": "span.kind", "type": "string", "value": span.kind}],
                "processID": process,
            }
        )
    return {"traceID": trace_id, "spans": out, "processes": processes}


def _jaeger_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string"


def _jaeger_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


def _handler(store: SpanStore, sink: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: a test's output is its own

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/v1/traces":
                self._answer(404, b"not found", "text/plain")
                return
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY_BYTES:
                self._answer(413, b"too large", "text/plain")
                return
            body = self.rfile.read(length)
            store.count("http", length, self.headers.items())
            if sink:
                self._answer(200, b"", "application/x-protobuf")
                return
            if self.headers.get("content-encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
            except Exception:  # the protobuf library's DecodeError
                self._answer(400, b"not an ExportTraceServiceRequest", "text/plain")
                return
            store.add(decode(request, "http"))
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self._answer(200, answer, "application/x-protobuf")

        def do_GET(self) -> None:
            if self.path == "/health":  # a process runner's readiness probe
                self._answer(200, b"ok", "text/plain")
                return
            if self.path == "/stats":
                self._answer(200, json.dumps(store.counts()).encode(), "application/json")
                return
            match = _TRACE_PATH.match(self.path.split("?")[0])
            if match is None:
                self._answer(404, b'{"data":null,"errors":[{"code":404}]}', "application/json")
                return
            trace_id = match.group(1).lower().rjust(32, "0")
            spans = store.spans(trace_id)
            if not spans:
                body = {"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}
                self._answer(404, json.dumps(body).encode(), "application/json")
                return
            body = {"data": [jaeger_trace(trace_id, spans)], "errors": None}
            self._answer(200, json.dumps(body).encode(), "application/json")

    return Handler


class OtlpReceiver:
    """gRPC and HTTP OTLP receivers (and the query API on the HTTP port) on loopback."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        grpc_port: int = 0,
        http_port: int = 0,
        query_ports: Iterable[int] = (),
        max_spans: int = MAX_SPANS,
        sink: bool = False,
    ) -> None:
        self.host = host
        self.store = SpanStore(max_spans)
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if sink:
            self._grpc.add_generic_rpc_handlers((_sink_service(self.store),))
        else:
            trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
                _TraceService(self.store), self._grpc
            )
        self.grpc_port: int = self._grpc.add_insecure_port(f"{host}:{grpc_port}")
        handler = _handler(self.store, sink)
        self._http = [
            ThreadingHTTPServer((host, port), handler) for port in (http_port, *query_ports)
        ]
        self.http_port: int = self._http[0].server_address[1]
        self._threads: list[threading.Thread] = []

    @property
    def grpc_endpoint(self) -> str:
        return f"http://{self.host}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """The full traces URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT takes it as is)."""
        return f"http://{self.host}:{self.http_port}/v1/traces"

    def env(self, protocol: str) -> dict[str, str]:
        """The standard variables that send a process's traces here, exported within 100 ms."""
        endpoint = self.grpc_endpoint if protocol == "grpc" else self.http_endpoint
        return {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }

    def start(self) -> OtlpReceiver:
        self._grpc.start()
        for server in self._http:
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self._http:
            server.shutdown()
            server.server_close()
        self._grpc.stop(grace=None).wait(5)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        return self.store.spans(trace_id)

    def wait_for_trace(
        self, trace_id: str, names: Iterable[str], timeout_s: float = 10.0
    ) -> list[ReceivedSpan]:
        """The trace's spans once every span named in `names` arrived (each at least once)."""
        wanted = set(names)
        spans = self.store.wait_for(
            lambda got: wanted <= {s.name for s in got if s.trace_id == trace_id}, timeout_s
        )
        return [s for s in spans if s.trace_id == trace_id]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.otlp_receiver",
        description="An OTLP trace receiver (gRPC and HTTP) with Jaeger's trace query API.",
    )
    parser.add_argument("--host", default="0.0.0.0")
    # Jaeger's config overrides, which compose passes to the real image: the stand-in for it
    # (scripts/docker_stack/Dockerfile.jaeger) takes the same command line and ignores them.
    parser.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--grpc-port", type=int, default=4317)
    parser.add_argument("--http-port", type=int, default=4318)
    parser.add_argument("--query-port", type=int, default=16686)
    parser.add_argument("--max-spans", type=int, default=MAX_SPANS)
    parser.add_argument(
        "--sink", action="store_true", help="count exports, decode nothing (a benchmark's)"
    )
    args = parser.parse_args(argv)
    receiver = OtlpReceiver(
        args.host, args.grpc_port, args.http_port, (args.query_port,), args.max_spans, args.sink
    ).start()
    print(
        f"otlp receiver: grpc {args.host}:{receiver.grpc_port}, http :{receiver.http_port}, "
        f"query :{args.query_port}",
        flush=True,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    receiver.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
