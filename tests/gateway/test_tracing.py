"""OpenTelemetry traces (gateway/observability/tracing.py, gateway/core/traced.py), exported
over real OTLP (gRPC and HTTP protobuf) to a receiver in this process: one trace per request on
every face, streamed and not, with the gateway's stages as child spans and GenAI attributes;
an incoming traceparent continued; the engine given a traceparent naming the engine-call span;
the trace id in the response header, on the TTFT and e2e exemplars and on log lines; nothing
built when tracing is off."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from opentelemetry import trace as otel_trace

from gateway.app import GatewayApp, create_app
from gateway.observability.logging import RedactingFilter
from gateway.observability.tracing import Tracing, protocol, wanted
from gateway.ratelimit import key_id
from gateway.settings import Settings
from tests.gateway.conftest import ENGINE, MODEL
from tests.gateway.fake_engine import FakeEngine, Script
from tests.gateway.test_cancel_everywhere import FACES, exchange, running_app
from tests.support.idle import assert_idle
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan

KEY = "sk-trace-test-key"
HELLO = [{"role": "user", "content": "hi"}]
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": MODEL, "messages": HELLO},
    "/v1/messages": {"model": MODEL, "max_tokens": 16, "messages": HELLO},
    "/v1/responses": {"model": MODEL, "input": "hi"},
}
STAGES = {"admission", "render", "route", "fair_queue", "relay"}
ENGINE_SPAN = f"chat {MODEL}"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_TRACES_SAMPLER",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
)


class TracedEngine(FakeEngine):
    """The fake engine, noting the traceparent header of each /generate."""

    def __init__(self) -> None:
        super().__init__()
        self.traceparents: list[str | None] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            self.traceparents.append(request.headers.get("traceparent"))
        return await super().handle(request)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@asynccontextmanager
async def traced_gateway(
    engine: FakeEngine, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayApp]]:
    app = create_app(Settings(engines=[ENGINE], **overrides), transport=engine.transport())
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client,
    ):
        yield client, app
        await assert_idle(app.state.flashbox)


def flush(app: GatewayApp) -> None:
    tracing: Tracing = app.state.tracing
    assert tracing.force_flush(10_000)


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.name: span for span in spans}


def sampled_child_of(traceparents: list[str | None], trace_id: str, span_id: str) -> bool:
    """One /generate, whose traceparent names `span_id` of `trace_id`, sampled (the flags'
    low bit; the SDK also sets W3C level 2's random-trace-id bit)."""
    (header,) = traceparents
    assert header is not None
    version, trace, parent, flags = header.split("-")
    return (version, trace, parent) == ("00", trace_id, span_id) and int(flags, 16) & 1 == 1


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
@pytest.mark.parametrize("path", list(BODIES))
async def test_each_face_gives_one_trace_with_the_gateways_spans(
    receiver: OtlpReceiver, otel_env: pytest.MonkeyPatch, path: str, stream: bool
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.http_endpoint)
    otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    engine = TracedEngine()
    async with traced_gateway(engine, api_keys=[KEY]) as (client, app):
        body = {**BODIES[path], "stream": stream}
        response = await client.post(path, json=body, headers={"authorization": f"Bearer {KEY}"})
        assert response.status_code == 200
        flush(app)
    trace_id = response.headers["x-flashbox-trace-id"]
    assert len(trace_id) == 32
    server_name = f"POST {path}"
    spans = receiver.wait_for_trace(trace_id, {server_name, ENGINE_SPAN, *STAGES})
    named = by_name(spans)
    assert len(spans) == len(named), "one span per stage"
    server = named[server_name]
    assert server.kind == "server"
    assert server.parent_span_id == ""  # no traceparent came in: a new trace
    assert server.service == "flashbox-gateway"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["flashbox.request_id"] == response.headers["x-request-id"]
    assert server.attributes["flashbox.key_id"] == key_id(KEY)
    assert server.attributes["gen_ai.operation.name"] == "chat"
    assert server.attributes["gen_ai.request.model"] == MODEL
    assert server.attributes["gen_ai.usage.input_tokens"] == 12
    assert server.attributes["flashbox.outcome"] == "ok"
    for name in STAGES | {ENGINE_SPAN}:
        assert named[name].parent_span_id == server.span_id, name
        assert server.start_ns <= named[name].start_ns <= named[name].end_ns <= server.end_ns
    call = named[ENGINE_SPAN]
    assert call.kind == "client"
    assert call.attributes["gen_ai.provider.name"] == "sglang"
    assert call.attributes["gen_ai.request.stream"] is stream
    assert call.attributes["gen_ai.usage.input_tokens"] == 12
    assert call.attributes["gen_ai.usage.cache_read.input_tokens"] == 5
    assert call.attributes["gen_ai.usage.output_tokens"] > 0
    assert call.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert call.attributes["gen_ai.response.time_to_first_chunk"] >= 0
    assert call.attributes["flashbox.engine.prefill_s"] >= 0
    assert call.attributes["flashbox.ttft_s"] > 0
    assert call.attributes["flashbox.replica"] == "engine-a:30000"
    assert call.attributes["flashbox.checkpoint.outcome"] == "cached"
    assert call.attributes["server.address"] == "engine-a"
    route = named["route"]
    assert route.attributes["flashbox.replica"] == "engine-a:30000"
    assert route.attributes["flashbox.affinity"]
    assert route.attributes["flashbox.lineage.kind"] == "main"
    assert named["admission"].attributes["flashbox.admission.outcome"] == "admitted"
    # The engine's spans hang under the engine-call span.
    assert sampled_child_of(engine.traceparents, trace_id, call.span_id)
    # Never the key, never the prompt or the answer.
    for span in spans:
        for value in span.attributes.values():
            assert KEY not in str(value)
            assert "Hello world" not in str(value)


async def test_grpc_export_and_an_incoming_traceparent_is_continued(
    receiver: OtlpReceiver, otel_env: pytest.MonkeyPatch
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.grpc_endpoint)
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    otel_env.setenv("OTEL_SERVICE_NAME", "gw-under-test")
    engine = TracedEngine()
    incoming = f"00-{TRACE_ID}-{PARENT_SPAN}-01"
    async with traced_gateway(engine) as (client, app):
        response = await client.post(
            "/v1/chat/completions",
            json=BODIES["/v1/chat/completions"],
            headers={"traceparent": incoming},
        )
        assert response.status_code == 200
        flush(app)
    assert response.headers["x-flashbox-trace-id"] == TRACE_ID
    spans = receiver.wait_for_trace(TRACE_ID, {"POST /v1/chat/completions", ENGINE_SPAN})
    named = by_name(spans)
    server = named["POST /v1/chat/completions"]
    assert server.parent_span_id == PARENT_SPAN
    assert server.service == "gw-under-test"
    assert {span.via for span in spans} == {"grpc"}
    assert sampled_child_of(engine.traceparents, TRACE_ID, named[ENGINE_SPAN].span_id)


async def test_a_sampled_out_request_propagates_but_exports_nothing(
    receiver: OtlpReceiver, otel_env: pytest.MonkeyPatch
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.http_endpoint)
    otel_env.setenv("OTEL_TRACES_SAMPLER", "always_off")
    engine = TracedEngine()
    async with traced_gateway(engine) as (client, app):
        response = await client.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])
        assert response.status_code == 200
        flush(app)
    assert "x-flashbox-trace-id" not in response.headers
    (parent,) = engine.traceparents
    # The sampled flag off (the low bit), so the engine drops its spans too.
    assert parent is not None
    assert int(parent.split("-")[3], 16) & 1 == 0
    assert receiver.spans(parent.split("-")[1]) == []


