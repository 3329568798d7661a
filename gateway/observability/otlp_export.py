"""OTLP trace export of our own: spans as compact records, encoded straight to the protocol's
protobuf bytes and sent in batches from one background thread, over `http/protobuf` (a POST of
the bytes) or `grpc` (a unary call of TraceService/Export carrying the same bytes).

Why not the SDK's exporter: its encoder builds a protobuf message object per span, attribute and
value through generic Python wrappers (~85 us of CPU per span measured here), on a thread that
takes the GIL from the event loop in bursts; a request has ~7 spans. Writing the wire format
directly from a tuple costs ~4 us a span (a request's ~25-40 us, measured apart; the encoded
attributes that repeat are kept), and the thread gives the GIL back between slices of a batch
(`_SLICE_SPANS`), so a burst of export never holds the event loop for long. Measured in the
gateway process, the export thread costs ~0.15-0.2 ms a request at a 200 ms export delay (the
SDK's: ~0.6-1 ms): it runs rarely, so its code runs with cold caches (~3x its cost in a loop),
and each send costs ~0.15 ms warm, ~0.45 ms cold (http.client, or a gRPC call).

A span record is a tuple (`SpanRecord`): trace id, span id, parent span id (0: none), name,
kind (the protocol's numbers), start and end in epoch nanoseconds, attributes (str, bool, int,
float, bytes, or a tuple or list of those), status code (0 unset, 2 error) and message, events
(name, epoch ns, attributes), W3C tracestate (or None) and the span's flags field (the trace
flags in the low byte, and whether the parent was remote, as the protocol's SpanFlags say).

The standard variables, the traces one before the general one, read as the SDK 1.45 reads them
where the specification and the SDK differ (the package wins):
  OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT     http: the traces one as is, the general one + /v1/traces
                                           (default http://localhost:4318/v1/traces); grpc:
                                           host:port of either (default localhost:4317)
  OTEL_EXPORTER_OTLP[_TRACES]_HEADERS      k=v,k2=v2, URL-encoded values
  OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT      seconds (the SDK reads seconds; the spec says ms), 10
  OTEL_EXPORTER_OTLP[_TRACES]_COMPRESSION  gzip or none (deflate is not offered: none, warned)
  OTEL_EXPORTER_OTLP[_TRACES]_CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE   TLS files
  OTEL_EXPORTER_OTLP[_TRACES]_INSECURE     grpc: plaintext to an endpoint without a scheme
  OTEL_BSP_SCHEDULE_DELAY (ms, 5000), OTEL_BSP_MAX_QUEUE_SIZE (2048),
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512, at most the queue), OTEL_BSP_EXPORT_TIMEOUT (ms, 30000)
Not read: the SDK's Python-only credential-provider entry points and retryable-code override.
Failed exports are retried (HTTP 429, 502, 503, 504, a lost connection; gRPC's retryable
codes) with doubling waits within the export timeout; a full queue drops the newest spans and
counts them (logged once a minute at most).
"""

from __future__ import annotations

import gzip
import http.client
import logging
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

log = logging.getLogger("gateway.tracing")

# The protocol's SpanKind numbers.
KIND_INTERNAL = 1
KIND_SERVER = 2
KIND_CLIENT = 3
STATUS_ERROR = 2
# SpanFlags: the low byte is the W3C trace flags; then whether the parent's remoteness is known
# (always, here) and whether it was remote (a traceparent that came in).
FLAGS_HAS_IS_REMOTE = 0x100
FLAGS_IS_REMOTE = 0x200

AttributeValue = str | bool | int | float | bytes | Sequence[str | bool | int | float]
Attributes = Mapping[str, AttributeValue]
Event = tuple[str, int, Attributes | None]
SpanRecord = tuple[
    int,  # trace id
    int,  # span id
    int,  # parent span id, 0: a root
    str,  # name
    int,  # kind
    int,  # start, epoch ns
    int,  # end, epoch ns
    Attributes | None,
    int,  # status code
    str | None,  # status message
    Sequence[Event] | None,
    str | None,  # tracestate
    int,  # flags
]

GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
HTTP_TRACES_PATH = "/v1/traces"
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318/v1/traces"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"

