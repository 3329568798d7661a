"""OpenTelemetry traces of the gateway's requests, exported over OTLP; off unless asked for.

On when `observability.tracing` is set or either standard endpoint variable is
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Everything else follows the standard
variables: the protocol (`OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`, `grpc` or `http/protobuf`, the
specification's default), the exporter's headers, timeout, compression and certificates and the
batch bounds (`OTEL_BSP_*`: gateway.observability.otlp_export lists what it reads), the sampler
(`OTEL_TRACES_SAMPLER[_ARG]`: always_on, always_off, traceidratio and their parentbased_ forms,
parentbased_always_on by default) and the resource (`OTEL_SERVICE_NAME`, default
flashbox-gateway, `OTEL_RESOURCE_ATTRIBUTES`, read through the SDK's Resource once at start).

Off, nothing is built: `Tracing.start` is never reached (the middleware holds no Tracing), no
span object exists, and the request path pays one `scope_state.get("trace")` per hook.

On, the spans are not the SDK's: the SDK's span objects (a lock, the sampler and processor
calls, bounded attributes) and its OTLP encoder cost ~0.35 ms and ~0.7 ms of CPU per request
here, against the goal of under 10% more gateway CPU (~0.25 ms). A span is a tuple
(otlp_export.SpanRecord) handed to a bounded queue when it ends; a background thread encodes
the tuples straight to OTLP bytes and sends them. The ids are `random.getrandbits`, as the SDK's
RandomIdGenerator makes them; the sampler is ours (`Sampler`), with the SDK's rules.

One request is one `RequestTrace`: a SERVER span started when the request arrives (continuing an
incoming `traceparent`), whose children are the gateway's stages. Stages that `RequestRecord`
already times (media, render, route, fair queue, relay) become spans when the request ends,
from those times, so tracing adds no clock reads and no span objects while the request waits;
only the spans whose ids must exist while they run are started live (`LiveSpan`): the engine
call (its id goes to the engine as `traceparent`, so the engine's spans hang under it).
Prompt and answer text never go into a span, nor does an API key: only its id.
"""

from __future__ import annotations

import logging
import os
import re
import time
import traceback
from collections.abc import Mapping, Sequence
from random import getrandbits
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from gateway.observability.otlp_export import (
    FLAGS_HAS_IS_REMOTE,
    FLAGS_IS_REMOTE,
    KIND_INTERNAL,
    KIND_SERVER,
    STATUS_ERROR,
    Attributes,
    AttributeValue,
    BatchExport,
    Encoder,
    ExportConfig,
    SpanRecord,
    transport_for,
)

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


# W3C Trace Context: version 00's exact form, or a later version's prefix (more may follow).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
MAX_TRACESTATE_CHARS = 512  # the W3C bound; a longer or non-ASCII one is dropped
FLAG_SAMPLED = 0x01
# W3C Trace Context Level 2: the trace id's right 7 bytes are random (ours are), as the SDK sets.
FLAG_RANDOM = 0x02
MAX_STACKTRACE = 8192
SAMPLERS = ("always_on", "always_off", "traceidratio")
DEFAULT_SAMPLER = "parentbased_always_on"
_U64 = (1 << 64) - 1


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """(trace id, parent span id, trace flags) of a valid `traceparent`, else None."""
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_hex, span_hex, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(flags, 16)


class Sampler:
    """The decision at a request's start, with the SDK's rules: the root sampler (always_on,
    always_off, or traceidratio: the trace id's low 64 bits under ratio * 2^64) decides a new
    trace; parentbased_* follows an incoming traceparent's sampled flag instead."""

    __slots__ = ("_always", "_bound", "_parent_based", "name")

    def __init__(self, name: str = DEFAULT_SAMPLER, ratio: float = 1.0) -> None:
        root = name.removeprefix("parentbased_")
        if root not in SAMPLERS:
            raise ValueError(f"sampler {name!r} is not one of {SAMPLERS} or their parentbased_")
        self.name = name
        self._parent_based = name.startswith("parentbased_")
        self._always: bool | None = None if root == "traceidratio" else root == "always_on"
        self._bound = round(min(1.0, max(0.0, ratio)) * (_U64 + 1))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Sampler:
        name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or DEFAULT_SAMPLER
        if name.removeprefix("parentbased_") not in SAMPLERS:
            log.warning("OTEL_TRACES_SAMPLER %r is not offered: %s used", name, DEFAULT_SAMPLER)
            name = DEFAULT_SAMPLER
        ratio = 1.0
        raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        if name.endswith("traceidratio") and raw:
            try:
                ratio = float(raw)
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                log.warning("OTEL_TRACES_SAMPLER_ARG %r is not a ratio in [0, 1]: 1.0 used", raw)
                ratio = 1.0
        return cls(name, ratio)

    def sampled(self, trace_id: int, parent_sampled: bool | None) -> bool:
        if parent_sampled is not None and self._parent_based:
            return parent_sampled
        if self._always is not None:
            return self._always
        return (trace_id & _U64) < self._bound


