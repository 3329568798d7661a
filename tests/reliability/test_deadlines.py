"""EngineStream's first-token and idle deadlines, on an in-process response body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.errors import UpstreamTimeoutError
from gateway.upstream.stream import EngineStream

EVENT = b'data: {"text": "hi", "meta_info": {"completion_tokens": 1}}\n\n'
DONE = b"data: [DONE]\n\n"


class Body:
    """Sends `pieces`, sleeping `gaps[i]` before piece i."""

    status_code = 200

    def __init__(self, pieces: list[bytes], gaps: list[float]) -> None:
        self.pieces, self.gaps = pieces, gaps

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece, gap in zip(self.pieces, self.gaps, strict=True):
            await asyncio.sleep(gap)
            yield piece

    async def aclose(self) -> None:
        return None


def stream(body: Body, first: float, idle: float) -> EngineStream:
    loop = asyncio.get_running_loop()
    return EngineStream(body, 1 << 20, first_deadline=loop.time() + first, idle_s=idle)


async def drain(engine: EngineStream, consumer_delay: float = 0.0) -> int:
    count = 0
    async for _ in engine.events():
        count += 1
        await asyncio.sleep(consumer_delay)
    return count


async def test_no_first_token() -> None:
    with pytest.raises(UpstreamTimeoutError) as info:
        await drain(stream(Body([EVENT, DONE], [5.0, 0.0]), first=0.1, idle=5.0))
    assert info.value.code == "first_token_timeout"


async def test_silence_mid_stream() -> None:
    with pytest.raises(UpstreamTimeoutError) as info:
        await drain(stream(Body([EVENT, EVENT, DONE], [0.0, 5.0, 0.0]), first=5.0, idle=0.1))
    assert info.value.code == "stream_idle_timeout"
    assert info.value.status_code == 504


async def test_a_slow_consumer_is_not_engine_silence() -> None:
    # The consumer takes longer per event than the idle deadline; the engine is prompt.
    body = Body([EVENT, EVENT, EVENT, DONE], [0.0, 0.0, 0.0, 0.0])
    assert await drain(stream(body, first=5.0, idle=0.05), consumer_delay=0.1) >= 1


async def test_within_deadlines_completes() -> None:
    body = Body([EVENT, EVENT, DONE], [0.05, 0.05, 0.05])
    assert await drain(stream(body, first=5.0, idle=5.0)) >= 1
