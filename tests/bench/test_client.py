"""Token timing and counting from recorded OpenAI chat, Anthropic Messages and OpenAI Responses
streams (bench.client)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

import bench.client
from bench.client import (
    StreamRecord,
    record_event,
    record_message_event,
    record_response_event,
    stream_chat,
    stream_messages,
    stream_responses,
)


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


async def _serve_twice(
    events: bytes, requests: int, call: Callable[[httpx.AsyncClient, str], Awaitable[StreamRecord]]
) -> tuple[list[StreamRecord], int, list[bytes]]:
    """`requests` calls against a server that answers each with `events`, then the chunked end
    in a later write; the records, how many connections it accepted, and the requests it read
    (head and body)."""
    accepted = 0
    requests_read: list[bytes] = []

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
            requests_read.append(head + await reader.readexactly(length))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n" % len(events) + events + b"\r\n"
            )
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient() as client:
            url = f"http://127.0.0.1:{port}"
            records = [await call(client, url) for _ in range(requests)]
    finally:
        server.close()
    return records, accepted, requests_read


async def test_stream_chat_reads_to_the_end_and_keeps_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After [DONE] the client reads the chunked end, which here comes in a later write, as
    the async openai client does: both requests take the one keep-alive connection."""
    monkeypatch.setattr(bench.client, "DRAIN_S", 10.0)  # a loaded CI box may be slow
    event = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'

    def call(client: httpx.AsyncClient, url: str) -> Awaitable[StreamRecord]:
        return stream_chat(client, url + "/v1/chat/completions", {"messages": []})

    records, accepted, _ = await _serve_twice(event, 2, call)
    assert [(r.ok, r.content) for r in records] == [(True, ["hi"]), (True, ["hi"])]
    assert accepted == 1


# -- Anthropic Messages ------------------------------------------------------------------


def _block_delta(index: int, kind: str, **fields: object) -> dict[str, object]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def _replay_messages(events: list[tuple[float, dict[str, object]]]) -> StreamRecord:
    record = StreamRecord()
    for elapsed, payload in events:
        record_message_event(record, payload, elapsed)
    record.ok = record.error is None
    record.latency = events[-1][0]
    return record


def _message_start() -> dict[str, object]:
    usage = {"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
    return {"type": "message_start", "message": {"id": "msg_1", "content": [], "usage": usage}}


def test_messages_ttft_is_the_first_content_block_delta() -> None:
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    record = _replay_messages(
        [
            (0.10, _message_start()),
            (0.20, {"type": "ping"}),
            (0.30, {"type": "content_block_start", "index": 0, "content_block": thinking}),
            (0.50, _block_delta(0, "thinking_delta", thinking="Let")),
            (0.55, _block_delta(0, "signature_delta", signature="fbx1.abc")),
            (0.56, {"type": "content_block_stop", "index": 0}),
            (
                0.57,
                {"type": "content_block_start", "index": 1, "content_block": {"type": "text"}},
            ),
            (0.60, _block_delta(1, "text_delta", text="Hi")),
            (0.70, _block_delta(1, "text_delta", text=" there")),
            (0.71, {"type": "content_block_stop", "index": 1}),
            (
                0.72,
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {
                        "input_tokens": 14,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 16,
                        "output_tokens": 3,
                    },
                },
            ),
            (0.73, {"type": "message_stop"}),
        ]
    )
    assert record.ttft == 0.50
    # The signature is not a token: three token-carrying deltas.
    assert record.token_chunk_times == [0.50, 0.60, 0.70]
    assert record.reasoning == ["Let"]
    assert record.content == ["Hi", " there"]
    # Anthropic's input_tokens leaves out what the cache served; prompt_tokens is all of it.
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (30, 16, 3)
    assert record.tpot == pytest.approx((0.73 - 0.50) / 2)


def test_messages_tool_use_is_assembled_in_openai_shape() -> None:
    tool = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}
    record = _replay_messages(
        [
            (0.2, {"type": "content_block_start", "index": 0, "content_block": tool}),
            (0.3, _block_delta(0, "input_json_delta", partial_json="")),
            (0.4, _block_delta(0, "input_json_delta", partial_json='{"path": ')),
            (0.5, _block_delta(0, "input_json_delta", partial_json='"a.py"}')),
        ]
    )
    assert record.ttft == 0.4  # an empty fragment carries nothing
    assert record.tool_calls == {
        0: {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
        }
    }


def test_messages_error_event_is_recorded() -> None:
    error: dict[str, object] = {
        "type": "error",
        "error": {"type": "api_error", "message": "engine died"},
    }
    record = _replay_messages([(0.1, _message_start()), (0.2, error)])
    assert record.error == "engine died"
    assert not record.ok


