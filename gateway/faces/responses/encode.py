"""Hop 6 of the Responses face: output items from the core's deltas, as SSE events (in the order
the openai SDK's responses.stream() checks) or as one response object.

`ItemWriter` is the one state machine both paths share: items open in output order
(reasoning, message, function_call, custom_tool_call), a message's content part opens before its
text deltas, each item's `done` event repeats its type and id, and a reasoning item carries
`encrypted_content` (gateway.core.reasoning_codec) when the request's `include` asks for
`reasoning.encrypted_content` (as Codex does), so a `store: false` client that replays it gets
the same prompt back; its `content` holds the same text for clients that do not ask.

An item closes when the next one opens or the answer ends: the one still open when
max_output_tokens cut the answer (or the engine failed) is `incomplete`, as OpenAI marks it, so
that no client runs a function call whose arguments were cut; the items before it are
`completed`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.answer import Finish
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.errors import ContextLengthError, GatewayError
from gateway.faces.responses.convert import ToolNames, custom_input
from gateway.parsers.base import (
    ContentDelta,
    ParsedDelta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)

Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResponseInfo:
    """What the response object echoes of its request."""

    response_id: str
    model: str
    created_at: int
    echo: Mapping[str, Any]  # instructions, tools, tool_choice, ... as the client sent them


def usage_body(finish: Finish) -> dict[str, Any]:
    usage = finish.usage
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def response_object(
    info: ResponseInfo,
    status: str,
    output: list[dict[str, Any]],
    *,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": info.response_id,
        "object": "response",
        "created_at": info.created_at,
        "status": status,
        "model": info.model,
        "output": output,
        "usage": usage,
        "error": error,
        "incomplete_details": incomplete,
        **info.echo,
    }


class ItemWriter:
    """Parsed deltas -> Responses output-item events (dicts, no sequence numbers yet)."""

    def __init__(
        self, codec: ReasoningCodec, names: ToolNames, rid: str, *, encrypted: bool = True
    ) -> None:
        self._codec = codec
        self._encrypted = encrypted
        self._names = names
        self._rid = rid
        self.items: list[dict[str, Any]] = []  # finished items, in output order
        self._open: dict[str, Any] | None = None
        self._text: list[str] = []  # the open item's text (reasoning, message, arguments)
        self._held = ""  # message text that is only whitespace so far

    @property
    def index(self) -> int:
        return len(self.items)

    def feed(self, deltas: list[ParsedDelta]) -> list[Event]:
        events: list[Event] = []
        for delta in deltas:
            if type(delta) is ReasoningDelta:
                if delta.text:
                    self._reasoning(delta.text, events)
            elif type(delta) is ContentDelta:
                self._message(delta.text, events)
            elif type(delta) is ToolCallStart:
                self._call(delta, events)
            elif (
                type(delta) is ToolCallArgumentsDelta and self._open is not None and delta.fragment
            ):
                self._arguments(delta.fragment, events)
        return events

    def _start(self, item: dict[str, Any], prefix: str, events: list[Event]) -> None:
        self._close(events)
        # Unique within the response: the item's position, after the one before it closed.
        item["id"] = f"{prefix}_{self._rid}_{self.index}"
        self._open = item
        self._text = []
        events.append(
            {"type": "response.output_item.added", "output_index": self.index, "item": dict(item)}
        )

    def extend(self, kind: str, text: str) -> str | None:
        """`text` is more of the open item when that item is of `kind` (reasoning or message):
        recorded as `feed` would, and the item's id returned; else None (use `feed`)."""
        open_ = self._open
        if open_ is None or open_["type"] != kind:
            return None
        if kind == "reasoning":
            self._held = ""
        self._text.append(text)
        return str(open_["id"])

    def _reasoning(self, text: str, events: list[Event]) -> None:
        self._held = ""
        open_ = self._open
        if open_ is None or open_["type"] != "reasoning":
            item = {"id": "", "type": "reasoning", "summary": [], "content": []}
            self._start(item, "rs", events)
            open_ = item
        self._text.append(text)
        events.append(
            {
                "type": "response.reasoning_text.delta",
                "item_id": open_["id"],
                "output_index": self.index,
                "content_index": 0,
                "delta": text,
            }
        )

    def _message(self, text: str, events: list[Event]) -> None:
        open_ = self._open
        if open_ is None or open_["type"] != "message":
            pending = self._held + text
            if not pending.strip():
                self._held = pending
                return
            self._held, text = "", pending
            item = {
                "id": "",
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            self._start(item, "msg", events)
            open_ = item
            events.append(
                {
                    "type": "response.content_part.added",
                    "item_id": open_["id"],
                    "output_index": self.index,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }
            )
        if text:
            self._text.append(text)
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": open_["id"],
                    "output_index": self.index,
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                }
            )

    def _call(self, delta: ToolCallStart, events: list[Event]) -> None:
        self._held = ""
        call_id = delta.id
        if delta.name in self._names.custom:
            item: dict[str, Any] = {
                "id": "",
                "type": "custom_tool_call",
                "call_id": call_id,
                "name": delta.name,
                "input": "",
                "status": "in_progress",
            }
        else:
            namespace, name = self._names.client(delta.name)
            item = {
                "id": "",
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": "",
                "status": "in_progress",
            }
            if namespace is not None:
                item["namespace"] = namespace
        self._start(item, "ctc" if item["type"] == "custom_tool_call" else "fc", events)

    def _arguments(self, fragment: str, events: list[Event]) -> None:
        open_ = self._open
        assert open_ is not None
        self._text.append(fragment)
        if open_["type"] == "function_call":
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": open_["id"],
                    "output_index": self.index,
                    "delta": fragment,
                }
            )
        # A custom tool's input is the string inside the arguments: sent whole when it closes.

    def _close(self, events: list[Event], *, cut: bool = False) -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        status = "incomplete" if cut else "completed"
        text = "".join(self._text)
        index, item_id, kind = self.index, item["id"], item["type"]
        common = {"item_id": item_id, "output_index": index}
        if kind == "reasoning":
            events.append(
                {"type": "response.reasoning_text.done", **common, "content_index": 0, "text": text}
            )
            item["content"] = [{"type": "reasoning_text", "text": text}]
            if self._encrypted:
                item["encrypted_content"] = self._codec.encode(text)
        elif kind == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            events.append(
                {
                    "type": "response.output_text.done",
                    **common,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                }
            )
            events.append(
                {"type": "response.content_part.done", **common, "content_index": 0, "part": part}
            )
            item["content"] = [part]
            item["status"] = status
        elif kind == "function_call":
            arguments = text or "{}"
            events.append(
                {"type": "response.function_call_arguments.done", **common, "arguments": arguments}
            )
            item["arguments"] = arguments
            item["status"] = status
        else:
            raw = custom_input(text)
            events.append({"type": "response.custom_tool_call_input.delta", **common, "delta": raw})
            events.append({"type": "response.custom_tool_call_input.done", **common, "input": raw})
            item["input"] = raw
            item["status"] = status
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        self.items.append(item)

    def close(self, *, cut: bool = False) -> list[Event]:
        """The open item's end; `cut`: the answer stopped before the item did."""
        events: list[Event] = []
        self._close(events, cut=cut)
        return events