# Bounds.
MAX_RESPONSE_BYTES = 64 * 1024  # an export's answer (a partial-success message at most)
MAX_KEY_CACHE = 512  # attribute keys and span names whose encoding is kept
MAX_PAIR_CACHE = 2048  # encoded attributes kept by (key, value)
# Spans encoded between two hand-backs of the GIL (~4 us each: a slice holds it ~0.5 ms). Each
# hand-back costs both threads a switch, so not after every span.
_SLICE_SPANS = 128
_YIELD_S = 0.0001
_FIRST_RETRY_S = 0.5
_DROP_LOG_EVERY_S = 60.0

_U64 = (1 << 64) - 1
_BYTE = tuple(bytes((i,)) for i in range(256))
_DOUBLE = struct.Struct("<d")
_TIMES = struct.Struct("<BQBQ")  # start (field 7) and end (field 8), both fixed64
_FIXED32 = struct.Struct("<I")
_EVENT_TIME = struct.Struct("<BQ")  # Event.time_unix_nano, field 1 fixed64


def _varint(n: int) -> bytes:
    if n < 128:
        return _BYTE[n]
    out = bytearray()
    while n > 127:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    n = len(payload)
    return tag + (_BYTE[n] if n < 128 else _varint(n)) + payload


def _any(value: Any) -> bytes:
    """An AnyValue message."""
    kind = type(value)
    if kind is str:
        # "replace": a lone surrogate must not sink the batch it is in.
        return _field(b"\x0a", value.encode("utf-8", "replace"))
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        return b"\x18" + _varint(value & _U64)  # int64: negative as 10-byte two's complement
    if kind is float:
        return b"\x21" + _DOUBLE.pack(value)
    if kind is tuple or kind is list:
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any(v)) for v in value]))
    if kind is bytes:
        return _field(b"\x3a", value)
    # Subclasses (an enum that is a str or an int) and anything else, by what they are.
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(int(value) & _U64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(float(value))
    return _field(b"\x0a", str(value).encode("utf-8", "replace"))


class Encoder:
    """OTLP protobuf bytes from span records; one per export thread (its caches are its own,
    unlocked)."""

    def __init__(
        self, resource: Attributes, scope_name: str, scope_version: str | None = None
    ) -> None:
        self._keys: dict[str, bytes] = {}
        self._names: dict[str, bytes] = {}
        # Most attributes repeat from span to span (the model, the replica, the outcome, a
        # stream flag, small counts): their whole encoded entry is kept, keyed by the pair.
        # Unique values (a request id, a token count) fill it up; it is then emptied.
        self._pairs: dict[tuple[str, type, Any], bytes] = {}
        # ResourceSpans.resource (field 1): Resource.attributes (field 1) of KeyValues.
        resource_body = b"".join([_field(b"\x0a", self._kv(k, v)) for k, v in resource.items()])
        self._resource = _field(b"\x0a", resource_body)
        scope = _field(b"\x0a", scope_name.encode())
        if scope_version:
            scope += _field(b"\x12", scope_version.encode())
        self._scope = _field(b"\x0a", scope)  # ScopeSpans.scope (field 1)

    def _key(self, key: str) -> bytes:
        encoded = self._keys.get(key)
        if encoded is None:
            encoded = _field(b"\x0a", key.encode())  # KeyValue.key (field 1)
            if len(self._keys) < MAX_KEY_CACHE:
                self._keys[key] = encoded
        return encoded

    def _kv(self, key: str, value: Any) -> bytes:
        """A KeyValue message."""
        return self._key(key) + _field(b"\x12", _any(value))

    def _span_attributes(self, attributes: Attributes) -> list[bytes]:
        """Span.attributes (field 9) entries."""
        pairs = self._pairs
        out = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is float or kind is list:  # a measurement (never the same twice); unhashable
                out.append(_field(b"\x4a", self._kv(key, value)))
                continue
            if value is None:
                continue
            # The type too: True and 1 are equal keys of a dict, not the same attribute.
            cached = (key, kind, value)
            try:
                encoded = pairs.get(cached)
            except TypeError:  # a tuple holding a list: not kept
                out.append(_field(b"\x4a", self._kv(key, value)))
                continue
            if encoded is None:
                encoded = _field(b"\x4a", self._kv(key, value))
                if len(pairs) >= MAX_PAIR_CACHE:
                    pairs.clear()
                pairs[cached] = encoded
            out.append(encoded)
        return out

    def _attributes(self, tag: bytes, attributes: Attributes) -> list[bytes]:
        return [_field(tag, self._kv(k, v)) for k, v in attributes.items() if v is not None]

    def span(self, record: SpanRecord) -> bytes:
        """One span as a ScopeSpans.spans entry (field 2: tag, length, Span message)."""
        (
            trace_id, span_id, parent_id, name, kind, start_ns, end_ns,
            attributes, status, message, events, trace_state, flags,
        ) = record  # fmt: skip
        parts = [b"\x0a\x10", trace_id.to_bytes(16, "big"), b"\x12\x08", span_id.to_bytes(8, "big")]
        if trace_state:
            parts.append(_field(b"\x1a", trace_state.encode()))
        if parent_id:
            parts += (b"\x22\x08", parent_id.to_bytes(8, "big"))
        encoded_name = self._names.get(name)
        if encoded_name is None:
            encoded_name = _field(b"\x2a", name.encode())
            if len(self._names) < MAX_KEY_CACHE:
                self._names[name] = encoded_name
        parts.append(encoded_name)
        parts.append(b"\x30" + _BYTE[kind & 0x7F])
        parts.append(_TIMES.pack(0x39, start_ns, 0x41, max(end_ns, start_ns)))
        if attributes:
            parts += self._span_attributes(attributes)
        if events:
            for event_name, at_ns, event_attributes in events:
                body = _EVENT_TIME.pack(0x09, at_ns) + _field(b"\x12", event_name.encode())
                if event_attributes:
                    body += b"".join(self._attributes(b"\x1a", event_attributes))
                parts.append(_field(b"\x5a", body))  # Span.events (field 11)
        if status:
            body = _field(b"\x12", message.encode()) if message else b""
            parts.append(_field(b"\x7a", body + b"\x18" + _BYTE[status]))  # field 15
        parts.append(b"\x85\x01" + _FIXED32.pack(flags))  # Span.flags (field 16, fixed32)
        return _field(b"\x12", b"".join(parts))

    def request(self, spans: Sequence[bytes]) -> bytes:
        """An ExportTraceServiceRequest of spans already encoded by `span`: one resource, one
        instrumentation scope."""
        scope_spans = _field(b"\x12", self._scope + b"".join(spans))
        return _field(b"\x0a", self._resource + scope_spans)


# -- configuration -----------------------------------------------------------------------------


def _setting(environ: Mapping[str, str], name: str) -> str | None:
    """OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>; None when neither."""
    value = environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or environ.get(
        f"OTEL_EXPORTER_OTLP_{name}"
    )
    value = value.strip() if value else None
    return value or None


def parse_headers(text: str | None) -> dict[str, str]:
    """`k=v,k2=v2` (the values URL-encoded) as lower-cased names; malformed pairs are skipped."""
    headers: dict[str, str] = {}
    for pair in (text or "").split(","):
        name, sep, value = pair.partition("=")
        name = unquote(name).strip().lower()
        if not sep or not name or any(c in name for c in " \t\r\n:"):
            if pair.strip():
                # The name only: the value may be a collector's token.
                said = pair.split("=", 1)[0].split(":", 1)[0].strip()
                log.warning("OTLP header %r is not name=value: ignored", said)
            continue
        headers[name] = unquote(value).strip()
    return headers


def _number(environ: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    return _parse(environ.get(name), name, default, minimum)


def _parse(raw: str | None, name: str, default: float, minimum: float) -> float:
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number: %s used", name, raw, default)
        return default
    if value < minimum:
        log.warning("%s=%r is below %s: %s used", name, raw, minimum, default)
        return default
    return value


@dataclass(frozen=True)
class ExportConfig:
    """Where and how spans go, and the batch bounds (`from_environ` reads the variables)."""

    protocol: str = "http/protobuf"
    endpoint: str = DEFAULT_HTTP_ENDPOINT
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    gzip: bool = False
    insecure: bool | None = None
    certificate: str | None = None
    client_key: str | None = None
    client_certificate: str | None = None
    schedule_delay_s: float = 5.0
    max_queue: int = 2048
    max_batch: int = 512
    export_timeout_s: float = 30.0

    @classmethod
    def from_environ(cls, protocol: str, environ: Mapping[str, str]) -> ExportConfig:
        if protocol == "grpc":
            endpoint = _setting(environ, "ENDPOINT") or DEFAULT_GRPC_ENDPOINT
        else:
            endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
            if not endpoint:
                base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
                endpoint = base.rstrip("/") + HTTP_TRACES_PATH if base else DEFAULT_HTTP_ENDPOINT
        compression = (_setting(environ, "COMPRESSION") or "none").lower()
        if compression not in ("gzip", "none"):
            log.warning("OTLP compression %r is not offered: none used", compression)
        insecure = _setting(environ, "INSECURE")
        max_queue = int(_number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1))
        max_batch = int(_number(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1))
        return cls(
            protocol=protocol,
            endpoint=endpoint,
            headers=parse_headers(_setting(environ, "HEADERS")),
            timeout_s=_parse(_setting(environ, "TIMEOUT"), "OTEL_EXPORTER_OTLP_TIMEOUT", 10, 0.001),
            gzip=compression == "gzip",
            insecure=None if insecure is None else insecure.lower() == "true",
            certificate=_setting(environ, "CERTIFICATE"),
            client_key=_setting(environ, "CLIENT_KEY"),
            client_certificate=_setting(environ, "CLIENT_CERTIFICATE"),
            schedule_delay_s=_number(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000, 1) / 1000,
            max_queue=max_queue,
            max_batch=min(max_batch, max_queue),
            export_timeout_s=_number(environ, "OTEL_BSP_EXPORT_TIMEOUT", 30000, 1) / 1000,
        )


# -- transports --------------------------------------------------------------------------------

OK, RETRY, FAILED = "ok", "retry", "failed"


class Transport(Protocol):
    def send(self, body: bytes, timeout_s: float) -> str:
        """OK, RETRY (worth another try) or FAILED."""
        ...

    def close(self) -> None: ...


class HttpTransport:
    """POSTs the bytes over one kept-alive HTTP/1.1 connection (http.client: no pool needed
    for one sending thread)."""

    RETRYABLE = frozenset({429, 502, 503, 504})

    def __init__(self, config: ExportConfig) -> None:
        parts = urlsplit(config.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"OTLP endpoint {config.endpoint!r} is not an http(s) URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._gzip = config.gzip
        self._headers = {**config.headers, "content-type": "application/x-protobuf"}
        if config.gzip:
            self._headers["content-encoding"] = "gzip"
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            self._ssl = ssl.create_default_context(cafile=config.certificate)
            if config.client_certificate:
                self._ssl.load_cert_chain(config.client_certificate, config.client_key)
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._ssl is not None:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=timeout_s, context=self._ssl
                )
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
        else:
            self._conn.timeout = timeout_s
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout_s)
        return self._conn

    def send(self, body: bytes, timeout_s: float) -> str:
        if self._gzip:
            body = gzip.compress(body, compresslevel=6)
        # A kept-alive connection the collector closed fails at once: one fresh try then.
        for fresh in (self._conn is None, True):
            conn = self._connection(timeout_s)
            try:
                conn.request("POST", self._path, body, self._headers)
                response = conn.getresponse()
                response.read(MAX_RESPONSE_BYTES)
                if not response.isclosed():
                    self.close()  # an answer past the bound: not worth reading on
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self.close()
                if fresh:
                    log.debug("OTLP export over HTTP failed: %s", exc)
                    return RETRY
                continue
            if response.status < 300:
                return OK
            log.debug("OTLP collector answered HTTP %s", response.status)
            return RETRY if response.status in self.RETRYABLE else FAILED
        return RETRY

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class GrpcTransport:
    """TraceService/Export as a generic unary call: the request is our bytes as they are, the
    answer is not decoded (a partial success is the collector's to log)."""

    def __init__(self, config: ExportConfig) -> None:
        import grpc  # only with gRPC export: it loads grpcio's core

        self._grpc = grpc
        parts = urlsplit(config.endpoint)
        target = parts.netloc or config.endpoint
        insecure = config.insecure
        if parts.scheme == "https":
            insecure = False
        elif insecure is None:
            insecure = parts.scheme == "http"
        compression = grpc.Compression.Gzip if config.gzip else None
        if insecure:
            self._channel = grpc.insecure_channel(target, compression=compression)
        else:
            self._channel = grpc.secure_channel(
                target, _grpc_credentials(grpc, config), compression=compression
            )
        self._export: Callable[..., Any] = self._channel.unary_unary(
            GRPC_METHOD, request_serializer=None, response_deserializer=None
        )
        self._metadata = tuple(config.headers.items())
        self._retryable = frozenset(
            {
                grpc.StatusCode.CANCELLED,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                grpc.StatusCode.ABORTED,
                grpc.StatusCode.OUT_OF_RANGE,
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DATA_LOSS,
            }
        )

    def send(self, body: bytes, timeout_s: float) -> str:
        try:
            self._export(body, timeout=timeout_s, metadata=self._metadata or None)
        except self._grpc.RpcError as exc:
            code = exc.code()
            log.debug("OTLP export over gRPC failed: %s", code)
            return RETRY if code in self._retryable else FAILED
        return OK

    def close(self) -> None:
        self._channel.close()


