"""OpenAI Responses SSE, read strictly: frames, then the event grammar clients rely on.

`parse_sse` (shared with the Anthropic checker) splits raw bytes into (event name, data) pairs
and asserts that each frame's `event:` equals its data's `type`. `check_stream` walks the events
through the order the openai SDK's `responses.stream()` enforces and Codex reads
(AGENT_APIS.md section 3.3), plus this gateway's own promises (items never interleave, ids
unique, usage adds up), and returns the final response object, so a test can compare it with a
non-streamed answer. `sdk_final` hands raw bytes to the SDK itself, through a mock transport.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx2  # the openai SDK's own HTTP client package
import openai

from tests.support.anthropic_events import Event, parse_sse

__all__ = ["Checked", "Event", "check_stream", "check_usage", "parse_sse", "sdk_final"]

LIFECYCLE = {"response.created", "response.in_progress"}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
ITEM_PREFIX = {
    "reasoning": "rs_",
    "message": "msg_",
    "function_call": "fc_",
    "custom_tool_call": "ctc_",
}
CALL_ID = re.compile(r"call_[A-Za-z0-9_-]+")
# Per item type: the content events it may carry, and the one that ends its content.
ITEM_EVENTS = {
    "reasoning": {"response.reasoning_text.delta", "response.reasoning_text.done"},
    "message": {
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
    },
    "function_call": {
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    },
    "custom_tool_call": {
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    },
}


def check_usage(usage: dict[str, Any]) -> None:
    """The usage Codex requires (input, output, total) and the details it reads."""
    assert set(usage) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }, usage
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert isinstance(usage[key], int), usage
        assert usage[key] >= 0, usage
    cached = usage["input_tokens_details"]["cached_tokens"]
    reasoning = usage["output_tokens_details"]["reasoning_tokens"]
    assert 0 <= cached <= usage["input_tokens"], usage
    assert 0 <= reasoning <= usage["output_tokens"], usage
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], usage


@dataclass
class _Item:
    index: int
    added: dict[str, Any]
    events: list[Event] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.added["type"])

    def feed(self, event: Event) -> None:
        data = event.data
        assert event.name in ITEM_EVENTS[self.kind], f"{event.name} inside a {self.kind} item"
        assert data["item_id"] == self.added["id"], f"{event.name} names another item"
        assert data["output_index"] == self.index, f"{event.name} names another output_index"
        names = [e.name for e in self.events]
        if self.kind == "message":
            if event.name == "response.content_part.added":
                assert not names, "content_part.added opens the message's content"
                assert data["content_index"] == 0
                assert data["part"] == {"type": "output_text", "text": "", "annotations": []}
            else:
                # What the SDK indexes: content[content_index] must exist.
                assert names[:1] == ["response.content_part.added"], f"{event.name} before it"
                assert data["content_index"] == 0
        for done in (
            "response.reasoning_text.done",
            "response.output_text.done",
            "response.function_call_arguments.done",
            "response.custom_tool_call_input.done",
        ):
            assert done not in names or event.name == "response.content_part.done", (
                f"{event.name} after {done}"
            )
        assert "response.content_part.done" not in names, f"{event.name} after content_part.done"
        self.events.append(event)

    def _deltas(self, name: str) -> str:
        return "".join(e.data["delta"] for e in self.events if e.name == name)

    def _one(self, name: str) -> dict[str, Any]:
        found = [e.data for e in self.events if e.name == name]
        assert len(found) == 1, f"{self.kind} item {self.index}: {len(found)} x {name}"
        return found[0]

    def check_done(self, item: dict[str, Any]) -> None:
        """The output_item.done item against its added item and its content events."""
        added, kind = self.added, self.kind
        assert item["type"] == kind, "output_item.done changed the item's type"
        assert item["id"] == added["id"], "output_item.done changed the item's id"
        if kind == "reasoning":
            text = self._deltas("response.reasoning_text.delta")
            assert text, "an empty reasoning item"
            assert self._one("response.reasoning_text.done")["text"] == text
            assert isinstance(item["summary"], list), "summary must be a list (Codex drops it)"
            assert item["content"] == [{"type": "reasoning_text", "text": text}]
            # Present when the request's include asked for it (the caller checks which).
            if "encrypted_content" in item:
                assert item["encrypted_content"].startswith("fbx1.")
        elif kind == "message":
            text = self._deltas("response.output_text.delta")
            assert text.strip(), "an empty or whitespace-only message"
            assert self._one("response.output_text.done")["text"] == text
            part = {"type": "output_text", "text": text, "annotations": []}
            assert self._one("response.content_part.done")["part"] == part
            assert self.events[-1].name == "response.content_part.done"
            assert item["content"] == [part]
            assert item["role"] == "assistant"
            # Which of the two: the terminal event decides (_check_terminal).
            assert item["status"] in ("completed", "incomplete")
        elif kind == "function_call":
            arguments = self._deltas("response.function_call_arguments.delta")
            done = self._one("response.function_call_arguments.done")["arguments"]
            assert done == (arguments or "{}")
            assert self.events[-1].name == "response.function_call_arguments.done"
            assert item["arguments"] == done
            assert isinstance(json.loads(done), dict), f"arguments are not an object: {done!r}"
            self._call_fields(item)
        else:
            raw = self._deltas("response.custom_tool_call_input.delta")
            assert self._one("response.custom_tool_call_input.done")["input"] == raw
            assert self.events[-1].name == "response.custom_tool_call_input.done"
            assert item["input"] == raw
            self._call_fields(item)

    def _call_fields(self, item: dict[str, Any]) -> None:
        added = self.added
        assert item["status"] in ("completed", "incomplete")
        assert item["call_id"] == added["call_id"], "output_item.done changed the call_id"
        assert CALL_ID.fullmatch(item["call_id"]), item["call_id"]
        assert item["name"] == added["name"]
        assert item.get("namespace") == added.get("namespace")


def _check_added(item: dict[str, Any], seen_ids: set[str], seen_calls: set[str]) -> None:
    kind = item["type"]
    assert kind in ITEM_PREFIX, f"an output item of type {kind!r}"
    assert item["id"].startswith(ITEM_PREFIX[kind]), item["id"]
    assert item["id"] not in seen_ids, f"item id {item['id']} used twice"
    seen_ids.add(item["id"])
    if kind == "reasoning":
        assert item["summary"] == []
        assert item["content"] == []
    elif kind == "message":
        assert item["content"] == []
        assert item["status"] == "in_progress"
    else:
        assert item["status"] == "in_progress"
        assert item["arguments" if kind == "function_call" else "input"] == ""
        assert item["call_id"] not in seen_calls, f"call_id {item['call_id']} used twice"
        seen_calls.add(item["call_id"])
        if "namespace" in item:
            assert isinstance(item["namespace"], str)
            assert item["namespace"]


@dataclass
class Checked:
    events: list[Event]
    response: dict[str, Any]  # the terminal event's response object

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.events]

    def before_first_item(self) -> list[str]:
        names: list[str] = []
        for name in self.names:
            if name == "response.output_item.added":
                break
            names.append(name)
        return names


def check_stream(events: list[Event]) -> Checked:
    """The grammar, asserted; returns the events and the final response they end with."""
    assert len(events) >= 3, f"a stream of {len(events)} events"
    assert events[0].name == "response.created", f"first event: {events[0].name}"
    assert events[1].name == "response.in_progress", f"second event: {events[1].name}"
    first = events[0].data["response"]
    response_id = first["id"]
    assert response_id.startswith("resp_"), response_id
    assert first["object"] == "response"
    assert first["output"] == []
    assert first["usage"] is None
    sequence = [e.data["sequence_number"] for e in events]
    assert sequence[0] == 0, f"sequence_number starts at {sequence[0]}"
    for before, after in itertools.pairwise(sequence):
        assert isinstance(after, int)
        assert after > before, f"sequence_number {after} after {before}"
    # OpenAI's streams count every event, keepalives included: no number is skipped.
    assert sequence == list(range(len(events))), f"sequence_number gaps: {sequence}"
    done_items: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    seen_calls: set[str] = set()
    open_item: _Item | None = None
    added_count = 0
    for position, event in enumerate(events):
        data, name = event.data, event.name
        if name in LIFECYCLE or name in TERMINAL:
            response = data["response"]
            assert response["id"] == response_id, "the response id changed"
            assert response["model"] == first["model"], "the model changed"
        if name in LIFECYCLE:
            assert name == "response.in_progress" or position == 0, "a second response.created"
            assert data["response"]["status"] == "in_progress"
            assert data["response"]["output"] == []  # keepalives carry no (partial) output
            continue
        if name in TERMINAL:
            assert position == len(events) - 1, f"{name} is not the last event"
            assert open_item is None, f"{name} while output item {added_count - 1} is open"
            return Checked(events, _check_terminal(name, data["response"], done_items))
        if name == "response.output_item.added":
            assert open_item is None, "an item added while another is open"
            assert data["output_index"] == added_count, "output_index not the next position"
            _check_added(data["item"], seen_ids, seen_calls)
            open_item = _Item(added_count, data["item"])
            added_count += 1
        elif name == "response.output_item.done":
            assert open_item is not None, "output_item.done without an open item"
            assert data["output_index"] == open_item.index
            open_item.check_done(data["item"])
            done_items.append(data["item"])
            open_item = None
        else:
            assert open_item is not None, f"{name} before its output_item.added"
            open_item.feed(event)
    raise AssertionError("the stream ended without response.completed/incomplete/failed")


def _check_terminal(
    name: str, response: dict[str, Any], done_items: list[dict[str, Any]]
) -> dict[str, Any]:
    status = name.removeprefix("response.")
    assert response["status"] == status
    assert response["object"] == "response"
    assert response["output"] == done_items, "the final output is not the items sent"
    # Items close when the next opens: only the last can be unfinished, when the answer was.
    statuses = [item["status"] for item in done_items if "status" in item]
    last = done_items[-1].get("status") if done_items else None
    if status == "completed" or last is None:
        assert set(statuses) <= {"completed"}, statuses
    else:
        assert statuses[:-1] == ["completed"] * (len(statuses) - 1), statuses
        assert last == "incomplete", "the item open when the answer stopped is incomplete"
    if status == "failed":
        error = response["error"]
        assert set(error) == {"code", "message"}, error
        assert error["code"]
        assert error["message"]
        return response
    assert response["error"] is None
    check_usage(response["usage"])
    if status == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert response["incomplete_details"] is None
    return response


def sdk_final(raw: bytes, **stream_kwargs: Any) -> openai.types.responses.ParsedResponse[Any]:
    """Raw SSE bytes through the openai SDK's own `responses.stream()` checks (no network)."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    with (
        openai.OpenAI(base_url="http://sdk.test/v1", api_key="k", http_client=http) as client,
        client.responses.stream(model="m", input="x", **stream_kwargs) as stream,
    ):
        for _ in stream:
            pass
        return stream.get_final_response()
