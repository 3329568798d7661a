"""Hop 1 on raw ASGI: reading the body within its bound, its nesting bound, a client that leaves
mid-body, the short middleware stack chat requests take (gateway.app.GatewayApp), and how a
stream ends."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.middleware.cors import CORSMiddleware
from starlette.types import Message

from gateway.admission import AdmissionMiddleware
from gateway.app import create_app
from gateway.errors import ClientDisconnected, PayloadTooLargeError
from gateway.faces.body import _nesting_exceeds, read_body
from gateway.faces.openai_chat.route import serve_chat
from gateway.faces.registry import ENDPOINTS
from gateway.middleware import RequestContextMiddleware
from gateway.settings import Settings
from tests.gateway.conftest import ENGINE, chat_body
from tests.gateway.fake_engine import FakeEngine, Script


def receiver(*messages: Message) -> Any:
    queue = list(messages)

    async def receive() -> Message:
        return queue.pop(0)

    return receive


def part(body: bytes, more: bool) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


def chat_scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }


async def test_a_body_in_one_message() -> None:
    assert await read_body(receiver(part(b"abc", False)), "3", 10) == b"abc"


async def test_a_body_in_several_messages() -> None:
    receive = receiver(part(b"ab", True), part(b"", True), part(b"cd", False))
    assert await read_body(receive, None, 10) == b"abcd"


@pytest.mark.parametrize(
    ("length", "messages"),
    [
        ("11", [part(b"", False)]),  # refused on the declared length, before reading
        (None, [part(b"0123456789x", False)]),
        (None, [part(b"012345", True), part(b"6789x", False)]),  # chunked, no length
    ],
)
async def test_a_body_over_the_bound_is_413(length: str | None, messages: list[Message]) -> None:
    with pytest.raises(PayloadTooLargeError, match="limit of 10 bytes"):
        await read_body(receiver(*messages), length, 10)


async def test_a_client_leaving_mid_body_is_noticed() -> None:
    receive = receiver(part(b"{", True), {"type": "http.disconnect"})
    with pytest.raises(ClientDisconnected):
        await read_body(receive, None, 10)


async def test_a_client_leaving_mid_body_gets_no_answer_and_costs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = FakeEngine()
    app = create_app(Settings(engines=[ENGINE]), transport=engine.transport())
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = chat_scope()
    half = orjson.dumps(chat_body())[:10]
    with caplog.at_level(logging.ERROR):
        async with app.router.lifespan_context(app):
            await app(scope, receiver(part(half, True), {"type": "http.disconnect"}), send)
            state = app.state.flashbox
            assert state.in_flight == 0
            assert not app.state.admission.running  # its slot is back
            labels = {"model": "unknown", "code": "499", "api": "openai"}
            registry = state.metrics.registry
            assert registry.get_sample_value("flashbox_requests_total", labels) == 1
    assert sent == []  # nobody to answer
    assert not engine.generates  # the engine never heard of it
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("cors", [False, True])
def test_chat_requests_take_only_the_gateways_own_middleware(cors: bool) -> None:
    origins = ["https://app.example"] if cors else []
    app = create_app(Settings(engines=[ENGINE], security={"cors_allow_origins": origins}))
    layers: list[type] = []
    chat = next(endpoint for endpoint in ENDPOINTS if endpoint.path == "/v1/chat/completions")
    layer: Any = app._build_stack(chat)
    while layer is not serve_chat:
        layers.append(type(layer))
        layer = layer.app
    expected: list[type] = [RequestContextMiddleware, AdmissionMiddleware]
    assert layers == ([CORSMiddleware, *expected] if cors else expected)


class UvicornLikeChannel:
    """receive/send as uvicorn gives them: the body, then `http.disconnect` once the response
    is complete (uvicorn wakes a pending receive then); each send lets other tasks run once,
    as a send under flow control may."""

    def __init__(self, body: bytes) -> None:
        self.sent: list[Message] = []
        self._body: list[Message] = [part(body, False)]
        self._complete = asyncio.Event()

    async def receive(self) -> Message:
        if self._body:
            return self._body.pop(0)
        await self._complete.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._complete.set()
        await asyncio.sleep(0)


@pytest.mark.parametrize("error_after", [None, 2])
async def test_a_stream_ends_in_the_write_that_carries_done(error_after: int | None) -> None:
    """[DONE] and the end of the response are one ASGI message (one write on the socket): a
    client that reads to the end, as the async openai client does, is done with [DONE]. The
    server's end-of-response disconnect is not taken for a client that left (no abort)."""
    engine = FakeEngine(Script(error_after=error_after))
    app = create_app(Settings(engines=[ENGINE]), transport=engine.transport())
    channel = UvicornLikeChannel(orjson.dumps(chat_body(stream=True)))
    async with app.router.lifespan_context(app):
        await app(chat_scope(), channel.receive, channel.send)
        registry = app.state.flashbox.metrics.registry
        assert not registry.get_sample_value(
            "flashbox_upstream_aborts_total", {"phase": "streaming"}
        )
        assert (
            registry.get_sample_value(
                "flashbox_requests_total",
                {"model": "glm-5.3-flash", "code": "200", "api": "openai"},
            )
            == 1
        )
    assert engine.aborts == []
    sent = channel.sent
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 200
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert all(m["more_body"] for m in bodies[:-1])
    last = bodies[-1]
    assert last["more_body"] is False
    assert last["body"].endswith(b"data: [DONE]\n\n")
    assert (b'"error"' in last["body"]) == (error_after is not None)
    events = b"".join(m["body"] for m in bodies).split(b"\n\n")
    chunks = [orjson.loads(e[6:]) for e in events if e.startswith(b"data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if "id" in c)
    assert content == ("Hello world" if error_after is None else "")


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(child) for child in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(child) for child in value), default=0)
    return 0


_JSON = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=30,
)


@given(_JSON, st.integers(min_value=1, max_value=8))
def test_the_nesting_bound_is_the_containers_depth(value: object, limit: int) -> None:
    assert _nesting_exceeds(value, limit) == (_depth(value) > limit)


def test_the_nesting_bound_at_its_edge() -> None:
    deep: object = {"a": 1}
    for _ in range(63):
        deep = [deep]
    assert not _nesting_exceeds(deep, 64)  # 64 levels: allowed
    assert _nesting_exceeds([deep], 64)
