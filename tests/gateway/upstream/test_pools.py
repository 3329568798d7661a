"""Each kind of engine traffic has its own bounded pool, every pool counts what is in use, and
a failed abort is tried again (#38: "control traffic apart")."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.errors import UpstreamTimeoutError
from gateway.routing.replica import Replica
from gateway.settings import UpstreamSettings
from gateway.upstream.client import EngineClient
from tests.gateway.fake_engine import FakeEngine

REPLICA = Replica(name="a", base_url="http://engine-a:30000")


async def test_a_flood_of_counts_leaves_probes_and_aborts_their_connections() -> None:
    """Before: /tokenize shared the control client with probes and aborts; a key flooding the
    count endpoints got the replica marked down and aborts dropped."""
    engine = FakeEngine(tokenize_delay_s=5.0)
    client = EngineClient(
        UpstreamSettings(count_max_connections=2, control_max_connections=2, abort_timeout_s=1.0),
        transport=engine.transport(),
    )
    counts = [asyncio.create_task(client.count_prompt_tokens(REPLICA, "x" * 100)) for _ in range(6)]
    try:
        for _ in range(500):
            if client.in_use("count") == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert client.in_use("count") == 2  # the pool's bound: the rest wait for it
        assert await client.abort(REPLICA, "r1")
        probe = await client.control.get(REPLICA.base_url + "/health")
        assert probe.status_code == 200
        assert engine.aborts == ["r1"]
        assert client.in_use("control") == 0
    finally:
        for task in counts:
            task.cancel()
        await asyncio.gather(*counts, return_exceptions=True)
    assert client.in_use("count") == 0
    await client.aclose()


async def test_a_failed_abort_is_tried_again() -> None:
    """Before: an abort that failed (the engine busy, a timeout) was logged and dropped."""
    engine = FakeEngine(abort_failures=2)
    client = EngineClient(
        UpstreamSettings(abort_attempts=4, abort_retry_s=0.01), transport=engine.transport()
    )
    assert await client.abort(REPLICA, "r1")
    assert engine.abort_calls == 3
    assert engine.aborts == ["r1"]
    engine.abort_failures = 10
    assert not await client.abort(REPLICA, "r2")  # gives up after its tries, never raises
    assert engine.abort_calls == 3 + 4
    assert client.in_use("control") == 0
    await client.aclose()


async def test_generation_connections_come_back_on_every_exit() -> None:
    """The production wire pool runs beneath an injected transport (gateway.upstream.memory):
    an opened stream holds one connection until it is closed, read or not."""
    engine = FakeEngine()
    client = EngineClient(UpstreamSettings(max_connections=2), transport=engine.transport())
    body = {"text": "hi", "rid": "r", "stream": True, "sampling_params": {"max_new_tokens": 4}}
    stream = await client.open_generate(REPLICA, body)
    assert client.in_use("generation") == 1
    await stream.aclose()  # never read
    assert client.in_use("generation") == 0
    stream = await client.open_generate(REPLICA, body)
    texts = [event.text async for event in stream.events()]
    await stream.aclose()
    assert texts[-1] == "Hmm</think>Hello world"
    assert client.in_use("generation") == 0
    await client.aclose()


async def test_a_first_token_deadline_gives_the_connection_back() -> None:
    engine = FakeEngine()
    engine.script.first_event_delay_s = 5.0
    from gateway.settings import TimeoutSettings

    client = EngineClient(
        UpstreamSettings(max_connections=1),
        transport=engine.transport(),
        deadlines=TimeoutSettings(first_token_s=0.2),
    )
    body = {"text": "hi", "rid": "r", "stream": True, "sampling_params": {"max_new_tokens": 4}}
    stream = await client.open_generate(REPLICA, body)
    with pytest.raises(UpstreamTimeoutError):
        async for _ in stream.events():
            pass
    await stream.aclose()
    assert client.in_use("generation") == 0
    await client.aclose()


def test_the_pools_are_separate_settings() -> None:
    settings = UpstreamSettings()
    assert settings.count_max_connections < settings.max_connections
    assert isinstance(httpx.Limits(max_connections=settings.control_max_connections), httpx.Limits)