def final_state(finish: Finish) -> tuple[str, dict[str, Any] | None]:
    """(status, incomplete_details)."""
    if finish.reason == "length":
        # Also with a tool call: it may be cut short, and a client must not run it as complete.
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def error_object(error: GatewayError) -> dict[str, Any]:
    code = "context_length_exceeded" if isinstance(error, ContextLengthError) else None
    return {"code": code or error.code or "server_error", "message": error.message}


Completed = Callable[[dict[str, Any]], None]

# One text delta for the open item of its kind: the event it makes, and what follows the text.
_FAST: dict[type, str] = {ReasoningDelta: "reasoning", ContentDelta: "message"}
_FAST_EVENTS = {
    "reasoning": b"response.reasoning_text.delta",
    "message": b"response.output_text.delta",
}
_FAST_TAILS = {
    "reasoning": b',"sequence_number":',
    "message": b',"logprobs":[],"sequence_number":',
}


class ResponseStream:
    """The face's StreamEncoder. `on_done` gets the final response object (the store)."""

    def __init__(
        self, info: ResponseInfo, writer: ItemWriter, on_done: Completed | None = None
    ) -> None:
        self._info = info
        self._writer = writer
        self._on_done = on_done
        self._sequence = 0
        # The fast path's constant bytes for the open item.
        self._fast_key: tuple[str, str] | None = None
        self._fast_head = b""

    def _frames(self, events: list[Event]) -> bytes:
        out = []
        for event in events:
            event["sequence_number"] = self._sequence
            self._sequence += 1
            out.append(b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event))
        return b"\n\n".join(out) + b"\n\n" if out else b""

    def _lifecycle(self, kind: str, response: dict[str, Any]) -> Event:
        return {"type": kind, "response": response}

    def start(self, prompt_tokens: int | None = None) -> bytes:
        snapshot = response_object(self._info, "in_progress", [])
        return self._frames(
            [
                self._lifecycle("response.created", snapshot),
                self._lifecycle("response.in_progress", dict(snapshot)),
            ]
        )

    @property
    def sends_keepalive(self) -> bool:
        return True

    def keepalive(self) -> bytes | None:
        # A lifecycle event clients already handle (the SDK checks only its response id):
        # Codex's idle timer counts events, not bytes, so an SSE comment would not do.
        snapshot = response_object(self._info, "in_progress", [])
        return self._frames([self._lifecycle("response.in_progress", snapshot)])

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        if len(deltas) == 1:
            # The usual event: more text for the open item. The bytes `feed` + `_frames` would
            # make, without the event dict.
            delta = deltas[0]
            kind = _FAST.get(type(delta))
            if kind is not None and delta.text:  # type: ignore[union-attr]
                text: str = delta.text  # type: ignore[union-attr]
                item_id = self._writer.extend(kind, text)
                if item_id is not None:
                    return self._fast_frame(kind, item_id, text)
        return self._frames(self._writer.feed(deltas))

    def _fast_frame(self, kind: str, item_id: str, text: str) -> bytes:
        if self._fast_key != (kind, item_id):
            self._fast_key = (kind, item_id)
            name = _FAST_EVENTS[kind]
            self._fast_head = (
                b"event: "
                + name
                + b'\ndata: {"type":"'
                + name
                + b'","item_id":'
                + orjson.dumps(item_id)
                + b',"output_index":'
                + str(self._writer.index).encode()
                + b',"content_index":0,"delta":'
            )
        sequence = self._sequence
        self._sequence += 1
        tail = _FAST_TAILS[kind]
        return self._fast_head + orjson.dumps(text) + tail + str(sequence).encode() + b"}\n\n"

    def finish(self, finish: Finish) -> bytes:
        status, incomplete = final_state(finish)
        events = self._writer.close(cut=status == "incomplete")
        response = response_object(
            self._info,
            status,
            self._writer.items,
            usage=usage_body(finish),
            incomplete=incomplete,
        )
        if self._on_done is not None:
            self._on_done(response)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return self._frames([*events, self._lifecycle(kind, response)])

    def error(self, error: GatewayError) -> bytes:
        events = self._writer.close(cut=True)
        response = response_object(
            self._info, "failed", self._writer.items, error=error_object(error)
        )
        return self._frames([*events, self._lifecycle("response.failed", response)])


