"""Hop 6 of the Anthropic Messages face: content blocks from the core's deltas, as SSE events
or as one message.

`BlockWriter` is the one state machine both paths share, so a streamed answer and a
non-streamed one have the same blocks: each block opens with its real type, indices are
contiguous from 0, blocks never interleave, a thinking block closes with one signature_delta
that carries its reasoning (gateway.core.reasoning_codec), text that is only whitespace never
becomes a block, and stop_reason is "tool_use" exactly when a tool_use block was sent and
max_tokens did not cut the answer: a cut answer is "max_tokens", whatever blocks it has (its
last tool_use block, if open at the cut, holds arguments that end mid-value; Anthropic sends
the unfinished block the same way and says "max_tokens").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.answer import Finish
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.errors import GatewayError
from gateway.faces.anthropic.errors import error_type
from gateway.parsers.base import (
    ContentDelta,
    ParsedDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)

_THINKING, _TEXT, _TOOL = "thinking", "text", "tool_use"


def sse(kind: bytes, obj: Any) -> bytes:
    return b"event: " + kind + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def tool_use_id(call_id: str) -> str:
    """Anthropic-style id for a parser call id ("call_<hex>" -> "toolu_<hex>")."""
    return "toolu_" + call_id.removeprefix("call_")


class BlockWriter:
    """Parsed deltas -> content-block events (dicts in Anthropic's wire shape), in order."""

    def __init__(self, codec: ReasoningCodec, *, show_thinking: bool = True) -> None:
        self._codec = codec
        # thinking.display "omitted" (Claude Code asks for it): thinking blocks carry only
        # their signature, which restores the whole reasoning when the block comes back.
        self._show_thinking = show_thinking
        self.index = -1
        self._open: str | None = None
        self._reasoning: list[str] = []
        # Text that is only whitespace so far: sent with the first visible character.
        self._held = ""
        self.made_tool_use = False

    def feed(self, deltas: list[ParsedDelta]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for delta in deltas:
            if type(delta) is ContentDelta:
                self._text(delta.text, events)
            elif type(delta) is ReasoningDelta:
                if not delta.text:
                    continue
                if self._open != _THINKING:
                    self._start(events, {"type": _THINKING, "thinking": "", "signature": ""})
                if self.more_thinking(delta.text):
                    events.append(self._delta({"type": "thinking_delta", "thinking": delta.text}))
            elif type(delta) is ToolCallStart:
                self.made_tool_use = True
                block = {"type": _TOOL, "id": tool_use_id(delta.id), "name": delta.name}
                self._start(events, {**block, "input": {}})
            elif type(delta) is ToolCallArgumentsDelta and self._open == _TOOL:
                if not delta.fragment:
                    continue
                last = events[-1] if events else None
                if last is not None and last["type"] == "content_block_delta":
                    inner = last["delta"]
                    if inner["type"] == "input_json_delta":
                        # One event's fragments as one delta: each is still a JSON prefix.
                        inner["partial_json"] += delta.fragment
                        continue
                events.append(
                    self._delta({"type": "input_json_delta", "partial_json": delta.fragment})
                )
        return events

    @property
    def open(self) -> str | None:
        """The type of the block open now, if any."""
        return self._open

    def more_thinking(self, text: str) -> bool:
        """`text` is more reasoning for the open thinking block (what `feed` does for it);
        whether a thinking_delta is to be sent for it."""
        self._held = ""  # whitespace no text followed: dropped, not moved past this
        self._reasoning.append(text)
        return self._show_thinking

    def _text(self, text: str, events: list[dict[str, Any]]) -> None:
        if self._open != _TEXT:
            pending = self._held + text
            if not pending.strip():
                self._held = pending
                return
            self._held = ""
            self._start(events, {"type": _TEXT, "text": ""})
            text = pending
        if text:
            events.append(self._delta({"type": "text_delta", "text": text}))

    def _delta(self, inner: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": inner}

    def _start(self, events: list[dict[str, Any]], block: dict[str, Any]) -> None:
        self._close(events)
        self._held = ""
        self.index += 1
        self._open = block["type"]
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})

    def _close(self, events: list[dict[str, Any]]) -> None:
        if self._open is None:
            return
        if self._open == _THINKING:
            signature = self._codec.encode("".join(self._reasoning))
            self._reasoning.clear()
            events.append(self._delta({"type": "signature_delta", "signature": signature}))
        events.append({"type": "content_block_stop", "index": self.index})
        self._open = None
        self._held = ""

    def close(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        self._close(events)
        return events


def stop_reason(finish: Finish, made_tool_use: bool, stops: tuple[str, ...]) -> tuple[str, Any]:
    """(stop_reason, stop_sequence): "tool_use" from the blocks sent, never from the engine
    alone; a cut-off answer is "max_tokens" first, so no agent runs a call that was cut."""
    if finish.reason == "length":
        return "max_tokens", None
    if made_tool_use:
        return "tool_use", None
    if finish.matched is not None and finish.matched in stops:
        return "stop_sequence", finish.matched
    return "end_turn", None


def usage_body(finish: Finish) -> dict[str, Any]:
    """Anthropic's split: input_tokens excludes what the prefix cache served; the cache
    creation is what this request newly checkpointed (Usage.cache_created_tokens), which an
    agent client can add up to see what its session keeps on the engine."""
    usage = finish.usage
    # The three add up to the prompt, as Anthropic's do (Claude Code sums them for its context).
    fresh = max(usage.prompt_tokens - usage.cached_tokens, 0)
    return {
        "input_tokens": fresh - min(usage.cache_created_tokens, fresh),
        "cache_creation_input_tokens": min(usage.cache_created_tokens, fresh),
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
        # Anthropic's place for the reasoning share of output_tokens (thinking block included).
        "output_tokens_details": {"thinking_tokens": usage.reasoning_tokens},
    }


def delta_usage(finish: Finish) -> dict[str, Any]:
    """message_delta's usage, which overwrites message_start's field by field (the SDK and
    Claude Code merge it so): the engine's split when it reported counts; without them only
    the output, so message_start's prompt count stands instead of a 0 that means unknown."""
    body = usage_body(finish)
    if finish.usage.prompt_tokens > 0:
        return body
    return {key: body[key] for key in ("output_tokens", "output_tokens_details")}


def error_event(error: GatewayError) -> bytes:
    return sse(
        b"error",
        {"type": "error", "error": {"type": error_type(error), "message": error.message}},
    )


_PING = sse(b"ping", {"type": "ping"})
_START = b"content_block_start"
_DELTA = b"content_block_delta"
_STOP = b"content_block_stop"
# One text or reasoning delta for the open block of its kind: (block type, delta type, field).
_FAST_DELTAS: dict[type, tuple[str, bytes, bytes]] = {
    ContentDelta: (_TEXT, b"text_delta", b"text"),
    ReasoningDelta: (_THINKING, b"thinking_delta", b"thinking"),
}
_KINDS = {"content_block_start": _START, "content_block_delta": _DELTA, "content_block_stop": _STOP}


class _Message:
    """What the streamed and the one-shot message share: ids, the block writer, the stops."""

    def __init__(
        self,
        message_id: str,
        model: str,
        codec: ReasoningCodec,
        stops: tuple[str, ...],
        *,
        show_thinking: bool = True,
    ) -> None:
        self._id = message_id
        self._model = model
        self._writer = BlockWriter(codec, show_thinking=show_thinking)
        self._stops = stops
        self._begin()

    def _begin(self) -> None:
        """A subclass's own state."""

    def _stop_reason(self, finish: Finish) -> tuple[str, Any]:
        return stop_reason(finish, self._writer.made_tool_use, self._stops)


class MessageStream(_Message):
    """The face's StreamEncoder: message_start at once, blocks, one message_delta, message_stop."""

    def _begin(self) -> None:
        # Per delta kind: the open block's index and all of its delta event but the text.
        self._heads: dict[str, tuple[int, bytes]] = {}

    def start(self, prompt_tokens: int | None = None) -> bytes:
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # The prompt's count when the gateway knows it; which part the prefix cache
            # served is known only with the engine's first event, so all of it is input here
            # and message_delta carries the engine's split (cumulative: it overwrites this).
            "usage": {
                "input_tokens": prompt_tokens or 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return sse(b"message_start", {"type": "message_start", "message": message})

    @property
    def sends_keepalive(self) -> bool:
        return True

    def keepalive(self) -> bytes | None:
        return _PING

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        writer = self._writer
        if len(deltas) == 1:
            # The usual event: more text or reasoning for the open block of its kind; the
            # bytes BlockWriter.feed would make, without its event dict.
            delta = deltas[0]
            fast = _FAST_DELTAS.get(type(delta))
            if fast is not None and writer.open == fast[0]:
                text: str = delta.text  # type: ignore[union-attr]
                if not text or (fast[0] == _THINKING and not writer.more_thinking(text)):
                    return b""
                return self._head(fast, writer.index) + orjson.dumps(text) + b"}}\n\n"
        return self._encode(writer.feed(deltas))

    def _head(self, fast: tuple[str, bytes, bytes], index: int) -> bytes:
        kind = fast[0]
        found = self._heads.get(kind)
        if found is not None and found[0] == index:
            return found[1]
        head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
            + str(index).encode()
            + b',"delta":{"type":"'
            + fast[1]
            + b'","'
            + fast[2]
            + b'":'
        )
        self._heads[kind] = (index, head)
        return head

    @staticmethod
    def _encode(events: list[dict[str, Any]]) -> bytes:
        return b"".join(sse(_KINDS[event["type"]], event) for event in events)

    def finish(self, finish: Finish) -> bytes:
        writer = self._writer
        out = self._encode(writer.close())
        reason, sequence = self._stop_reason(finish)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": delta_usage(finish),
        }
        return out + sse(b"message_delta", delta) + sse(b"message_stop", {"type": "message_stop"})

    def error(self, error: GatewayError) -> bytes:
        return error_event(error)


class MessageCollector(_Message):
    """The face's Collector: the same blocks, gathered into one message."""

    def _begin(self) -> None:
        self._blocks: list[dict[str, Any]] = []
        self._json: dict[int, list[str]] = {}

    def add(self, deltas: list[ParsedDelta]) -> None:
        self._apply(self._writer.feed(deltas))

    def _apply(self, events: list[dict[str, Any]]) -> None:
        blocks = self._blocks
        for event in events:
            kind = event["type"]
            if kind == "content_block_start":
                blocks.append(dict(event["content_block"]))
                continue
            if kind != "content_block_delta":
                continue
            block, inner = blocks[event["index"]], event["delta"]
            if inner["type"] == "text_delta":
                block["text"] += inner["text"]
            elif inner["type"] == "thinking_delta":
                block["thinking"] += inner["thinking"]
            elif inner["type"] == "signature_delta":
                block["signature"] = inner["signature"]
            elif inner["type"] == "input_json_delta":
                self._json.setdefault(event["index"], []).append(inner["partial_json"])

    def body(self, finish: Finish) -> bytes:
        writer = self._writer
        self._apply(writer.close())
        for index, parts in self._json.items():
            self._blocks[index]["input"] = _object("".join(parts))
        reason, sequence = self._stop_reason(finish)
        return orjson.dumps(
            {
                "id": self._id,
                "type": "message",
                "role": "assistant",
                "model": self._model,
                "content": self._blocks,
                "stop_reason": reason,
                "stop_sequence": sequence,
                "usage": usage_body(finish),
            }
        )


def _object(text: str) -> dict[str, Any] | orjson.Fragment:
    # The parser's fragments always join into one JSON object; anything else would be a bug
    # there, and an object is what every client expects. The object goes out as written, as
    # the stream sends it: a re-encode would turn integers past 64 bits into floats.
    if not text:
        return {}
    value = orjson.loads(text)
    return orjson.Fragment(text) if isinstance(value, dict) else {"value": value}


class MessagesAnswer:
    """One Messages request's encoders (gateway.core.answer.Answer)."""

    def __init__(
        self,
        rid: str,
        model: str,
        codec: ReasoningCodec,
        stops: tuple[str, ...],
        headers: Mapping[str, str],
        *,
        show_thinking: bool = True,
    ) -> None:
        self._id = "msg_" + rid
        self._show_thinking = show_thinking
        self._model = model
        self._codec = codec
        self._stops = stops
        self._headers = headers

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    def stream_encoder(self) -> MessageStream:
        return MessageStream(
            self._id, self._model, self._codec, self._stops, show_thinking=self._show_thinking
        )

    def collector(self) -> MessageCollector:
        return MessageCollector(
            self._id, self._model, self._codec, self._stops, show_thinking=self._show_thinking
        )
