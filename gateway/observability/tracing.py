"""OpenTelemetry traces of the gateway's requests, exported over OTLP; off unless asked for.

On when `observability.tracing` is set or either standard endpoint variable is
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Everything else is the standard
variables', read by the SDK itself: the protocol (`OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`,
`grpc` or `http/protobuf`, the specification's default), headers, timeout, compression,
certificate, the sampler (`OTEL_TRACES_SAMPLER[_ARG]`, parent-based always-on by default), the
batch processor's bounds (`OTEL_BSP_*`) and the resource (`OTEL_SERVICE_NAME`, default
flashbox-gateway, `OTEL_RESOURCE_ATTRIBUTES`).

Off, nothing is built: `Tracing.start` is never reached (the middleware holds no Tracing), no
span object exists, and the request path pays one `scope_state.get("trace")` per hook.

One request is one `RequestTrace`: a SERVER span started when the request arrives (continuing an
incoming `traceparent`), whose children are the gateway's stages. Stages that `RequestRecord`
already times (media, render, route, fair queue, relay) become spans when the request ends,
from those times, so tracing adds no clock reads and no span objects while the request waits;
only the spans whose ids must exist while they run are started live: the engine call (its id
goes to the engine as `traceparent`, so the engine's spans hang under it) and admission.
Prompt and answer text never go into a span, nor does an API key: only its id.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("gateway.tracing")

SCOPE = "flashbox.gateway"
DEFAULT_SERVICE_NAME = "flashbox-gateway"
# The response header that carries the trace id (32 hex digits), for a user to paste into the
# trace backend's search. W3C's `traceresponse` header is still a draft (Trace Context Level 2)
# that clients do not read, and it says more (the span id, the flags) than a search needs.
TRACE_ID_HEADER = b"x-flashbox-trace-id"
PROTOCOLS = ("grpc", "http/protobuf")
_TRUE = ("true", "1", "yes", "on")

# GenAI semantic conventions (opentelemetry-semantic-conventions, gen_ai_attributes), named
# here as strings: the incubating module is not a stable import.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"


def _environ_on(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def wanted(setting: bool, environ: Mapping[str, str]) -> bool:
    """Whether the gateway exports traces: the setting, or a standard endpoint variable."""
    if _environ_on(environ.get("OTEL_SDK_DISABLED")):
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return setting or bool(endpoint and endpoint.strip())


def protocol(environ: Mapping[str, str]) -> str:
    """The OTLP protocol the standard variables ask for (the traces one first)."""
    chosen = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if chosen not in PROTOCOLS:
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL {chosen!r} is not supported: use grpc or http/protobuf"
        )
    return chosen


def _exporter(chosen: str) -> SpanExporter:
    # Imported only when tracing is on: the gRPC exporter loads grpcio.
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def _resource() -> Resource:
    resource = Resource.create()
    name = str(resource.attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        # Neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES named the service.
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


class Tracing:
    """The app's tracer provider (one per app, never the process-global one)."""

    def __init__(
        self, provider: TracerProvider, processor: SpanProcessor, traced_paths: frozenset[str]
    ) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(SCOPE)
        self.traced_paths = traced_paths
        self._propagator = TraceContextTextMapPropagator()
        self._finished = _FinishedSpans(provider, processor)

    @classmethod
    def build(
        cls,
        setting: bool,
        traced_paths: Sequence[str],
        environ: Mapping[str, str] | None = None,
        processor: SpanProcessor | None = None,
    ) -> Tracing | None:
        """None when tracing is off. `processor` replaces the OTLP batch export (a test may
        pass its own); otherwise the exporter follows the OTEL_* variables."""
        env = os.environ if environ is None else environ
        if processor is None and not wanted(setting, env):
            return None
        provider = TracerProvider(resource=_resource())
        if processor is None:
            chosen = protocol(env)
            processor = BatchSpanProcessor(_exporter(chosen))
            log.info("tracing on: OTLP %s export", chosen)
        provider.add_span_processor(processor)
        return cls(provider, processor, frozenset(traced_paths))

    def start(self, scope: Mapping[str, Any], arrival: float, request_id: str) -> RequestTrace:
        """The request's SERVER span, from its arrival (`time.perf_counter()` seconds)."""
        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name == b"traceparent" or name == b"tracestate":
                carrier[name.decode()] = value.decode("latin-1")
        parent = self._propagator.extract(carrier) if carrier else None
        now_perf, now_ns = time.perf_counter(), time.time_ns()
        origin_ns = now_ns - int((now_perf - arrival) * 1e9)
        path = scope["path"]
        span = self.tracer.start_span(
            f"{scope['method']} {path}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=origin_ns,
            attributes={
                "http.request.method": scope["method"],
                "http.route": path,
                "url.path": path,
                "flashbox.request_id": request_id,
            },
        )
        return RequestTrace(self.tracer, self._finished, span, arrival, origin_ns)

    def force_flush(self, timeout_ms: int = 5000) -> bool:
        """Blocks: export what is queued (tests; the end of a benchmark)."""
        return self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """Blocks: export what is queued, then stop the export thread (the app's end)."""
        self.provider.shutdown()


