"""EngineClient.count_prompt_tokens: POST /tokenize, its answer, and each failure's mapping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from engine.sim.app import build_app
from engine.sim.profile import load_profile
from engine.sim.settings import SimSettings
from gateway.errors import (
    EngineUnreachableError,
    GatewayError,
    InvalidRequestError,
    NoReplicaError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.routing.replica import Replica
from gateway.settings import UpstreamSettings
from gateway.upstream.client import EngineClient

REPLICA = Replica.from_url("http://engine-a:30000")
PROMPT = "[gMASK]<sop><|user|>héllo 你好 🙂<|assistant|><think>"

Handler = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


@asynccontextmanager
async def engine_client(handler: Handler, **settings: Any) -> AsyncIterator[EngineClient]:
    client = EngineClient(UpstreamSettings(**settings), transport=httpx.MockTransport(handler))
    try:
        yield client
    finally:
        await client.aclose()


async def count(handler: Handler, **settings: Any) -> int:
    async with engine_client(handler, **settings) as client:
        return await client.count_prompt_tokens(REPLICA, PROMPT)


def answering(status: int, body: bytes) -> Handler:
    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    return handle


def raising(exc: type[httpx.TransportError]) -> Handler:
    async def handle(request: httpx.Request) -> httpx.Response:
        raise exc("injected", request=request)

    return handle


async def test_posts_the_prompt_to_tokenize_and_reads_count() -> None:
    seen: list[httpx.Request] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        # SGLang's TokenizeResponse; count wins over the tokens list.
        return httpx.Response(200, json={"tokens": [1, 2], "count": 7, "max_model_len": 4096})

    assert await count(handle) == 7
    [request] = seen
    assert request.method == "POST"
    assert str(request.url) == "http://engine-a:30000/tokenize"
    # SGLang refuses any other content type (validate_json_request).
    assert request.headers["content-type"] == "application/json"
    # add_special_tokens as /generate tokenizes a text prompt: the tokenizer's default, true.
    assert orjson.loads(request.content) == {"prompt": PROMPT, "add_special_tokens": True}


async def test_without_count_the_tokens_are_counted() -> None:
    assert await count(answering(200, b'{"tokens": [5, 6, 7], "max_model_len": 9}')) == 3


async def test_against_the_simulator_count_is_generates_prompt_tokens() -> None:
    app = build_app(SimSettings(profile=load_profile(), time_scale=0.001))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        client = EngineClient(UpstreamSettings(), transport=transport)
        try:
            counted = await client.count_prompt_tokens(REPLICA, PROMPT)
            made = await client.control.post(
                REPLICA.base_url + "/generate",
                json={"text": PROMPT, "sampling_params": {"max_new_tokens": 1}},
            )
        finally:
            await client.aclose()
    assert made.status_code == 200, made.text
    assert counted == made.json()["meta_info"]["prompt_tokens"] > 0


FAILURES: list[tuple[str, Handler, type[GatewayError]]] = [
    ("refused", raising(httpx.ConnectError), EngineUnreachableError),
    ("connect timeout", raising(httpx.ConnectTimeout), EngineUnreachableError),
    ("read timeout", raising(httpx.ReadTimeout), UpstreamTimeoutError),
    ("pool timeout", raising(httpx.PoolTimeout), NoReplicaError),
    ("connection dropped", raising(httpx.RemoteProtocolError), UpstreamError),
    # SGLang's ErrorResponse is flat: {"object": "error", "message", "type", "param", "code"}.
    (
        "engine 400",
        answering(400, b'{"object": "error", "message": "bad prompt", "type": "x", "code": 400}'),
        InvalidRequestError,
    ),
    ("engine 422", answering(422, b'{"detail": "nope"}'), InvalidRequestError),
    ("engine 500", answering(500, b'{"object": "error", "message": "boom"}'), UpstreamError),
    ("no /tokenize", answering(404, b'{"detail": "Not Found"}'), UpstreamError),
    ("engine starting", answering(503, b""), NoReplicaError),
    ("not json", answering(200, b"<html>"), UpstreamError),
    ("not an object", answering(200, b"[1, 2]"), UpstreamError),
    ("no count", answering(200, b'{"max_model_len": 9}'), UpstreamError),
    ("count a string", answering(200, b'{"count": "7"}'), UpstreamError),
    ("count a list", answering(200, b'{"count": [7], "tokens": [[1]]}'), UpstreamError),
    ("count negative", answering(200, b'{"count": -1}'), UpstreamError),
    ("count a bool", answering(200, b'{"count": true}'), UpstreamError),
]


@pytest.mark.parametrize(("case", "handler", "error"), FAILURES, ids=[c for c, _, _ in FAILURES])
async def test_failures_map_to_gateway_errors(
    case: str, handler: Handler, error: type[GatewayError]
) -> None:
    with pytest.raises(error) as caught:
        await count(handler)
    # Subclasses would hide a wrong mapping (EngineUnreachableError is a NoReplicaError).
    assert type(caught.value) is error, (case, caught.value)


async def test_engine_message_reaches_the_client() -> None:
    body = b'{"object": "error", "message": "prompt too long", "type": "x", "code": 400}'
    with pytest.raises(InvalidRequestError, match="prompt too long"):
        await count(answering(400, body))


async def test_a_slow_engine_times_out_within_the_setting() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(10)
        return httpx.Response(200, json={"count": 1})

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(UpstreamTimeoutError, match=r"upstream\.tokenize_timeout_s") as caught:
        await count(slow, tokenize_timeout_s=0.05)
    assert caught.value.code == "tokenize_timeout"
    assert loop.time() - started < 5


async def test_an_oversized_answer_is_refused() -> None:
    body = orjson.dumps({"tokens": list(range(1000)), "count": 1000})
    with pytest.raises(UpstreamError, match=r"upstream\.max_tokenize_body_bytes"):
        await count(answering(200, body), max_tokenize_body_bytes=100)