class ResponseCollector:
    """The face's Collector: the same items, as one response object."""

    def __init__(
        self, info: ResponseInfo, writer: ItemWriter, on_done: Completed | None = None
    ) -> None:
        self._info = info
        self._writer = writer
        self._on_done = on_done

    def add(self, deltas: list[ParsedDelta]) -> None:
        self._writer.feed(deltas)

    def body(self, finish: Finish) -> bytes:
        status, incomplete = final_state(finish)
        self._writer.close(cut=status == "incomplete")
        response = response_object(
            self._info,
            status,
            self._writer.items,
            usage=usage_body(finish),
            incomplete=incomplete,
        )
        if self._on_done is not None:
            self._on_done(response)
        return orjson.dumps(response)


class ResponsesAnswer:
    """One Responses request's encoders (gateway.core.answer.Answer)."""

    def __init__(
        self,
        *,
        rid: str,
        info: ResponseInfo,
        codec: ReasoningCodec,
        names: ToolNames,
        on_done: Completed | None,
        encrypted_reasoning: bool = True,
    ) -> None:
        self._rid = rid
        self._info = info
        self._codec = codec
        self._names = names
        self._on_done = on_done
        self._encrypted = encrypted_reasoning

    @property
    def headers(self) -> Mapping[str, str]:
        return {}

    def _writer(self) -> ItemWriter:
        return ItemWriter(self._codec, self._names, self._rid, encrypted=self._encrypted)

    def stream_encoder(self) -> ResponseStream:
        return ResponseStream(self._info, self._writer(), self._on_done)

    def collector(self) -> ResponseCollector:
        return ResponseCollector(self._info, self._writer(), self._on_done)
