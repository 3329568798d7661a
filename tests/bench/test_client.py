"""Token timing and counting from recorded OpenAI streams (bench.client)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import bench.client
from bench.client import StreamRecord, record_event, stream_chat


def _chunk(**delta: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta}]}


def _replay(events: list[tuple[float, dict[str, object]]]) -> StreamRecord:
    record = StreamRecord()
    for elapsed, payload in events:
        record_event(record, payload, elapsed)
    record.ok = record.error is None
    record.latency = events[-1][0]
    return record


def test_role_frame_is_not_the_first_token() -> None:
    record = _replay(
        [
            (0.10, _chunk(role="assistant", content="")),
            (0.50, _chunk(reasoning_content="Let")),
            (0.60, _chunk(content="Hi")),
            (
                0.70,
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 30,
                        "completion_tokens": 2,
                        "prompt_tokens_details": {"cached_tokens": 16},
                    },
                },
            ),
        ]
    )
    assert record.ttft == 0.50
    assert record.prompt_tokens == 30
    assert record.completion_tokens == 2
    assert record.cached_tokens == 16
    assert record.reasoning == ["Let"]
    assert record.content == ["Hi"]


def test_itl_and_tpot_follow_bench_serving_conventions() -> None:
    record = _replay(
        [
            (1.0, _chunk(content="a")),
            (1.1, _chunk(content="b")),
            (1.3, _chunk(content="cd")),
            (1.3, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
        ]
    )
    # three chunks, three tokens: one token per chunk
    assert record.itls == pytest.approx([0.1, 0.2])
    # (latency - ttft) / (tokens - 1)
    assert record.tpot == pytest.approx((1.3 - 1.0) / 2)


def test_chunks_with_several_tokens_spread_the_gap() -> None:
    record = _replay(
        [
            (0.0, _chunk(content="ab")),
            (0.4, _chunk(content="cd")),
            (0.4, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}),
        ]
    )
    assert record.itls == pytest.approx([0.2])


def test_streamed_tool_calls_are_assembled() -> None:
    record = _replay(
        [
            (
                0.2,
                _chunk(
                    tool_calls=[
                        {
                            "index": 0,
                            "id": "call_1",
                            "function": {"name": "read_file", "arguments": ""},
                        }
                    ]
                ),
            ),
            (0.3, _chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"path": '}}])),
            (0.4, _chunk(tool_calls=[{"index": 0, "function": {"arguments": '"a.py"}'}}])),
        ]
    )
    assert record.ttft == 0.2
    assert record.tool_calls[0]["id"] == "call_1"
    assert record.tool_calls[0]["function"] == {
        "name": "read_file",
        "arguments": '{"path": "a.py"}',
    }


def test_error_event_is_recorded() -> None:
    record = _replay([(0.1, {"error": {"message": "engine died", "type": "upstream_error"}})])
    assert record.error == "engine died"
    assert not record.ok


async def test_stream_chat_reads_to_the_end_and_keeps_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After [DONE] the client reads the chunked end, which here comes in a later write, as
    the async openai client does: both requests take the one keep-alive connection."""
    monkeypatch.setattr(bench.client, "DRAIN_S", 10.0)  # a loaded CI box may be slow
    accepted = 0
    event = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed the connection
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n" % len(event) + event + b"\r\n"
            )
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        async with httpx.AsyncClient() as client:
            records = [await stream_chat(client, url, {"messages": []}) for _ in range(2)]
    finally:
        server.close()
    assert [(r.ok, r.content) for r in records] == [(True, ["hi"]), (True, ["hi"])]
    assert accepted == 1
