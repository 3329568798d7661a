"""Every input and engine failure answers in OpenAI's error shape with the right status."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.conftest import chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine, Script


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "glm-5.3-flash"}, 400, "messages"),
        ({"model": "glm-5.3-flash", "messages": "hi"}, 400, "messages"),
        ({"model": "glm-5.3-flash", "messages": []}, 400, "messages"),
        (chat_body(temperature="hot"), 400, "temperature"),
        (chat_body(n=2), 400, "n"),
        # An over-large one is lowered to the ceiling (tests/gateway/core/test_bounds.py).
        (chat_body(max_tokens=0), 400, "max_tokens"),
        (chat_body(model="gpt-4"), 404, "model"),
        (chat_body(messages=[{"role": "robot", "content": "x"}]), 400, "messages.0.role"),
        (
            chat_body(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
            400,
            "messages.0.content",
        ),
    ],
)
async def test_bad_input(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, param: str
) -> None:
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == status
    error = error_of(response)
    assert error["param"] is not None
    assert error["param"].startswith(param)
    assert "x-request-id" in response.headers


async def test_invalid_json(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


async def test_oversized_body(engine: FakeEngine) -> None:
    async with gateway_client(engine, limits={"max_body_bytes": 1000}) as client:
        body = chat_body(messages=[{"role": "user", "content": "x" * 2000}])
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"


async def test_too_many_messages(engine: FakeEngine) -> None:
    async with gateway_client(engine, limits={"max_messages": 2}) as client:
        body = chat_body(messages=[{"role": "user", "content": "x"}] * 3)
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert error_of(response)["param"] == "messages"


async def test_unknown_route_is_openai_shaped(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/nothing")
    assert response.status_code == 404
    error_of(response)


async def test_engine_unreachable_is_503(engine: FakeEngine) -> None:
    async with gateway_client(engine) as client:
        engine.reachable = False
        first = await client.post("/v1/chat/completions", json=chat_body())
        assert first.status_code == 503
        assert error_of(first)["code"] == "engine_unreachable"
        # The replica is now marked down: the next request is refused without a connection.
        second = await client.post("/v1/chat/completions", json=chat_body())
        assert second.status_code == 503
        assert error_of(second)["code"] == "no_healthy_replica"
        assert (await client.get("/ready")).status_code == 503


async def test_engine_500_is_502(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    engine.script = Script(status=500)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status_code == 502
    assert "boom" in error_of(response)["message"]


async def test_engine_400_is_400(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    engine.script = Script(status=400, error_body=b'{"error": {"message": "too long"}}')
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == 400
    assert "too long" in error_of(response)["message"]


async def test_in_stream_error_event_then_done(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    engine.script = Script(error_after=2)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    last = orjson.loads(events[-2].removeprefix("data: "))
    assert "engine fault" in last["error"]["message"]


TOP_K = "top_k must be -1 (disable) or at least 1, got 0."

# One streamed "hi" through each face.
STREAMED_ON_EVERY_FACE = pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat_body(stream=True)),
        (
            "/v1/messages",
            {
                "model": "glm-5.3-flash",
                "max_tokens": 8,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
        ("/v1/responses", {"model": "glm-5.3-flash", "input": "hi", "stream": True}),
    ],
    ids=["chat", "messages", "responses"],
)


@STREAMED_ON_EVERY_FACE
async def test_a_streamed_refusal_is_the_faces_400_and_not_the_replicas_fault(
    client: httpx.AsyncClient, engine: FakeEngine, path: str, body: dict[str, Any]
) -> None:
    """sglang-kt refuses a streamed request in the stream (200, an error event, [DONE]); the
    client gets its face's 400 with the engine's words, and the replica stays trusted."""
    engine.script = Script(refusal=TOP_K)
    for _ in range(8):  # past the breaker's threshold, were refusals counted
        response = await client.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert TOP_K in error["message"]
        assert error["type"] == "invalid_request_error"
    engine.script = Script()
    served = await client.post(path, json=body)
    assert served.status_code == 200, served.text
    metrics = (await client.get("/metrics")).text
    assert 'flashbox_replica_breaker_open{replica="engine-a:30000"} 0.0' in metrics


@STREAMED_ON_EVERY_FACE
async def test_a_refusal_that_comes_after_the_headers_is_not_the_replicas_fault(
    engine: FakeEngine, path: str, body: dict[str, Any]
) -> None:
    """A busy engine's refusal can come after the gateway stopped waiting for one (or while a
    stream waited for its fair turn): the answer has started, so the face's error event ends
    it, and the replica still stays trusted (#33)."""
    engine.script = Script(refusal=TOP_K, first_event_delay_s=0.05)
    async with gateway_client(engine, upstream={"refusal_wait_s": 0.01}) as client:
        for _ in range(8):  # past the breaker's threshold, were refusals counted
            response = await client.post(path, json=body)
            assert response.status_code == 200, response.text
            assert TOP_K in response.text
        engine.script = Script()
        served = await client.post(path, json=body)
        assert served.status_code == 200
        assert "Hel" in served.text
        metrics = (await client.get("/metrics")).text
        assert 'flashbox_replica_breaker_open{replica="engine-a:30000"} 0.0' in metrics


async def test_engine_faults_open_the_breaker_with_a_log_line_and_a_metric(
    client: httpx.AsyncClient, engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    engine.script = Script(status=500)
    with caplog.at_level(logging.WARNING, logger="gateway.routing.affinity"):
        for _ in range(5):  # the breaker's threshold
            response = await client.post("/v1/chat/completions", json=chat_body())
            assert response.status_code == 502
        metrics = (await client.get("/metrics")).text
        assert 'flashbox_replica_breaker_open{replica="engine-a:30000"} 1.0' in metrics
        refused = await client.post("/v1/chat/completions", json=chat_body())
        assert refused.status_code == 503  # no replica while it is open
    opened = [r.getMessage() for r in caplog.records if "opened" in r.getMessage()]
    assert opened == [
        "circuit breaker for engine-a:30000 opened after 5 failed requests in a row; no requests "
        "there for 10 s, then one trial"
    ]


async def test_a_refusal_after_output_is_an_engine_fault(
    client: httpx.AsyncClient, engine: FakeEngine
) -> None:
    """sglang-kt validates before it generates: an error after tokens is the engine's."""
    engine.script = Script(error_after=1)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status_code == 200
    last = [e for e in response.text.split("\n\n") if e][-2]
    assert orjson.loads(last.removeprefix("data: "))["error"]["type"] != "invalid_request_error"


async def test_engine_abort_is_error_event(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    engine.script = Script(finish={"type": "abort", "message": "out of memory"})
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    events = [e for e in response.text.split("\n\n") if e]
    assert "out of memory" in orjson.loads(events[-2].removeprefix("data: "))["error"]["message"]


async def test_stream_without_done_is_error(client: httpx.AsyncClient, engine: FakeEngine) -> None:
    engine.script = Script(finish=None, send_done=False)
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == 502


async def test_a_prompt_past_the_engines_max_input_is_the_faces_400_before_the_engine() -> None:
    """sglang-kt reports context_length null unless the flag is passed, but max_req_input_len
    always: the gateway learns it, and refuses an over-long prompt in each face's shape without
    sending it (the engine would refuse it, or abort it after it queued)."""
    engine = FakeEngine(server_info={"context_length": None, "max_req_input_len": 200})
    long_text = "word " * 400  # ~500 tokens at 4 bytes each
    async with gateway_client(engine) as client:
        for _ in range(50):  # the first health probe loads /server_info
            if (await client.get("/ready")).status_code == 200:
                break
            await asyncio.sleep(0.02)
        chat = await client.post(
            "/v1/chat/completions",
            json=chat_body(messages=[{"role": "user", "content": long_text}]),
        )
        assert chat.status_code == 400, chat.text
        assert chat.json()["error"]["code"] == "context_length_exceeded"
        messages = await client.post(
            "/v1/messages",
            json={
                "model": "glm-5.3-flash",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": long_text}],
            },
        )
        assert messages.status_code == 400, messages.text
        assert messages.json()["error"]["message"].startswith("prompt is too long: ")
        responses = await client.post(
            "/v1/responses", json={"model": "glm-5.3-flash", "input": long_text, "stream": True}
        )
        assert responses.status_code == 400, responses.text
        assert engine.generates == []
        short = await client.post("/v1/chat/completions", json=chat_body())
        assert short.status_code == 200, short.text
        metrics = (await client.get("/metrics")).text
        assert 'flashbox_replica_breaker_open{replica="engine-a:30000"} 0.0' in metrics