def _grpc_credentials(grpc: Any, config: ExportConfig) -> Any:
    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        with open(path, "rb") as file:
            return file.read()

    return grpc.ssl_channel_credentials(
        root_certificates=read(config.certificate),
        private_key=read(config.client_key),
        certificate_chain=read(config.client_certificate),
    )


def transport_for(config: ExportConfig) -> Transport:
    if config.protocol == "grpc":
        return GrpcTransport(config)
    return HttpTransport(config)


# -- the batch ---------------------------------------------------------------------------------


class BatchExport:
    """A bounded queue of span records, exported by one daemon thread: every
    `schedule_delay_s`, when a batch's worth is waiting, on `force_flush` and on `shutdown`.

    `add` runs on the event loop and is a length check and a deque append (atomic under the
    GIL, so no lock); the thread encodes and sends, giving the GIL back between slices."""

    def __init__(self, config: ExportConfig, encoder: Encoder, transport: Transport) -> None:
        self._config = config
        self._encoder = encoder
        self._transport = transport
        self._queue: deque[SpanRecord] = deque()
        self._max_queue = config.max_queue
        self._max_batch = config.max_batch
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._flush_asked = 0
        self._flushed = 0
        self.dropped = 0
        self._dropped_logged = 0
        self._drop_logged_at = 0.0
        self.exported = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._thread.start()

    def add(self, record: SpanRecord) -> None:
        queue = self._queue
        size = len(queue)
        if size >= self._max_queue:
            self.dropped += 1
            return
        queue.append(record)
        if size + 1 == self._max_batch:
            self._wake.set()

    def force_flush(self, timeout_s: float) -> bool:
        """Blocks until what was queued before the call is sent (True) or `timeout_s`."""
        with self._done:
            self._flush_asked += 1
            ticket = self._flush_asked
            self._wake.set()
            return self._done.wait_for(lambda: self._flushed >= ticket, timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Blocks: sends what is queued, then stops the thread and closes the transport."""
        if not self._stop.is_set():
            self._stop.set()
            self._wake.set()
            self._thread.join(self._config.export_timeout_s if timeout_s is None else timeout_s)
        if not self._thread.is_alive():
            # Else the thread closes it as it stops: one user of the transport at a time.
            self._transport.close()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._config.schedule_delay_s)
            self._wake.clear()
            stopping = self._stop.is_set()
            with self._done:
                asked = self._flush_asked
            try:
                self._drain()
            except Exception:  # a bug here must not end export for the process's life
                log.exception("OTLP export failed")
            with self._done:
                self._flushed = asked
                self._done.notify_all()
            self._log_drops()
            if stopping:
                self._transport.close()
                return

    def _drain(self) -> None:
        queue = self._queue
        encode = self._encoder.span
        while queue:
            count = min(len(queue), self._max_batch)
            spans: list[bytes] = []
            for i in range(count):
                spans.append(encode(queue.popleft()))
                if i % _SLICE_SPANS == _SLICE_SPANS - 1:
                    # Let the event loop in: a waiting thread gets the GIL only when this one
                    # sleeps or after the 5 ms switch interval.
                    time.sleep(_YIELD_S)
            self._send(self._encoder.request(spans), count)

    def _send(self, body: bytes, count: int) -> None:
        deadline = time.monotonic() + self._config.export_timeout_s
        wait = _FIRST_RETRY_S
        while True:
            left = deadline - time.monotonic()
            outcome = self._transport.send(body, max(0.001, min(self._config.timeout_s, left)))
            if outcome == OK:
                self.exported += count
                return
            left = deadline - time.monotonic()
            if outcome == FAILED or left <= wait or self._stop.is_set():
                self.failed += count
                log.warning("OTLP export of %d spans failed (%s)", count, outcome)
                return
            self._stop.wait(wait)  # a shutdown cuts the wait short
            wait *= 2

    def _log_drops(self) -> None:
        now = time.monotonic()
        if self.dropped > self._dropped_logged and now - self._drop_logged_at >= _DROP_LOG_EVERY_S:
            log.warning(
                "OTLP export queue full (%d spans): %d spans dropped so far",
                self._max_queue,
                self.dropped,
            )
            self._dropped_logged, self._drop_logged_at = self.dropped, now
