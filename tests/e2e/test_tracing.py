"""Tracing through real processes: the gateway process, turned on by the standard OTLP variables
alone, exports each request's trace to a receiver in this test (gRPC); the official openai and
anthropic clients read the trace id from the response header; the trace is found by that id in
the receiver's Jaeger query API (as an operator pastes it into Jaeger); the access log line of
the request carries the same id; the gateway is idle afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from tests.e2e.conftest import MODEL, client_for, sim_and_gateway
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.procs import Proc

SERVER = {
    "openai": "POST /v1/chat/completions",
    "anthropic": "POST /v1/messages",
    "responses": "POST /v1/responses",
}
ENGINE_CALL = f"chat {MODEL}"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def traced(receiver: OtlpReceiver) -> Iterator[Proc]:
    env = {**receiver.env("grpc"), "FLASHBOX_OBSERVABILITY__ACCESS_LOG": "true"}
    for _sim, gateway in sim_and_gateway(env=env):
        yield gateway


def _trace(receiver: OtlpReceiver, gateway: Proc, trace_id: str, face: str) -> None:
    spans = receiver.wait_for_trace(trace_id, {SERVER[face], ENGINE_CALL, "render", "route"})
    (server,) = [s for s in spans if s.name == SERVER[face]]
    assert server.service == "flashbox-gateway"
    assert server.attributes["http.response.status_code"] == 200
    (call,) = [s for s in spans if s.name == ENGINE_CALL]
    assert call.parent_span_id == server.span_id
    assert call.attributes["gen_ai.usage.output_tokens"] > 0
    # Found by the id the client got, through the query API an operator's UI uses.
    answer = httpx.get(f"http://{receiver.host}:{receiver.http_port}/api/traces/{trace_id}")
    assert answer.status_code == 200
    (found,) = answer.json()["data"]
    assert {span["operationName"] for span in found["spans"]} >= {SERVER[face], ENGINE_CALL}


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
def test_openai_client_gets_the_trace_id_of_its_request(
    receiver: OtlpReceiver, traced: Proc, stream: bool
) -> None:
    with client_for(traced) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=16,
            stream=stream,
        )
        answer = raw.parse()
        if stream:
            for _ in answer:
                pass
    trace_id = raw.headers["x-flashbox-trace-id"]
    _trace(receiver, traced, trace_id, "openai")
    # The request's access log line carries it (gateway.observability.logging).
    line = f'"POST /v1/chat/completions HTTP/1.1" 200 trace_id={trace_id}'
    assert line in traced.log()


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
def test_anthropic_client_gets_the_trace_id_of_its_request(
    receiver: OtlpReceiver, traced: Proc, stream: bool
) -> None:
    client = anthropic.Anthropic(base_url=traced.url, api_key="unused", max_retries=0)
    with client:
        if stream:
            with client.messages.with_streaming_response.create(
                model=MODEL,
                max_tokens=16,
                messages=[{"role": "user", "content": "hello"}],
                stream=True,
            ) as response:
                trace_id = response.headers["x-flashbox-trace-id"]
                for _ in response.iter_lines():
                    pass
        else:
            raw = client.messages.with_raw_response.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hello"}]
            )
            trace_id = raw.headers["x-flashbox-trace-id"]
            raw.parse()
    _trace(receiver, traced, trace_id, "anthropic")


def test_responses_continue_the_callers_trace(receiver: OtlpReceiver, traced: Proc) -> None:
    caller = "0af7651916cd43dd8448eb211c80319c"
    parent = "b7ad6b7169203331"
    with client_for(traced) as client:
        raw = client.responses.with_raw_response.create(
            model=MODEL,
            input="hello",
            max_output_tokens=16,
            extra_headers={"traceparent": f"00-{caller}-{parent}-01"},
        )
        raw.parse()
    assert raw.headers["x-flashbox-trace-id"] == caller
    _trace(receiver, traced, caller, "responses")
    (server,) = [s for s in receiver.spans(caller) if s.name == SERVER["responses"]]
    assert server.parent_span_id == parent