async def test_off_by_default_nothing_is_built(otel_env: pytest.MonkeyPatch) -> None:
    engine = TracedEngine()
    async with traced_gateway(engine) as (client, app):
        assert app.state.tracing is None
        response = await client.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])
        assert response.status_code == 200
    assert "x-flashbox-trace-id" not in response.headers
    assert engine.traceparents == [None]


def test_what_turns_tracing_on() -> None:
    assert not wanted(False, {})
    assert wanted(True, {})
    assert wanted(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted(False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not wanted(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": " "})
    assert not wanted(True, {"OTEL_SDK_DISABLED": "true"})
    assert not wanted(True, {"OTEL_TRACES_EXPORTER": "none"})
    assert protocol({}) == "http/protobuf"
    assert protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    both = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
    assert protocol(both) == "http/protobuf"
    with pytest.raises(ValueError, match="http/json"):
        protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


async def test_exemplars_carry_the_trace_id_in_openmetrics(
    receiver: OtlpReceiver, otel_env: pytest.MonkeyPatch
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.http_endpoint)
    async with traced_gateway(TracedEngine()) as (client, app):
        response = await client.post(
            "/v1/chat/completions", json={**BODIES["/v1/chat/completions"], "stream": True}
        )
        assert response.status_code == 200
        trace_id = response.headers["x-flashbox-trace-id"]
        scraped = await client.get(
            "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
        )
        plain = await client.get("/metrics")
        flush(app)
    assert scraped.headers["content-type"].startswith("application/openmetrics-text")
    exemplar = f'# {{trace_id="{trace_id}"}}'
    lines = [line for line in scraped.text.splitlines() if exemplar in line]
    assert any(line.startswith("flashbox_ttft_seconds_bucket") for line in lines)
    assert any(line.startswith("flashbox_e2e_latency_seconds_bucket") for line in lines)
    # The classic text format has no exemplars: what it always was.
    assert plain.headers["content-type"].startswith("text/plain")
    assert trace_id not in plain.text


async def test_spans_end_when_the_engine_fails(
    receiver: OtlpReceiver, otel_env: pytest.MonkeyPatch
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.http_endpoint)
    engine = TracedEngine()
    engine.script = Script(status=500)
    async with traced_gateway(engine) as (client, app):
        failed = await client.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])
        assert failed.status_code == 502
        flush(app)
    failed_id = failed.headers["x-flashbox-trace-id"]
    spans = by_name(receiver.wait_for_trace(failed_id, {"POST /v1/chat/completions", ENGINE_SPAN}))
    server = spans["POST /v1/chat/completions"]
    assert server.attributes["http.response.status_code"] == 502
    assert server.status_code == 2  # ERROR
    assert spans[ENGINE_SPAN].status_code == 2
    assert spans[ENGINE_SPAN].attributes["error.type"] == "UpstreamError"


@pytest.mark.parametrize("how", ["disconnect", "cancel"])
@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
async def test_spans_end_when_the_client_leaves_or_the_server_cancels(
    receiver: OtlpReceiver, otel_env: pytest.MonkeyPatch, stream: bool, how: str
) -> None:
    otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.http_endpoint)
    engine = TracedEngine()
    async with running_app(engine) as app:
        state = app.state.flashbox
        # Gone at every loop turn of the request's path, then inside a slow first event.
        for turns in range(0, 60, 3):
            engine.script = Script()
            await exchange(app, *face("chat", stream), turns=turns, how=how)
            await assert_idle(state)
        engine.script = Script(first_event_delay_s=0.3)
        await exchange(app, *face("chat", stream), after_s=0.1, how=how)
        await assert_idle(state)
        flush(app)
    # Every request that reached the engine: its engine span and its server span were ended
    # (only ended spans are exported), with the outcome said.
    sent = [header for header in engine.traceparents if header is not None]
    assert sent
    for header in sent:
        trace_id = header.split("-")[1]
        spans = by_name(
            receiver.wait_for_trace(trace_id, {"POST /v1/chat/completions", ENGINE_SPAN})
        )
        assert spans[ENGINE_SPAN].attributes["flashbox.outcome"] in ("ok", "client_gone")
    last = by_name(receiver.spans(sent[-1].split("-")[1]))
    assert last[ENGINE_SPAN].attributes["flashbox.outcome"] == "client_gone"


def face(name: str, stream: bool) -> tuple[str, dict[str, Any]]:
    path, make = FACES[name]
    return path, make(stream)


def test_a_log_line_written_while_a_traced_request_runs_carries_its_trace_id() -> None:
    redactor = RedactingFilter([KEY], max_chars=4096)
    record = logging.LogRecord(
        "gateway.refused", logging.INFO, __file__, 1, "refused %s", ("x",), None
    )
    span = otel_trace.NonRecordingSpan(
        otel_trace.SpanContext(
            int(TRACE_ID, 16),
            int(PARENT_SPAN, 16),
            is_remote=False,
            trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED),
        )
    )
    with otel_trace.use_span(span):
        assert redactor.filter(record)
    assert record.getMessage() == f"refused x trace_id={TRACE_ID}"
    untraced = logging.LogRecord("gateway", logging.INFO, __file__, 1, "plain", None, None)
    assert redactor.filter(untraced)
    assert untraced.getMessage() == "plain"