class SpanExport(Protocol):
    """Where ended spans go (otlp_export.BatchExport; a test may pass its own)."""

    def add(self, record: SpanRecord) -> None: ...

    def force_flush(self, timeout_s: float) -> bool: ...

    def shutdown(self, timeout_s: float | None = None) -> None: ...


def resource_attributes() -> dict[str, AttributeValue]:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, telemetry.sdk.*), with
    flashbox-gateway as the service unless one is named."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    attributes: dict[str, Any] = dict(Resource.create().attributes)
    name = str(attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        attributes[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    return attributes


class Tracing:
    """The app's tracing: its sampler and its span export (one per app, never global)."""

    def __init__(self, export: SpanExport, sampler: Sampler, traced_paths: frozenset[str]) -> None:
        self.export = export
        self.sampler = sampler
        self.traced_paths = traced_paths

    @classmethod
    def build(
        cls,
        setting: bool,
        traced_paths: Sequence[str],
        environ: Mapping[str, str] | None = None,
        export: SpanExport | None = None,
    ) -> Tracing | None:
        """None when tracing is off. `export` replaces the OTLP batch export (a test may pass
        its own); otherwise the exporter follows the OTEL_* variables."""
        env = os.environ if environ is None else environ
        if export is None and not wanted(setting, env):
            return None
        sampler = Sampler.from_environ(env)
        if export is None:
            config = ExportConfig.from_environ(protocol(env), env)
            encoder = Encoder(resource_attributes(), SCOPE)
            export = BatchExport(config, encoder, transport_for(config))
            log.info("tracing on: OTLP %s export to %s", config.protocol, config.endpoint)
        return cls(export, sampler, frozenset(traced_paths))

    def start(self, scope: Mapping[str, Any], arrival: float, request_id: str) -> RequestTrace:
        """The request's SERVER span, from its arrival (`time.perf_counter()` seconds)."""
        parent = state = None
        for name, value in scope["headers"]:
            if name == b"traceparent":
                parent = parse_traceparent(value.decode("latin-1"))
            elif name == b"tracestate":
                state = value.decode("latin-1")
        now_perf, now_ns = time.perf_counter(), time.time_ns()
        origin_ns = now_ns - int((now_perf - arrival) * 1e9)
        if parent is None:
            trace_id = getrandbits(128) or 1
            parent_id = 0
            sampled = self.sampler.sampled(trace_id, None)
            flags = FLAG_RANDOM | (FLAG_SAMPLED if sampled else 0)
            state = None
        else:
            trace_id, parent_id, incoming = parent
            sampled = self.sampler.sampled(trace_id, bool(incoming & FLAG_SAMPLED))
            flags = (incoming & ~FLAG_SAMPLED & 0xFF) | (FLAG_SAMPLED if sampled else 0)
            if state is not None and (len(state) > MAX_TRACESTATE_CHARS or not state.isascii()):
                state = None
        path = scope["path"]
        attributes: dict[str, Any] | None = None
        if sampled:
            attributes = {
                "http.request.method": scope["method"],
                "http.route": path,
                "url.path": path,
                "flashbox.request_id": request_id,
            }
        return RequestTrace(
            self.export.add,
            f"{scope['method']} {path}",
            trace_id,
            parent_id,
            flags,
            state or None,
            attributes,
            arrival,
            origin_ns,
        )

    def force_flush(self, timeout_ms: int = 5000) -> bool:
        """Blocks: export what is queued (tests; the end of a benchmark)."""
        return self.export.force_flush(timeout_ms / 1000)

    def shutdown(self) -> None:
        """Blocks: export what is queued, then stop the export thread (the app's end)."""
        self.export.shutdown()


class RequestTrace:
    """One request's spans. `recording` is False when the sampler dropped the trace: the
    engine still gets `traceparent` (with the sampled flag off, so it drops its spans too), and
    no span record is made."""

    __slots__ = (
        "_add",
        "_attributes",
        "_child_flags",
        "_name",
        "_origin_ns",
        "_parent_id",
        "_span_flags",
        "_state",
        "_trace",
        "arrival",
        "flags",
        "recording",
        "span_id",
        "status_code",
        "trace_id",
    )

    def __init__(
        self,
        add: Any,
        name: str,
        trace_id: int,
        parent_id: int,
        flags: int,
        state: str | None,
        attributes: dict[str, Any] | None,
        arrival: float,
        origin_ns: int,
    ) -> None:
        self._add = add
        self._name = name
        self._trace = trace_id
        self.trace_id = f"{trace_id:032x}"
        self.span_id = getrandbits(64) or 1
        self._parent_id = parent_id
        self.flags = flags
        self._state = state
        self.recording = attributes is not None
        self._attributes: dict[str, Any] = attributes if attributes is not None else {}
        self.arrival = arrival
        self._origin_ns = origin_ns
        self.status_code = 0
        low = flags & 0xFF
        self._span_flags = low | FLAGS_HAS_IS_REMOTE | (FLAGS_IS_REMOTE if parent_id else 0)
        self._child_flags = low | FLAGS_HAS_IS_REMOTE

    def ns(self, perf: float) -> int:
        """A `time.perf_counter()` reading as the epoch nanoseconds spans take."""
        return self._origin_ns + int((perf - self.arrival) * 1e9)

    def at(self, seconds_since_arrival: float) -> int:
        """A RequestRecord stage time (seconds from arrival) as epoch nanoseconds."""
        return self._origin_ns + int(seconds_since_arrival * 1e9)

    def attach(self) -> object:
        """Makes the server span current in this task for OpenTelemetry's context (log lines
        read the trace id there: gateway.observability.logging); nothing when unrecorded, as
        those lines name only sampled traces."""
        if not self.recording:
            return None
        context = trace.SpanContext(self._trace, self.span_id, False, trace.TraceFlags(self.flags))
        return otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(context)))

    @staticmethod
    def detach(token: object) -> None:
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def child(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Attributes | None = None,
        *,
        error: str | None = None,
    ) -> None:
        """A finished stage as a child span (nothing when the trace is not recorded)."""
        if self.recording:
            self._add(
                (
                    self._trace, getrandbits(64) or 1, self.span_id, name, KIND_INTERNAL,
                    start_ns, end_ns, attributes, STATUS_ERROR if error is not None else 0,
                    error, None, self._state, self._child_flags,
                )
            )  # fmt: skip

    def start_child(
        self,
        name: str,
        attributes: dict[str, Any] | None = None,
        *,
        kind: int = KIND_INTERNAL,
        start_ns: int | None = None,
    ) -> LiveSpan:
        """A stage that runs now (ended by its owner). Unrecorded: a span that only carries the
        server span's id, so `traceparent` still propagates the trace."""
        if not self.recording:
            return LiveSpan(self, self.span_id, name, kind, 0, None)
        if start_ns is None:
            start_ns = self.ns(time.perf_counter())
        return LiveSpan(self, getrandbits(64) or 1, name, kind, start_ns, attributes or {})

    def unrecorded_child(self) -> LiveSpan:
        """What `start_child` gives when the trace is not recorded, without its arguments."""
        return LiveSpan(self, self.span_id, "", KIND_INTERNAL, 0, None)

    def set(self, attributes: Attributes) -> None:
        if self.recording:
            self._attributes.update(attributes)

    def end(self, status_code: int, error: BaseException | None = None) -> None:
        """Ends the server span (the middleware, on every path)."""
        if not self.recording:
            return
        attributes = self._attributes
        if status_code:
            attributes["http.response.status_code"] = status_code
        end_ns = self.ns(time.perf_counter())
        status, message, events = 0, None, None
        if error is not None:
            status, message = STATUS_ERROR, type(error).__name__
            events = (("exception", end_ns, _exception(error)),)
        elif status_code >= 500:
            status = STATUS_ERROR
        self._add(
            (
                self._trace, self.span_id, self._parent_id, self._name, KIND_SERVER,
                self._origin_ns, end_ns, attributes, status, message, events, self._state,
                self._span_flags,
            )
        )  # fmt: skip

    def _ended(self, span: LiveSpan, end_ns: int, error: str | None) -> None:
        self._add(
            (
                self._trace, span.span_id, self.span_id, span.name, span.kind, span.start_ns,
                end_ns, span.attributes, STATUS_ERROR if error is not None else 0, error, None,
                self._state, self._child_flags,
            )
        )  # fmt: skip


