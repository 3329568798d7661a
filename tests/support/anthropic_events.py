"""Anthropic Messages SSE, read strictly: frames, then the event grammar a client relies on.

`parse_sse` splits raw bytes into (event name, data) pairs; `check_stream` walks them through
the grammar of AGENT_APIS.md section 1.5 (what Claude Code and the SDK rely on) and returns the
message they add up to, in the shape of a non-streamed answer, so a test can compare the two.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import jiter

TOOL_ID = re.compile(r"toolu_[A-Za-z0-9_-]+")
STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
BLOCK_DELTAS = {
    "thinking": {"thinking_delta", "signature_delta"},
    "text": {"text_delta"},
    "tool_use": {"input_json_delta"},
}


@dataclass
class Event:
    name: str
    data: dict[str, Any]


def parse_sse(raw: bytes | str) -> list[Event]:
    """Every frame must be `event: NAME` then `data: JSON` whose "type" is NAME."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    assert "\r" not in text, "frames end in \\n\\n"
    events: list[Event] = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        lines = frame.split("\n")
        assert len(lines) == 2, f"a frame is one event line and one data line: {frame!r}"
        assert lines[0].startswith("event: "), frame
        assert lines[1].startswith("data: "), frame
        name = lines[0].removeprefix("event: ")
        data = json.loads(lines[1].removeprefix("data: "))
        assert isinstance(data, dict), frame
        assert data.get("type") == name, f"event name {name!r} != data.type {data.get('type')!r}"
        events.append(Event(name, data))
    assert text.endswith("\n\n") or not text, "the stream ends with a whole frame"
    return events


@dataclass
class _Block:
    index: int
    kind: str
    start: dict[str, Any]
    deltas: list[dict[str, Any]] = field(default_factory=list)

    def check_and_build(self) -> dict[str, Any]:
        kinds = [d["type"] for d in self.deltas]
        assert set(kinds) <= BLOCK_DELTAS[self.kind], f"block {self.index}: deltas {kinds}"
        if self.kind == "thinking":
            assert self.start == {"type": "thinking", "thinking": "", "signature": ""}
            assert kinds.count("signature_delta") == 1, f"block {self.index}: {kinds}"
            assert kinds[-1] == "signature_delta", "the signature comes right before the stop"
            signature = self.deltas[-1]["signature"]
            assert isinstance(signature, str)
            assert signature
            thinking = "".join(d["thinking"] for d in self.deltas[:-1])
            return {"type": "thinking", "thinking": thinking, "signature": signature}
        if self.kind == "text":
            assert self.start == {"type": "text", "text": ""}
            text = "".join(d["text"] for d in self.deltas)
            assert text.strip(), f"block {self.index}: an empty or whitespace-only text block"
            return {"type": "text", "text": text}
        assert set(self.start) == {"type", "id", "name", "input"}, self.start
        assert self.start["input"] == {}
        assert TOOL_ID.fullmatch(self.start["id"]), self.start["id"]
        buffer = ""
        for delta in self.deltas:
            buffer += delta["partial_json"]
            if buffer:
                # What the SDK does on every delta (anthropic/lib/streaming/_messages.py).
                jiter.from_json(buffer.encode(), partial_mode=True)
        tool_input = json.loads(buffer) if buffer else {}
        assert isinstance(tool_input, dict), f"tool input is not an object: {buffer!r}"
        return {**self.start, "input": tool_input}


def check_stream(events: list[Event], *, allow_error: bool = False) -> dict[str, Any]:
    """The grammar, asserted; returns the message the events add up to.

    With `allow_error`, the stream may end in one `error` event (after a 200 that is the only
    way to fail); the message is then returned as far as it got, with "error" set.
    """
    assert events, "an empty stream"
    assert events[0].name == "message_start", f"first event: {events[0].name}"
    message = dict(events[0].data["message"])
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["id"].startswith("msg_")
    assert message["content"] == []
    assert message["stop_reason"] is None
    assert message["stop_sequence"] is None
    usage = dict(message["usage"])
    blocks: list[dict[str, Any]] = []
    open_block: _Block | None = None
    message_deltas = 0
    stopped = False
    for position, event in enumerate(events[1:], start=1):
        data = event.data
        assert not stopped, f"{event.name} after message_stop"
        if event.name == "ping":
            continue
        if event.name == "error":
            assert allow_error, f"an error event: {data}"
            assert position == len(events) - 1, "an error event ends the stream"
            assert set(data["error"]) >= {"type", "message"}
            message["error"] = data["error"]
            message["content"] = blocks
            return message
        if event.name == "message_start":
            raise AssertionError("a second message_start")
        if event.name == "content_block_start":
            assert message_deltas == 0, "a block after message_delta"
            assert open_block is None, f"block {data['index']} starts inside an open block"
            assert data["index"] == len(blocks), f"index {data['index']}, expected {len(blocks)}"
            start = data["content_block"]
            open_block = _Block(data["index"], start["type"], start)
        elif event.name == "content_block_delta":
            assert open_block is not None, "a delta outside any block"
            assert data["index"] == open_block.index, "a delta for a block that is not open"
            if open_block.deltas and open_block.deltas[-1]["type"] == "signature_delta":
                raise AssertionError("a delta after the signature_delta")
            open_block.deltas.append(data["delta"])
        elif event.name == "content_block_stop":
            assert open_block is not None, "a stop outside any block"
            assert data["index"] == open_block.index
            blocks.append(open_block.check_and_build())
            open_block = None
        elif event.name == "message_delta":
            assert open_block is None, "message_delta while a block is open"
            message_deltas += 1
            assert message_deltas == 1, "exactly one message_delta"
            reason = data["delta"]["stop_reason"]
            assert reason in STOP_REASONS, reason
            message["stop_reason"] = reason
            message["stop_sequence"] = data["delta"]["stop_sequence"]
            assert isinstance(data["usage"]["output_tokens"], int)
            usage.update(data["usage"])
        elif event.name == "message_stop":
            assert message_deltas == 1, "message_stop before message_delta"
            stopped = True
        else:
            raise AssertionError(f"unknown event {event.name}")
    assert stopped, "the stream ended without message_stop"
    has_tool_use = any(block["type"] == "tool_use" for block in blocks)
    if message["stop_reason"] == "tool_use":
        assert has_tool_use, "tool_use without a tool_use block"
    elif has_tool_use:
        # Only a cut-off answer has a tool_use block without saying tool_use (its call unfinished).
        assert message["stop_reason"] == "max_tokens", "a tool_use block without tool_use"
    message["content"] = blocks
    message["usage"] = usage
    return message


def events_before_first_block(events: list[Event]) -> list[str]:
    names: list[str] = []
    for event in events:
        if event.name == "content_block_start":
            break
        names.append(event.name)
    return names
