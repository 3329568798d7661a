"""EngineStream on bodies whose events arrive together in one read."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.engine_stream import EngineEvent, EngineStream
from gateway.errors import UpstreamStreamError


class OneReadBody:
    """A response body that hands over everything in one piece (a reader that fell behind)."""

    status_code = 200

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._data

    async def aclose(self) -> None:
        return None


def event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def token(text: str, count: int) -> bytes:
    return event({"text": text, "meta_info": {"completion_tokens": count}})


async def collect(stream: EngineStream, into: list[EngineEvent]) -> None:
    async for item in stream.events():
        into.append(item)


async def test_a_backlog_is_one_event_with_the_newest_text() -> None:
    body = token("a", 1) + token("ab", 2) + token("abc", 3) + b"data: [DONE]\n\n"
    seen: list[EngineEvent] = []
    await collect(EngineStream(OneReadBody(body), 1 << 20), seen)
    assert [(e.text, e.completion_tokens) for e in seen] == [("abc", 3)]


@pytest.mark.parametrize("incremental", [False, True])
async def test_tokens_before_an_error_in_the_same_read_are_relayed(incremental: bool) -> None:
    texts = ["a", "b", "c"] if incremental else ["a", "ab", "abc"]
    body = b"".join(token(t, i + 1) for i, t in enumerate(texts))
    body += event({"error": {"message": "boom"}}) + b"data: [DONE]\n\n"
    seen: list[EngineEvent] = []
    stream = EngineStream(OneReadBody(body), 1 << 20, incremental=incremental)
    with pytest.raises(UpstreamStreamError, match="boom"):
        await collect(stream, seen)
    assert [(e.text, e.completion_tokens) for e in seen] == [
        (texts[-1] if not incremental else "abc", 3)
    ]


@pytest.mark.parametrize("incremental", [False, True])
async def test_tokens_before_a_malformed_event_in_the_same_read_are_relayed(
    incremental: bool,
) -> None:
    texts = ["a", "b", "c"] if incremental else ["a", "ab", "abc"]
    body = b"".join(token(t, i + 1) for i, t in enumerate(texts))
    body += b"data: {not json\n\n" + b"data: [DONE]\n\n"
    seen: list[EngineEvent] = []
    stream = EngineStream(OneReadBody(body), 1 << 20, incremental=incremental)
    with pytest.raises(UpstreamStreamError, match="not JSON"):
        await collect(stream, seen)
    assert [(e.text, e.completion_tokens) for e in seen] == [("abc", 3)]
