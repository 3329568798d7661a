"""The gateway's own OTLP export (gateway/observability/otlp_export.py) and its span records
(gateway/observability/tracing.py): the encoder's bytes read back by opentelemetry-proto's own
classes to the same values; batches sent over http/protobuf and gRPC (plain and gzip) to the
real receiver (tests/support/otlp_receiver.py); the queue's and the batch's bounds; a collector
that is not there costs a bounded wait; the sampler's rules; traceparent parsing; the
variables read."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from gateway.observability.otlp_export import (
    FLAGS_HAS_IS_REMOTE,
    FLAGS_IS_REMOTE,
    KIND_CLIENT,
    KIND_INTERNAL,
    KIND_SERVER,
    STATUS_ERROR,
    AttributeValue,
    BatchExport,
    Encoder,
    ExportConfig,
    SpanRecord,
    parse_headers,
    transport_for,
)
from gateway.observability.tracing import Sampler, Tracing, parse_traceparent
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan

RESOURCE: dict[str, AttributeValue] = {
    "service.name": "gw-export-test",
    "host.cores": 2,
    "deployment.canary": False,
}
TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
NOW = 1_767_000_000_123_456_789
ATTRIBUTES: dict[str, Any] = {
    "text": "héllo, wörld",
    "long": "x" * 300,  # a length past one varint byte
    "yes": True,
    "no": False,
    "count": 12,
    "big": 2**62 + 5,
    "negative": -3,
    "ratio": 0.125,
    "reasons": ("stop", "length"),
    "numbers": [1, 2, 3],
    "blob": b"\x00\x01\xff",
}


def record(span_id: int, **changes: Any) -> SpanRecord:
    fields: dict[str, Any] = {
        "trace_id": TRACE,
        "span_id": span_id,
        "parent_id": 0x00F067AA0BA902B7,
        "name": f"stage-{span_id}",
        "kind": KIND_INTERNAL,
        "start": NOW,
        "end": NOW + 1_500_000,
        "attributes": {"flashbox.n": span_id},
        "status": 0,
        "message": None,
        "events": None,
        "state": None,
        "flags": 0x01 | FLAGS_HAS_IS_REMOTE,
    }
    fields.update(changes)
    return tuple(fields.values())


def decoded_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [decoded_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def test_the_encoders_bytes_decode_with_the_protocols_classes_to_the_same_values() -> None:
    encoder = Encoder(RESOURCE, "flashbox.gateway", "1.0")
    server = record(
        0x1111,
        name="POST /v1/chat/completions",
        kind=KIND_SERVER,
        attributes=ATTRIBUTES,
        status=STATUS_ERROR,
        message="RuntimeError",
        events=(("exception", NOW + 7, {"exception.type": "RuntimeError"}), ("bare", NOW, None)),
        state="vendor=opaque,other=1",
        flags=0x03 | FLAGS_HAS_IS_REMOTE | FLAGS_IS_REMOTE,
    )
    root = record(0x2222, parent_id=0, kind=KIND_CLIENT, attributes=None, end=NOW - 5)
    body = encoder.request([encoder.span(server), encoder.span(root)])

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    (resource_spans,) = request.resource_spans
    resource = {kv.key: decoded_value(kv.value) for kv in resource_spans.resource.attributes}
    assert resource == RESOURCE
    (scope_spans,) = resource_spans.scope_spans
    assert (scope_spans.scope.name, scope_spans.scope.version) == ("flashbox.gateway", "1.0")
    first, second = scope_spans.spans
    assert first.trace_id == TRACE.to_bytes(16, "big")
    assert first.span_id == (0x1111).to_bytes(8, "big")
    assert first.parent_span_id.hex() == "00f067aa0ba902b7"
    assert first.name == "POST /v1/chat/completions"
    assert first.kind == KIND_SERVER
    assert (first.start_time_unix_nano, first.end_time_unix_nano) == (NOW, NOW + 1_500_000)
    attributes = {kv.key: decoded_value(kv.value) for kv in first.attributes}
    expected = {
        key: list(value) if isinstance(value, tuple | list) else value
        for key, value in ATTRIBUTES.items()
    }
    assert attributes == expected
    assert math.isclose(attributes["ratio"], 0.125)
    assert first.status.code == STATUS_ERROR
    assert first.status.message == "RuntimeError"
    assert [(e.name, e.time_unix_nano) for e in first.events] == [
        ("exception", NOW + 7),
        ("bare", NOW),
    ]
    assert first.events[0].attributes[0].value.string_value == "RuntimeError"
    assert first.trace_state == "vendor=opaque,other=1"
    assert first.flags == 0x03 | FLAGS_HAS_IS_REMOTE | FLAGS_IS_REMOTE
    # A root: no parent; no attributes; an end before its start is clamped to the start.
    assert second.parent_span_id == b""
    assert second.kind == KIND_CLIENT
    assert list(second.attributes) == []
    assert second.end_time_unix_nano == second.start_time_unix_nano == NOW
    assert second.status.code == 0
    # The protocol's own encoding of what it decoded is the same size (no stray bytes).
    assert request.ByteSize() == len(body)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def env_for(receiver: OtlpReceiver, protocol: str, **extra: str) -> dict[str, str]:
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    return {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # only a flush or a full batch sends
        **extra,
    }


def export_for(env: dict[str, str], protocol: str) -> BatchExport:
    config = ExportConfig.from_environ(protocol, env)
    return BatchExport(config, Encoder(RESOURCE, "flashbox.gateway"), transport_for(config))


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_batch_reaches_the_receiver_over_each_protocol(
    receiver: OtlpReceiver, protocol: str, compression: str
) -> None:
    trace_id = int.from_bytes(f"{protocol[:10]}-{compression}".encode().ljust(16, b"."), "big")
    env = env_for(
        receiver,
        protocol,
        OTEL_EXPORTER_OTLP_COMPRESSION=compression,
        OTEL_EXPORTER_OTLP_HEADERS="x-tenant=flash%20box,authorization=Bearer%20t",
    )
    export = export_for(env, protocol)
    try:
        for span_id in range(1, 6):
            export.add(record(span_id, trace_id=trace_id, attributes=ATTRIBUTES))
        assert export.force_flush(10)
    finally:
        export.shutdown()
    spans = sorted(receiver.spans(f"{trace_id:032x}"), key=lambda s: s.span_id)
    assert [int(s.span_id, 16) for s in spans] == [1, 2, 3, 4, 5]
    via = "grpc" if protocol == "grpc" else "http"
    assert {s.via for s in spans} == {via}
    first: ReceivedSpan = spans[0]
    assert first.service == "gw-export-test"
    assert first.name == "stage-1"
    assert first.kind == "internal"
    assert first.attributes["reasons"] == ("stop", "length")
    assert first.attributes["negative"] == -3
    assert first.attributes["text"] == "héllo, wörld"
    assert export.exported == 5
    assert export.failed == 0
    assert export.dropped == 0
    headers = receiver.store.headers[via]
    assert headers["x-tenant"] == "flash box"
    assert headers["authorization"] == "Bearer t"


def test_bounds_a_full_queue_drops_the_newest_and_a_batch_is_at_most_its_size(
    receiver: OtlpReceiver,
) -> None:
    env = env_for(
        receiver,
        "http/protobuf",
        OTEL_BSP_MAX_QUEUE_SIZE="5",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2",
    )
    export = export_for(env, "http/protobuf")
    exports_before = receiver.store.counts()["http"]["exports"]
    trace_id = 0xB0B
    try:
        # A batch's worth wakes the thread at once; the rest wait for the flush. What is past
        # the queue's bound while it is full is dropped.
        for span_id in range(1, 31):
            export.add(record(span_id, trace_id=trace_id))
        assert export.force_flush(10)
    finally:
        export.shutdown()
    got = receiver.spans(f"{trace_id:032x}")
    assert export.exported == len(got)
    assert len(got) + export.dropped == 30
    assert export.dropped > 0
    assert {int(s.span_id, 16) for s in got} >= {1, 2, 3, 4, 5}
    exports = receiver.store.counts()["http"]["exports"] - exports_before
    assert exports >= math.ceil(len(got) / 2)  # two spans a batch at most


def test_a_collector_that_is_not_there_costs_a_bounded_wait() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_BSP_EXPORT_TIMEOUT": "1200",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5",
    }
    export = export_for(env, "http/protobuf")
    began = time.monotonic()
    try:
        export.add(record(1))
        assert export.force_flush(10)
    finally:
        export.shutdown()
    # Retried (connection refused is worth another try) until the export timeout, then given up.
    assert 0.4 < time.monotonic() - began < 5
    assert (export.exported, export.failed) == (0, 1)


def test_a_request_trace_as_the_receiver_sees_it(receiver: OtlpReceiver) -> None:
    """The server span of a request that continued a traceparent (tracestate kept) and failed:
    its exception event, its status, the remote-parent flags; a live child and a finished one."""
    env = env_for(receiver, "grpc", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc")
    tracing = Tracing.build(False, ["/v1/chat/completions"], environ=env)
    assert tracing is not None
    scope = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [
            (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            (b"tracestate", b"vendor=kept"),
        ],
    }
    try:
        trace = tracing.start(scope, time.perf_counter(), "rid-1")
        assert trace.recording
        assert trace.trace_id == "0af7651916cd43dd8448eb211c80319c"
        live = trace.start_child("chat m", {"gen_ai.request.model": "m"}, kind=KIND_CLIENT)
        parent = live.traceparent()
        assert parent == f"00-{trace.trace_id}-{live.span_id:016x}-01"
        live.set({"flashbox.outcome": "ok"})
        live.end()
        live.end()  # once only
        now = trace.ns(time.perf_counter())
        trace.child("render", now, now + 10, error="bad_template")
        trace.end(500, RuntimeError("boom"))
        assert tracing.force_flush(10_000)
    finally:
        tracing.shutdown()
    spans = {
        s.name: s
        for s in receiver.wait_for_trace(
            trace.trace_id, {"POST /v1/chat/completions", "chat m", "render"}
        )
    }
    assert len(receiver.spans(trace.trace_id)) == 3
    server = spans["POST /v1/chat/completions"]
    assert server.parent_span_id == "b7ad6b7169203331"
    assert server.kind == "server"
    assert server.status_code == STATUS_ERROR
    assert server.events == ("exception",)
    assert server.attributes["http.response.status_code"] == 500
    assert server.attributes["flashbox.request_id"] == "rid-1"
    call = spans["chat m"]
    assert call.kind == "client"
    assert call.parent_span_id == server.span_id
    assert call.attributes == {"gen_ai.request.model": "m", "flashbox.outcome": "ok"}
    assert spans["render"].status_code == STATUS_ERROR
    assert server.start_ns <= call.start_ns <= call.end_ns <= server.end_ns


def test_an_unsampled_request_records_nothing_and_propagates_its_decision() -> None:
    sent: list[SpanRecord] = []

    class Kept:
        def add(self, record: SpanRecord) -> None:
            sent.append(record)

        def force_flush(self, timeout_s: float) -> bool:
            return True

        def shutdown(self, timeout_s: float | None = None) -> None:
            return None

    env = {"OTEL_TRACES_SAMPLER": "parentbased_always_off"}
    tracing = Tracing.build(True, ["/x"], environ=env, export=Kept())
    assert tracing is not None
    scope: dict[str, Any] = {"method": "POST", "path": "/x", "headers": []}
    trace = tracing.start(scope, time.perf_counter(), "rid")
    assert not trace.recording
    span = trace.start_child("call", {"a": 1})
    assert span.traceparent() == f"00-{trace.trace_id}-{trace.span_id:016x}-02"
    span.end()
    trace.child("render", 1, 2)
    trace.end(200)
    assert sent == []
    # Parent-based: a sampled caller's trace is recorded even though new traces are not.
    scope["headers"] = [
        (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    ]
    continued = tracing.start(scope, time.perf_counter(), "rid")
    continued.end(200)
    assert [r[0] for r in sent] == [0x0AF7651916CD43DD8448EB211C80319C]


def test_the_samplers_rules() -> None:
    low, high = 1, 2**64 - 1  # trace ids by their low 64 bits
    half = Sampler("traceidratio", 0.5)
    assert half.sampled(low, None)
    assert not half.sampled(high, None)
    assert half.sampled(low, False)  # not parent-based: the parent is not asked
    assert not Sampler("always_off").sampled(low, True)
    assert Sampler("always_on").sampled(high, False)
    based = Sampler("parentbased_traceidratio", 0.0)
    assert based.sampled(high, True)
    assert not based.sampled(low, False)
    assert not based.sampled(low, None)
    assert Sampler("parentbased_always_on").sampled(high, None)
    assert Sampler.from_environ({}).name == "parentbased_always_on"
    assert Sampler.from_environ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}).name == (
        "parentbased_always_on"
    )
    bad_ratio = Sampler.from_environ(
        {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}
    )
    assert bad_ratio.sampled(high, None)  # 1.0, as the SDK falls back
    with pytest.raises(ValueError, match="sometimes"):
        Sampler("sometimes")


def test_traceparent_parsing() -> None:
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert parse_traceparent(good) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        1,
    )
    assert parse_traceparent(f" {good} ") is not None
    assert parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later")
    for bad in (
        "",
        good.upper(),
        good + "-extra",  # version 00 has exactly four fields
        "ff" + good[2:],
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692_3331-01",
    ):
        assert parse_traceparent(bad) is None, bad


def test_the_variables_read() -> None:
    http = ExportConfig.from_environ(
        "http/protobuf",
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_HEADERS": "a=1,bad,B=x%3Dy",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2.5",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_BSP_SCHEDULE_DELAY": "250",
            "OTEL_BSP_MAX_QUEUE_SIZE": "100",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "500",
            "OTEL_BSP_EXPORT_TIMEOUT": "not a number",
        },
    )
    assert http.endpoint == "http://collector:4318/v1/traces"
    assert http.headers == {"a": "1", "b": "x=y"}
    assert http.timeout_s == 2.5  # seconds, as the SDK reads it
    assert http.gzip
    assert http.schedule_delay_s == 0.25
    assert (http.max_queue, http.max_batch) == (100, 100)  # a batch is at most the queue
    assert http.export_timeout_s == 30.0  # the default, for a value that is not a number
    traces = ExportConfig.from_environ(
        "http/protobuf",
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:9/custom",
        },
    )
    assert traces.endpoint == "http://other:9/custom"  # the traces one, as it is
    assert ExportConfig.from_environ("http/protobuf", {}).endpoint == (
        "http://localhost:4318/v1/traces"
    )
    grpc = ExportConfig.from_environ("grpc", {"OTEL_EXPORTER_OTLP_INSECURE": "true"})
    assert (grpc.endpoint, grpc.insecure) == ("http://localhost:4317", True)
    assert parse_headers("k=v%20w, ,=x") == {"k": "v w"}


def test_a_lone_surrogate_in_a_value_does_not_sink_the_batch() -> None:
    """Python's json decodes "\\ud800" without complaint, so such text can reach a span; encoding
    it strictly raised, and the export thread lost every span of the batch it was in."""
    encoder = Encoder(RESOURCE, "flashbox.gateway", "1.0")
    bad = record(0x3333, attributes={"text": "a\ud800b"}, events=(("e", NOW, {"m": "\udfff"}),))
    request = ExportTraceServiceRequest()
    request.ParseFromString(encoder.request([encoder.span(bad)]))
    (span,) = request.resource_spans[0].scope_spans[0].spans
    assert span.attributes[0].value.string_value == "a?b"


def test_an_exception_event_carries_its_frames_never_its_message() -> None:
    """An exception's message, or a chained one's, may quote the prompt; a span skips the log's
    redaction, so the event keeps the type and the frames only."""
    from gateway.observability.tracing import _exception

    # Built at run time: the frames quote source lines, and the test's must not hold them.
    prompt, key = " ".join(["prompt", "text"]), "-".join(["sk", "secret", "key"])
    try:
        try:
            raise KeyError(f"the user's {prompt}")
        except KeyError as inner:
            raise RuntimeError(f"{key} in a message") from inner
    except RuntimeError as error:
        event = _exception(error)
    assert event["exception.type"] == "RuntimeError"
    assert "test_an_exception_event" in event["exception.stacktrace"]
    text = repr(event)
    assert prompt not in text
    assert key not in text


def test_a_malformed_header_pair_is_logged_without_its_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="gateway.tracing"):
        assert parse_headers("x-team:SECRET-TOKEN,k=v") == {"k": "v"}
    assert "SECRET-TOKEN" not in caplog.text
    assert "x-team" in caplog.text