class _FinishedSpans:
    """Spans of stages already over, handed straight to the export as finished spans.

    A span started and ended through the SDK costs ~45 us of CPU here (its lock, the sampler,
    bounded attributes, the processors' start and end calls); a stage that is over when it is
    recorded needs none of that: it is a child of the request's recorded server span (sampled
    with it, as the default parent-based sampler would), with its times known. Measured on
    this machine: a request's spans cost ~340 us made through the SDK, ~115 us this way.
    """

    def __init__(self, provider: TracerProvider, processor: SpanProcessor) -> None:
        self._processor = processor
        self._resource = provider.resource
        self._ids = provider.id_generator
        self._scope = InstrumentationScope(SCOPE)

    def export(
        self,
        name: str,
        parent: SpanContext,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Any] | None,
        error: str | None,
    ) -> None:
        context = SpanContext(
            parent.trace_id, self._ids.generate_span_id(), False, parent.trace_flags
        )
        status = Status(StatusCode.ERROR, error) if error is not None else Status()
        self._processor.on_end(
            ReadableSpan(
                name,
                context,
                parent=parent,
                resource=self._resource,
                attributes=attributes,
                kind=SpanKind.INTERNAL,
                instrumentation_scope=self._scope,
                status=status,
                start_time=start_ns,
                end_time=max(end_ns, start_ns),
            )
        )


class RequestTrace:
    """One request's spans. `recording` is False when the sampler dropped the trace: the
    engine still gets `traceparent` (with the sampled flag off, so it drops its spans too), and
    no child span is made."""

    __slots__ = (
        "_finished",
        "_origin_ns",
        "_tracer",
        "arrival",
        "context",
        "recording",
        "span",
        "status_code",
        "trace_id",
    )

    def __init__(
        self,
        tracer: Tracer,
        finished: _FinishedSpans,
        span: Span,
        arrival: float,
        origin_ns: int,
    ) -> None:
        self._tracer = tracer
        self._finished = finished
        self.span = span
        self.arrival = arrival
        self._origin_ns = origin_ns
        self.context: Context = trace.set_span_in_context(span)
        span_context = span.get_span_context()
        self.trace_id = f"{span_context.trace_id:032x}"
        self.recording = span.is_recording()
        self.status_code = 0

    def ns(self, perf: float) -> int:
        """A `time.perf_counter()` reading as the epoch nanoseconds spans take."""
        return self._origin_ns + int((perf - self.arrival) * 1e9)

    def at(self, seconds_since_arrival: float) -> int:
        """A RequestRecord stage time (seconds from arrival) as epoch nanoseconds."""
        return self._origin_ns + int(seconds_since_arrival * 1e9)

    def attach(self) -> object:
        """Makes the server span current in this task (log lines read the trace id there)."""
        return otel_context.attach(self.context)

    @staticmethod
    def detach(token: object) -> None:
        otel_context.detach(token)  # type: ignore[arg-type]

    def child(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Any] | None = None,
        *,
        error: str | None = None,
    ) -> None:
        """A finished stage as a child span (nothing when the trace is not recorded)."""
        if self.recording:
            parent = self.span.get_span_context()
            self._finished.export(name, parent, start_ns, end_ns, attributes, error)

    def start_child(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        start_ns: int | None = None,
    ) -> Span:
        """A stage that runs now (ended by its owner). Unrecorded: a span that only carries the
        server span's context, so `traceparent` still propagates the trace."""
        if not self.recording:
            return trace.NonRecordingSpan(self.span.get_span_context())
        return self._tracer.start_span(
            name, context=self.context, kind=kind, attributes=attributes, start_time=start_ns
        )

    def set(self, attributes: Mapping[str, Any]) -> None:
        if self.recording:
            self.span.set_attributes(attributes)

    def end(self, status_code: int, error: BaseException | None = None) -> None:
        """Ends the server span (the middleware, on every path)."""
        span = self.span
        if self.recording:
            if status_code:
                span.set_attribute("http.response.status_code", status_code)
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            elif status_code >= 500:
                span.set_status(Status(StatusCode.ERROR))
        span.end()


def traceparent(span: Span) -> str:
    """The W3C `traceparent` header naming `span` as the parent."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def end_span(span: Span, end_ns: int | None = None, error: str | None = None) -> None:
    if error is not None and span.is_recording():
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=end_ns)