async def test_stream_messages_ends_at_message_stop_and_keeps_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer ends at message_stop; the client then reads the chunked end (a later write)
    as stream_chat does, so both requests take one connection; it sends stream: true and
    anthropic-version."""
    monkeypatch.setattr(bench.client, "DRAIN_S", 10.0)  # a loaded CI box may be slow
    events = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{}}}\n\n'
        b"event: content_block_start\n"
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text"}}\n\n'
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b"event: message_delta\n"
        b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        b'"usage":{"input_tokens":5,"output_tokens":1}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}

    def call(client: httpx.AsyncClient, url: str) -> Awaitable[StreamRecord]:
        return stream_messages(client, url + "/v1/messages", body)

    records, accepted, requests_read = await _serve_twice(events, 2, call)
    assert [(r.ok, r.content, r.completion_tokens) for r in records] == [(True, ["hi"], 1)] * 2
    assert all(r.ttft is not None and r.ttft <= r.latency for r in records)
    assert accepted == 1
    assert b"anthropic-version: 2023-06-01" in requests_read[0].lower()
    assert requests_read[0].endswith(b'"stream":true}')


# -- OpenAI Responses ----------------------------------------------------------------------


def _replay_responses(events: list[tuple[float, dict[str, object]]]) -> StreamRecord:
    record = StreamRecord()
    for elapsed, payload in events:
        record_response_event(record, payload, elapsed)
    record.ok = record.error is None
    record.latency = events[-1][0]
    return record


def _lifecycle(kind: str, status: str, **fields: object) -> dict[str, object]:
    response = {"id": "resp_1", "object": "response", "status": status, "output": [], **fields}
    return {"type": kind, "response": response}


def _text_delta(kind: str, index: int, text: str) -> dict[str, object]:
    return {"type": kind, "item_id": f"item_{index}", "output_index": index, "delta": text}


def test_responses_ttft_is_the_first_text_delta() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "content": []}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    usage = {
        "input_tokens": 30,
        "input_tokens_details": {"cached_tokens": 16},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 33,
    }
    record = _replay_responses(
        [
            (0.10, _lifecycle("response.created", "in_progress")),
            (0.11, _lifecycle("response.in_progress", "in_progress")),
            (0.20, _lifecycle("response.in_progress", "in_progress")),  # a keepalive
            (0.30, {"type": "response.output_item.added", "output_index": 0, "item": reasoning}),
            (0.40, _text_delta("response.reasoning_text.delta", 0, "")),
            (0.50, _text_delta("response.reasoning_text.delta", 0, "Let")),
            (0.55, {"type": "response.reasoning_text.done", "output_index": 0, "text": "Let"}),
            (0.57, {"type": "response.output_item.added", "output_index": 1, "item": message}),
            (0.60, _text_delta("response.output_text.delta", 1, "Hi")),
            (0.70, _text_delta("response.output_text.delta", 1, " there")),
            (0.71, {"type": "response.output_text.done", "output_index": 1, "text": "Hi there"}),
            (0.73, _lifecycle("response.completed", "completed", usage=usage)),
        ]
    )
    assert record.ttft == 0.50  # an empty delta carries nothing
    assert record.token_chunk_times == [0.50, 0.60, 0.70]
    assert record.reasoning == ["Let"]
    assert record.content == ["Hi", " there"]
    # The Responses API's input_tokens already includes what the cache served.
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (30, 16, 3)
    assert record.ok
    assert record.tpot == pytest.approx((0.73 - 0.50) / 2)


def test_responses_function_call_is_assembled_in_openai_shape() -> None:
    call = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "read_file",
        "arguments": "",
        "status": "in_progress",
    }
    usage = {"input_tokens": 5, "output_tokens": 4}
    record = _replay_responses(
        [
            (0.2, {"type": "response.output_item.added", "output_index": 0, "item": call}),
            (0.4, _text_delta("response.function_call_arguments.delta", 0, '{"path": ')),
            (0.5, _text_delta("response.function_call_arguments.delta", 0, '"a.py"}')),
            (0.6, _lifecycle("response.incomplete", "incomplete", usage=usage)),
        ]
    )
    assert record.ttft == 0.4
    assert record.tool_calls == {
        0: {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
        }
    }
    # An incomplete answer (max_output_tokens) is an answer, as finish_reason "length" is.
    assert record.ok
    assert (record.prompt_tokens, record.completion_tokens) == (5, 4)


def test_responses_failed_event_is_recorded() -> None:
    error = {"code": "server_error", "message": "engine died"}
    record = _replay_responses(
        [
            (0.1, _lifecycle("response.created", "in_progress")),
            (0.2, _lifecycle("response.failed", "failed", error=error, usage=None)),
        ]
    )
    assert record.error == "engine died"
    assert not record.ok


def test_responses_error_event_is_recorded() -> None:
    error: dict[str, object] = {"type": "error", "message": "overloaded", "param": None}
    record = _replay_responses([(0.1, error)])
    assert record.error == "overloaded"


async def test_stream_responses_ends_at_the_terminal_event_and_keeps_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer ends at response.completed; the client then reads the chunked end (a later
    write) as stream_chat does, so both requests take one connection; it sends stream: true."""
    monkeypatch.setattr(bench.client, "DRAIN_S", 10.0)  # a loaded CI box may be slow
    events = (
        b"event: response.created\n"
        b'data: {"type":"response.created","response":{"status":"in_progress"},'
        b'"sequence_number":0}\n\n'
        b"event: response.output_text.delta\n"
        b'data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,'
        b'"content_index":0,"delta":"hi","sequence_number":1}\n\n'
        b"event: response.completed\n"
        b'data: {"type":"response.completed","response":{"status":"completed",'
        b'"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":0},'
        b'"output_tokens":1}},"sequence_number":2}\n\n'
    )
    body = {"model": "m", "input": "x", "max_output_tokens": 16}

    def call(client: httpx.AsyncClient, url: str) -> Awaitable[StreamRecord]:
        return stream_responses(client, url + "/v1/responses", body)

    records, accepted, requests_read = await _serve_twice(events, 2, call)
    assert [(r.ok, r.content, r.completion_tokens) for r in records] == [(True, ["hi"], 1)] * 2
    assert all(r.ttft is not None and r.ttft <= r.latency for r in records)
    assert accepted == 1
    assert requests_read[0].endswith(b'"stream":true}')
