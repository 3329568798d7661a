"""The real sglang-kt server's spans continue the gateway's trace: a request through the gateway
gives one trace in which the engine's request span is a child of the gateway's engine-call span
(the traceparent header of /generate), and the engine's stages hang under it, at the trace level
the launcher sets (2: no span per decode step).

Both processes export to one OTLP receiver in this test (tests/support/otlp_receiver.py): the
engine over gRPC (sglang-kt's default), the gateway over HTTP. The launcher turns the engine's
tracing on because the standard OTLP variables are set (engine profile `tracing.enabled: auto`).

Needs the engine virtualenv with sglang-kt's `tracing` extra (python -m scripts.engine_cpu
--prepare-only installs it); runs under make test-engine only.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from bench.procs import Proc, start_gateway
from tests.support.engines import EngineProc, selected_kinds, spawn_real_engine, wait_healthy
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        "sglang" not in selected_kinds(), reason="the real engine runs under make test-engine"
    ),
]

MODEL = "glm-5.3-flash"
ENGINE_CALL = f"chat {MODEL}"
SERVER_SPAN = "POST /v1/chat/completions"
# sglang-kt 0.7.2's stage spans at trace level 1 and 2 (sglang/srt/observability/
# req_time_stats.py), and the one at level 3 the launcher leaves out by default.
ENGINE_STAGES = {"tokenize", "prefill_waiting", "prefill_forward"}
PER_DECODE_STEP = "decode_loop"


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[OtlpReceiver, Proc]]:
    with OtlpReceiver() as receiver, pytest.MonkeyPatch.context() as env:
        # The engine's launcher reads these from its environment (spawn_real_engine passes
        # this process's own).
        for name, value in receiver.env("grpc").items():
            env.setenv(name, value)
        engine: EngineProc = spawn_real_engine()
        try:
            wait_healthy(engine)
            gateway = start_gateway([engine.url], env=receiver.env("http/protobuf"))
            try:
                yield receiver, gateway
            finally:
                gateway.stop()
        finally:
            engine.stop()


def _descendants(spans: list[ReceivedSpan], root: ReceivedSpan) -> list[ReceivedSpan]:
    children: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    found, todo = [], [root]
    while todo:
        span = todo.pop()
        for child in children.get(span.span_id, []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "one-shot"])
def test_the_engines_spans_are_children_of_the_gateways_engine_call(
    traced: tuple[OtlpReceiver, Proc], stream: bool
) -> None:
    receiver, gateway = traced
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", timeout=300)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hi."}],
        max_tokens=8,
        stream=stream,
    )
    trace_id = raw.headers["x-flashbox-trace-id"]
    answer = raw.parse()
    if stream:
        for _ in answer:
            pass

    def engine_done(spans: list[ReceivedSpan]) -> bool:
        # The engine's request span ends (and is exported) last, when the request finishes.
        mine = [s for s in spans if s.trace_id == trace_id]
        engine = [s for s in mine if s.service == "sglang"]
        names = {s.name for s in engine}
        ended = any("rid" in s.attributes for s in engine)
        gateway = {SERVER_SPAN, ENGINE_CALL} <= {s.name for s in mine}
        # A parent ends after its children: until it is exported, its children dangle.
        ids = {s.span_id for s in mine}
        whole = all(s.parent_span_id in ids for s in engine)
        return gateway and ended and whole and names >= ENGINE_STAGES

    spans = [s for s in receiver.store.wait_for(engine_done, 60.0) if s.trace_id == trace_id]
    (server,) = [s for s in spans if s.name == SERVER_SPAN]
    (call,) = [s for s in spans if s.name == ENGINE_CALL]
    assert call.parent_span_id == server.span_id
    tree = [(s.service, s.name, s.span_id, s.parent_span_id) for s in spans]
    # Every engine span of the trace hangs under the engine-call span: one tree from the
    # client's request down (FastAPI's own request spans too: the engine's FastAPI traces
    # through the provider sglang-kt installs, under the same traceparent).
    engine_spans = [s for s in spans if s.service == "sglang"]
    under_call = {s.span_id for s in _descendants(spans, call)}
    assert {s.span_id for s in engine_spans} <= under_call, tree
    # The engine's request span (sglang-kt's root for the request, named by its rid) is a
    # child of the engine-call span, and its stages hang under it.
    (request,) = [s for s in engine_spans if "rid" in s.attributes]
    assert request.parent_span_id == call.span_id, tree
    assert request.attributes["rid"] == server.attributes["flashbox.request_id"]
    below = _descendants(spans, request)
    names = {s.name for s in below}
    assert names >= ENGINE_STAGES
    assert PER_DECODE_STEP not in names
    assert all(call.start_ns <= s.start_ns for s in engine_spans)
