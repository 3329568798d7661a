"""The recorder's Responses answers: the official openai client's stream validator accepts them."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import (
    CustomToolParam,
    FunctionToolParam,
    NamespaceToolParam,
    ResponseIncludable,
    ResponseInputItemParam,
)

from scripts.record_agent_requests import MODEL, serving
from scripts.responses_answers import (
    AUX_TEXT,
    CALL_ID,
    ENCRYPTED_CONTENT,
    FINAL_TEXT,
    REASONING_TEXT,
    answer_items,
    stream_events,
)

SHELL = {"name": "exec_command", "input": {"cmd": "cat notes.txt"}}
FUNCTION: FunctionToolParam = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object"},
    "strict": False,
}
PATCH_TOOL: CustomToolParam = {"type": "custom", "name": "apply_patch", "description": "Edits."}
NAMESPACE: NamespaceToolParam = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Agents.",
    "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
}
ENCRYPTED: list[ResponseIncludable] = ["reasoning.encrypted_content"]
Recorder = Callable[[dict[str, Any]], openai.OpenAI]


@pytest.fixture
def recorder_for(tmp_path: Path) -> Iterator[Recorder]:
    """Starts a recorder that makes the given tool call; gives a client of it."""
    numbers = itertools.count()
    with contextlib.ExitStack() as servers:

        def start(tool_call: dict[str, Any]) -> openai.OpenAI:
            records = tmp_path / f"records-{next(numbers)}"
            server = servers.enter_context(serving(records, tool_call))
            return openai.OpenAI(base_url=f"{server.url}/v1", api_key="test-key", max_retries=0)

        yield start


def test_function_call_stream_passes_the_sdk_validator(recorder_for: Recorder) -> None:
    client = recorder_for(SHELL)
    with client.responses.stream(
        model=MODEL, input="Read notes.txt", tools=[FUNCTION], include=ENCRYPTED
    ) as stream:
        kinds = [event.type for event in stream]
        response = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    reasoning, call = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content == ENCRYPTED_CONTENT
    assert reasoning.content is not None
    assert reasoning.content[0].text == REASONING_TEXT
    assert call.type == "function_call"
    assert call.call_id == CALL_ID
    assert json.loads(call.arguments) == SHELL["input"]
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_custom_and_namespaced_calls(recorder_for: Recorder) -> None:
    patch = recorder_for({"name": "apply_patch", "input": "*** Begin Patch\n"})
    with patch.responses.stream(model=MODEL, input="edit", tools=[PATCH_TOOL]) as stream:
        _, call = stream.get_final_response().output
    assert call.type == "custom_tool_call"
    assert call.input == "*** Begin Patch\n"
    close = {"name": "close_agent", "namespace": "multi_agent_v1", "input": {"target": "a"}}
    agents = recorder_for(close)
    with agents.responses.stream(model=MODEL, input="close", tools=[NAMESPACE]) as stream:
        reasoning, call = stream.get_final_response().output
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content is None  # not asked for in include
    assert call.type == "function_call"
    assert (call.namespace, call.name) == ("multi_agent_v1", "close_agent")


def test_call_output_gets_the_final_message_and_others_a_plain_one(recorder_for: Recorder) -> None:
    client = recorder_for(SHELL)
    output: ResponseInputItemParam = {
        "type": "function_call_output",
        "call_id": CALL_ID,
        "output": "line one",
    }
    with client.responses.stream(model=MODEL, input=[output], tools=[FUNCTION]) as stream:
        assert stream.get_final_response().output_text == FINAL_TEXT
    unoffered = client.responses.create(model=MODEL, input="hi")  # not streamed, no tools
    assert unoffered.output_text == AUX_TEXT
    assert [model.id for model in client.models.list()] == [MODEL]


def test_events_are_numbered_and_typed() -> None:
    body: dict[str, Any] = {"model": MODEL, "tools": [FUNCTION], "include": ENCRYPTED}
    items = answer_items(body, SHELL)
    events = list(stream_events("resp_1", body, items, input_tokens=10))
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert added == ["reasoning", "function_call"]
    assert done == items
    assert "encrypted_content" not in events[2]["item"]  # only the finished item carries it
    completed = events[-1]["response"]
    assert completed["output"] == items
    assert completed["id"] == events[0]["response"]["id"] == "resp_1"
