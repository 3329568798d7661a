"""The recorders keep the answer in its API's own shape (bench.client StreamRecord.answer),
for replays that send it back as history byte for byte."""

from __future__ import annotations

from typing import Any

from bench.client import StreamRecord, record_message_event, record_response_event

MESSAGE_EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "m"}},
    {"type": "content_block_start", "index": 0,
     "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "thinking_delta", "thinking": "first "}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "thinking_delta", "thinking": "consider"}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "signature_delta", "signature": "fbx1.abc"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi."}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2,
     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": '{"path": '}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": '"a.py"}'}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "usage": {"input_tokens": 10, "output_tokens": 5}},
]  # fmt: skip


def test_anthropic_blocks_are_kept_with_signature_and_parsed_tool_input() -> None:
    record = StreamRecord()
    for i, event in enumerate(MESSAGE_EVENTS):
        record_message_event(record, event, float(i))
    assert record.answer == [
        {"type": "thinking", "thinking": "first consider", "signature": "fbx1.abc"},
        {"type": "text", "text": "Hi."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
    ]
    assert record.error is None
    assert record.ttft == 2.0  # the first thinking delta, as before


def test_tool_input_that_is_not_json_is_an_error() -> None:
    record = StreamRecord()
    for event in [*MESSAGE_EVENTS[9:11], MESSAGE_EVENTS[12]]:
        record_message_event(record, {**event, "index": 0}, 0.0)
    assert record.error is not None
    assert "not JSON" in record.error


def test_responses_output_items_come_from_the_terminal_event() -> None:
    record = StreamRecord()
    items = [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "fbx1.x", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
    ]
    record_response_event(
        record,
        {"type": "response.completed", "response": {"output": items, "usage": {}}},
        1.0,
    )
    assert record.answer == items
    assert record.answer[0] is not items[0]  # copies: the replay may extend them safely