class LiveSpan:
    """A child span that runs while the request does (the engine call): its id exists from its
    start, so the engine can be told it; a record goes to the export when it ends (once)."""

    __slots__ = (
        "_ended",
        "_owner",
        "attributes",
        "kind",
        "name",
        "recording",
        "span_id",
        "start_ns",
    )

    def __init__(
        self,
        owner: RequestTrace,
        span_id: int,
        name: str,
        kind: int,
        start_ns: int,
        attributes: dict[str, Any] | None,
    ) -> None:
        self._owner = owner
        self._ended = False
        self.span_id = span_id
        self.name = name
        self.kind = kind
        self.start_ns = start_ns
        self.recording = attributes is not None
        self.attributes: dict[str, Any] = attributes if attributes is not None else {}

    def set(self, attributes: Attributes) -> None:
        if self.recording:
            self.attributes.update(attributes)

    def traceparent(self) -> str:
        """The W3C `traceparent` header naming this span as the parent."""
        owner = self._owner
        return f"00-{owner.trace_id}-{self.span_id:016x}-{owner.flags:02x}"

    def end(self, end_ns: int | None = None, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if self.recording:
            owner = self._owner
            owner._ended(self, owner.ns(time.perf_counter()) if end_ns is None else end_ns, error)


def traceparent(span: LiveSpan) -> str:
    """The W3C `traceparent` header naming `span` as the parent."""
    return span.traceparent()


def _exception(error: BaseException) -> dict[str, Any]:
    """The semantic conventions' exception event, bounded: the type and the frames, never the
    message (an exception's text, or a chained one's, may quote the prompt or a key, and a span
    skips the log's redaction)."""
    stack = "".join(traceback.format_tb(error.__traceback__))
    return {
        "exception.type": type(error).__qualname__,
        "exception.stacktrace": stack[-MAX_STACKTRACE:],
    }
