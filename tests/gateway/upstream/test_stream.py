"""EngineStream on bodies whose events arrive together in one read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.errors import UpstreamStreamError
from gateway.upstream.stream import EngineEvent, EngineStream


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


def sglang_event(text: str, ids: list[int], count: int) -> bytes:
    """The shape SGLang sends: cumulative text and token ids, then meta_info (orjson, no spaces)."""
    return event(
        {"text": text, "output_ids": ids, "meta_info": {"id": "r", "completion_tokens": count}}
    )


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        # A text that spells the very key, quoted: inside a JSON string the quotes are escaped.
        'x,"output_ids":[1,2],"meta_info":{"completion_tokens":99}',
        "ends with a backslash \\",
        "brackets ] [ and unicode \u00e9\u4e2d\U0001f600",
    ],
)
async def test_token_ids_are_skipped_and_text_and_meta_are_exact(text: str) -> None:
    body = sglang_event(text[:1], [5], 1) + sglang_event(text, [5, 6, 7], 3)
    body += b"data: [DONE]\n\n"
    seen: list[EngineEvent] = []
    await collect(EngineStream(OneReadBody(body), 1 << 20), seen)
    assert [(e.text, e.meta) for e in seen] == [(text, {"id": "r", "completion_tokens": 3})]


@pytest.mark.parametrize(
    "raw",
    [
        # Another encoder's spacing: nothing is cut, the event decodes as sent.
        b'{"text": "hi", "output_ids": [1, 2], "meta_info": {"completion_tokens": 2}}',
        # Token ids in an unexpected layout (nested): the cut would break the JSON, so the
        # event as sent is decoded instead.
        b'{"text":"hi","output_ids":[[1],[2]],"meta_info":{"completion_tokens":2}}',
        # No ids at all.
        b'{"text":"hi","meta_info":{"completion_tokens":2}}',
    ],
)
async def test_events_in_other_layouts_decode_as_sent(raw: bytes) -> None:
    body = b"data: " + raw + b"\n\ndata: [DONE]\n\n"
    seen: list[EngineEvent] = []
    await collect(EngineStream(OneReadBody(body), 1 << 20), seen)
    assert [(e.text, e.completion_tokens) for e in seen] == [("hi", 2)]


class PerEventBody(OneReadBody):
    """One network read per event, as the engine's chunks usually arrive."""

    def __init__(self, *events: bytes) -> None:
        super().__init__(b"")
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._events:
            yield piece


@pytest.mark.parametrize("incremental", [False, True])
async def test_events_read_one_at_a_time_decode_in_place(incremental: bool) -> None:
    texts = ["a", "b\nc", 'q"'] if incremental else ["a", "ab\nc", 'ab\nc q"']
    pieces = [sglang_event(t, list(range(i + 1)), i + 1) for i, t in enumerate(texts)]
    # Another encoder's spacing and a missing space after "data:" take the general path.
    pieces.append(b"data:" + json.dumps({"text": texts[-1]}).encode() + b"\n\n")
    body = PerEventBody(*pieces, b"data: [DONE]\n\n")
    seen: list[EngineEvent] = []
    await collect(EngineStream(body, 1 << 20, incremental=incremental), seen)
    assert [e.text for e in seen] == [*texts, texts[-1]]
    assert [e.completion_tokens for e in seen] == [1, 2, 3, 0]


@pytest.mark.parametrize(
    ("piece", "match"),
    [
        (b'data: {"error": {"message": "boom"}}\n\n', "boom"),
        (b'data: {"text": "a", "meta_info": {}, "error": "late boom"}\n\n', "late boom"),
        (b'data: {"text": "a", "output_ids": [1,\n\n', "not JSON"),
        (b"data: [1, 2]\n\n", "not a JSON object"),
    ],
)
async def test_a_bad_event_read_alone_is_an_error(piece: bytes, match: str) -> None:
    body = PerEventBody(sglang_event("ok", [1], 1), piece, b"data: [DONE]\n\n")
    seen: list[EngineEvent] = []
    with pytest.raises(UpstreamStreamError, match=match):
        await collect(EngineStream(body, 1 << 20), seen)
    assert [e.text for e in seen] == ["ok"]
