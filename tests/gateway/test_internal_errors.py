"""A bug met while serving (an unexpected exception) is a 500 in the face's shape, counted as
an error, never reported OK to routing, and the engine request is aborted (#38).

Before: the exception was counted as a 200, routing and the breaker heard OK (a new
conversation was placed), and the engine went on generating for nobody. The bug is injected
into the output parser, a collaborator of the core; the core's handling is under test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.parsers.base import ParsedDelta
from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine, Script


class _Broken:
    """A parser with a bug: it fails on its second piece of output."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._calls = 0

    def feed(self, text: str) -> list[ParsedDelta]:
        self._calls += 1
        if self._calls == 2:
            raise RuntimeError("a bug in the parser")
        parsed: list[ParsedDelta] = self._inner.feed(text)
        return parsed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _break_parser(client: httpx.AsyncClient) -> Callable[[], None]:
    """Breaks the app's parser; returns what mends it."""
    state = client._transport.app.state.flashbox  # type: ignore[attr-defined]
    real = state.parser_factory
    state.parser_factory = lambda **kwargs: _Broken(real(**kwargs))

    def mend() -> None:
        state.parser_factory = real

    return mend


FACE_BODIES = {
    "/v1/chat/completions": lambda stream: chat_body(stream=stream),
    "/v1/messages": lambda stream: {
        "model": MODEL, "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/responses": lambda stream: {"model": MODEL, "input": "hi", "stream": stream},
}  # fmt: skip


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
@pytest.mark.parametrize("path", sorted(FACE_BODIES))
async def test_a_bug_is_a_500_an_error_and_an_abort(path: str, stream: bool) -> None:
    engine = FakeEngine(script=Script(pieces=["Hmm", "</think>", "Hel", "lo", " world"]))
    async with gateway_client(engine) as client:
        mend = _break_parser(client)
        response = await client.post(path, json=FACE_BODIES[path](stream))
        if stream:
            # The headers were out before the bug: the stream ends with the face's error.
            assert response.status_code == 200
            assert "error" in response.text
            assert "Hello world" not in response.text
        else:
            assert response.status_code == 500
            body = response.json()
            error = body["error"]
            assert error["type"] in ("server_error", "api_error")
            assert response.headers["x-request-id"]
        metrics = (await client.get("/metrics")).text
        codes = {
            labels["code"]: value
            for labels, value in _samples(metrics, "flashbox_requests_total")
            if value
        }
        assert codes == {"500": 1.0}
        kinds = {
            labels["kind"] for labels, value in _samples(metrics, "flashbox_errors_total") if value
        }
        assert kinds == {"internal"}
        # The engine stops generating for nobody (an abort is a background call).
        for _ in range(200):
            if engine.aborts:
                break
            await asyncio.sleep(0.01)
        assert engine.aborts == [engine.generates[0]["rid"]]
        # Nothing was placed for the conversation, and the replica is not blamed.
        breaker = _samples(metrics, "flashbox_replica_breaker_open")
        assert all(value == 0 for _, value in breaker)
        # Served again once the bug is gone.
        mend()
        again = await client.post(path, json=FACE_BODIES[path](False))
        assert again.status_code == 200
