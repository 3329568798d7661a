"""OpenAI Responses requests -> the core request and the renderer's messages
(gateway/faces/responses/convert.py and route._core), and the prefix property through the real
parser, encoders and renderer."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gateway.components import load_renderer
from gateway.core.answer import Finish, Usage
from gateway.core.images import ImageSlots
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.request import CoreRequest
from gateway.core.retry import request_session_key
from gateway.errors import InvalidRequestError
from gateway.faces.responses import route
from gateway.faces.responses.convert import (
    ToolNames,
    convert_input,
    convert_tool_choice,
    convert_tools,
    custom_input,
    effort,
    flat_name,
)
from gateway.faces.responses.encode import (
    ItemWriter,
    ResponseCollector,
    ResponseInfo,
    ResponseStream,
)
from gateway.faces.responses.protocol import ResponsesRequest
from gateway.observability.metrics import Metrics
from gateway.parsers.registry import get_parser_factory
from gateway.responses_store import ResponseStore, StoredResponses
from gateway.settings import Settings
from gateway.state import AppState
from tests.gateway.parsers.support import render_call
from tests.support.responses_events import check_stream, parse_sse

SETTINGS = Settings(engines=["http://engine:30000"])
CODEC = ReasoningCodec(b"convert-key", max_age_s=3600, max_text_bytes=1 << 20)
RENDERER = load_renderer({})
METRICS = Metrics(process_metrics=False)
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "opts": {"type": "object"},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
DOCS: dict[str, Any] = {
    "type": "namespace",
    "name": "mcp__docs__",
    "description": "Tools of the docs MCP server",
    "tools": [
        {
            "type": "function",
            "name": "search",
            "description": "Search the docs",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
        {"type": "function", "name": "fetch", "parameters": {"type": "object"}},
    ],
}
PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF',
    },
}
WEB_SEARCH: dict[str, Any] = {"type": "web_search", "external_web_access": False}
TOOLS = [WEATHER, DOCS, PATCH, WEB_SEARCH]


def state(store: ResponseStore | None = None) -> AppState:
    local = store or ResponseStore(max_entries=10, max_bytes=1 << 20, ttl_s=60)
    responses = StoredResponses(local, METRICS)
    fake = SimpleNamespace(
        settings=SETTINGS, reasoning_codec=CODEC, responses=responses, metrics=METRICS
    )
    return cast(AppState, fake)


def core_of(
    headers: dict[str, str] | None = None,
    saved: ResponseStore | None = None,
    **fields: Any,
) -> CoreRequest:
    raw: dict[str, Any] = {"model": "gpt-5.3-codex", "input": "hi", **fields}
    request = ResponsesRequest.model_validate(raw)
    found = {k.encode(): v for k, v in (headers or {}).items()}
    fake = state(saved)
    history, _ = asyncio.run(route._history(fake, request))
    items, _ = asyncio.run(route._referenced(fake, request.input, history))
    core, _, _ = route._core(fake, request, raw, 100, found, history, items=items)
    return core


def messages_of(**fields: Any) -> list[dict[str, Any]]:
    return core_of(**fields).messages


def refused(**fields: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        core_of(**fields)
    return info.value


def message(role: str, text: str, kind: str = "input_text") -> dict[str, Any]:
    """As Codex sends a message: typed, with parts, and no id."""
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def prompt_of(core: CoreRequest) -> str:
    prompt = RENDERER.render(core.messages, core.tools, core.template_kwargs)
    if not core.thinking:
        prompt += "</think>"  # what gateway.core.run.render_prompt adds
    return prompt


# -- messages and roles ---------------------------------------------------------------------------


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    assert messages_of(instructions="Be brief.", input="Hello") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]
    assert messages_of(input="Hello") == [{"role": "user", "content": "Hello"}]


def test_codex_shaped_messages_without_ids() -> None:
    items = [
        message("developer", "<permissions>read-only</permissions>"),
        message("user", "<environment_context>cwd</environment_context>"),
        message("user", "Fix the bug"),
        {"role": "user", "content": "an easy message, no type"},
        message("system", "<reminder>mid</reminder>"),
    ]
    out = messages_of(instructions="You are Codex.", input=items)
    assert [m["role"] for m in out] == ["system", "system", "user", "user", "user", "system"]
    assert out[0]["content"] == "You are Codex."
    assert out[1]["content"] == [{"type": "text", "text": "<permissions>read-only</permissions>"}]
    assert out[3]["content"] == [{"type": "text", "text": "Fix the bug"}]
    assert out[4]["content"] == "an easy message, no type"


def test_developer_messages_render_as_system_where_they_stand() -> None:
    items = [message("user", "one"), message("developer", "DEV RULES"), message("user", "two")]
    prompt = prompt_of(core_of(input=items))
    assert "<|system|>DEV RULES" in prompt
    assert prompt.index("<|user|>one") < prompt.index("<|system|>DEV RULES")
    assert prompt.index("<|system|>DEV RULES") < prompt.index("<|user|>two")
    assert "developer" not in prompt


def test_assistant_output_text_and_refusals_join() -> None:
    assistant = {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "a", "annotations": []},
            {"type": "refusal", "refusal": "b"},
        ],
    }
    out = messages_of(input=[message("user", "q"), assistant, message("user", "n")])
    assert out[1] == {"role": "assistant", "content": "ab"}


def test_an_output_without_a_call_id_is_a_tool_message_tied_to_no_call() -> None:
    # Codex's goal tool output after compaction (docs/architecture.md, "Tool results without
    # their call").
    orphan = {"type": "function_call_output", "id": "fco_1", "name": "goal", "output": "g"}
    custom = {"type": "custom_tool_call_output", "call_id": "", "output": "c"}
    out = messages_of(input=[message("user", "q"), orphan, custom])
    assert out[1:] == [{"role": "tool", "content": "g"}, {"role": "tool", "content": "c"}]


def test_an_empty_input_list_is_a_400() -> None:
    error = refused(input=[])
    assert error.param == "input"


@pytest.mark.parametrize(
    ("item", "param", "says"),
    [
        ({"type": "message", "role": "robot", "content": "x"}, "input.1.role", "robot"),
        ({"type": "message", "role": "user", "content": 5}, "input.1.content", "string"),
        (
            {"type": "message", "role": "user", "content": [{"type": "input_video"}]},
            "input.1.content.0",
            "input_video",
        ),
        ({"type": "future_item", "x": 1}, "input.1", "future_item"),
        ({"type": "item_reference", "id": "msg_1"}, "input.1.id", "msg_1"),
        ({"content": "no type, no role"}, "input.1", "None"),
        (
            {"type": "function_call_output", "call_id": 5, "output": "x"},
            "input.1.call_id",
            "string",
        ),
        ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "input.1", "name"),
    ],
    ids=[
        "role",
        "content-type",
        "part-type",
        "unknown-item",
        "item-reference",
        "no-type",
        "call-id-not-a-string",
        "call-without-name",
    ],
)
def test_an_unreadable_item_is_a_400_naming_it(item: Any, param: str, says: str) -> None:
    error = refused(input=[message("user", "q"), item])
    assert error.param == param
    assert param in error.message
    assert says in error.message


@pytest.mark.parametrize("kind", ["input_file", "input_audio"])
def test_files_and_audio_are_a_400_naming_the_part(kind: str) -> None:
    part = {"type": kind, "file_data": "data:application/pdf;base64,JVBE"}
    content = [{"type": "input_text", "text": "What is this?"}, part]
    error = refused(input=[{"type": "message", "role": "user", "content": content}])
    assert error.param == "input.0.content.1"
    assert "input.0.content.1" in error.message
    assert kind in error.message


def test_an_input_image_without_a_url_is_a_400_naming_it() -> None:
    content = [{"type": "input_image", "file_id": "file-1"}]
    error = refused(input=[{"type": "message", "role": "user", "content": content}])
    assert error.param == "input.0.content.0"
    assert "file_id" in error.message


def test_images_in_messages_and_tool_outputs_become_sentinels() -> None:
    """input_image parts stay where they stand, as sentinels for the media stage."""
    output = [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "x"}]
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_image", "image_url": "data:image/png;base64,iVBO"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
    ]
    images = ImageSlots()
    out = convert_input(None, items, CODEC, ToolNames(), images)
    assert [(slot.url, slot.where) for slot in images.slots] == [
        ("data:image/png;base64,iVBO", "input.0.content.0"),
        ("x", "input.2.output.1"),
    ]
    assert out[0]["content"] == [{"type": "text", "text": f"\ue000{images.nonce}:0\ue001"}]
    assert out[2]["content"][1] == {"type": "text", "text": f"\ue000{images.nonce}:1\ue001"}


# -- the assistant's turn: reasoning, calls, outputs ----------------------------------------------


def test_one_response_s_items_become_one_assistant_message() -> None:
    items = [
        message("user", "Weather?"),
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "r"}]},
        message("assistant", "Checking.", "output_text"),
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "12C"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [
                {"type": "input_text", "text": "20C"},
                {"type": "input_text", "text": " dry"},
            ],
        },
    ]
    out = messages_of(input=items, tools=[WEATHER])
    assert out[1:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "r",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": [{"type": "text", "text": "20C"}, {"type": "text", "text": " dry"}],
        },
    ]
    prompt = prompt_of(core_of(input=items, tools=[WEATHER]))
    assert "<tool_response>12C</tool_response>" in prompt
    assert "<tool_response>20C dry</tool_response>" in prompt


def test_reasoning_after_a_call_opens_the_next_assistant_turn() -> None:
    items = [
        message("user", "q"),
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "one"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "two"}]},
        message("assistant", "done", "output_text"),
    ]
    out = messages_of(input=items, tools=[WEATHER])
    assert [(m["role"], m.get("reasoning_content")) for m in out] == [
        ("user", None),
        ("assistant", "one"),
        ("assistant", "two"),
    ]


def test_our_encrypted_content_restores_exactly_the_reasoning() -> None:
    exact = '  The model\'s reasoning, byte for byte:\n é "q" </think>?\n'
    item = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "a summary"}],
        "content": [{"type": "reasoning_text", "text": "an edited text"}],
        "encrypted_content": CODEC.encode(exact),
    }
    out = messages_of(input=[message("user", "q"), item, message("assistant", "A.", "output_text")])
    assert out[1] == {"role": "assistant", "content": "A.", "reasoning_content": exact}


FOREIGN_TOKENS = [
    None,
    "",
    "gAAAAABo-openai-encrypted-reasoning",
    "sglang-reasoning-v1.eJwrSS0uAQAEXQHB",
    ReasoningCodec(b"another-gateway", max_age_s=60, max_text_bytes=99).encode("x"),
    CODEC.encode("signed text")[:-3] + "AAA",
    12345,
]
FOREIGN_IDS = ["none", "empty", "openai", "sglang", "other-key", "tampered", "not-a-string"]


@pytest.mark.parametrize("token", FOREIGN_TOKENS, ids=FOREIGN_IDS)
def test_a_token_not_ours_falls_back_to_content_then_summary(token: Any) -> None:
    summary = [{"type": "summary_text", "text": "sum"}, {"type": "summary_text", "text": "mary"}]
    content = [
        {"type": "reasoning_text", "text": "visible "},
        {"type": "reasoning_text", "text": "r"},
    ]
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"summary": summary, "content": content}, "visible r"),
        ({"summary": summary, "content": []}, "summary"),
        ({"summary": summary}, "summary"),
        ({"summary": []}, ""),
    ]
    for fields, expected in cases:
        item: dict[str, Any] = {"type": "reasoning", **fields}
        if token is not None:
            item["encrypted_content"] = token
        items = [message("user", "q"), item, message("assistant", "A.", "output_text")]
        out = messages_of(input=items)
        assert out[1].get("reasoning_content") == expected, fields


def test_several_reasoning_items_of_one_turn_join_in_order() -> None:
    items = [
        message("user", "q"),
        {"type": "reasoning", "summary": [], "encrypted_content": CODEC.encode("one ")},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "two"}]},
        message("assistant", "a", "output_text"),
    ]
    assert messages_of(input=items)[1]["reasoning_content"] == "one two"


def test_a_custom_tool_call_and_its_output() -> None:
    raw = '*** Begin Patch\n*** Add File: a.txt\n+say "hi" \\ é\n*** End Patch\n'
    items = [
        message("user", "Add a file"),
        {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": raw},
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
    ]
    out = messages_of(input=items, tools=[PATCH])
    assert out[1]["tool_calls"] == [
        {
            "id": "call_p",
            "type": "function",
            "function": {"name": "apply_patch", "arguments": {"input": raw}},
        }
    ]
    assert out[2] == {"role": "tool", "tool_call_id": "call_p", "content": "Done!"}
    prompt = prompt_of(core_of(input=items, tools=[PATCH]))
    assert f"<tool_call>apply_patch<arg_key>input</arg_key><arg_value>{raw}</arg_value>" in prompt


@pytest.mark.parametrize(
    "call",
    [
        {"name": "search", "namespace": "mcp__docs__"},
        {"name": "mcp__docs__search"},
        {"name": "mcp__docs__search", "namespace": None},
    ],
    ids=["with-namespace", "flattened", "namespace-null"],
)
def test_a_namespaced_call_is_accepted_flattened_or_with_its_namespace(
    call: dict[str, Any],
) -> None:
    item = {"type": "function_call", "call_id": "c1", "arguments": '{"q": "x"}', **call}
    out = messages_of(input=[message("user", "q"), item], tools=[DOCS])
    assert out[1]["tool_calls"][0]["function"]["name"] == "mcp__docs__search"


# -- tools ----------------------------------------------------------------------------------------


def test_tools_are_flattened_for_the_model() -> None:
    tools, names = convert_tools(TOOLS)
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER["parameters"],
            },
        },
        {
            "type": "function",
            "function": {
                "name": "mcp__docs__search",
                "description": "Search the docs",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {"name": "mcp__docs__fetch", "parameters": {"type": "object"}},
        },
        {
            "type": "function",
            "function": {
                "name": "apply_patch",
                "description": "Edit files with a patch.\nThe `input` argument is free-form "
                "text in this lark grammar:\n" + PATCH["format"]["definition"],
                "parameters": {
                    "type": "object",
                    "properties": {"input": {"type": "string"}},
                    "required": ["input"],
                },
            },
        },
    ]
    assert names.namespaced == {
        "mcp__docs__search": ("mcp__docs__", "search"),
        "mcp__docs__fetch": ("mcp__docs__", "fetch"),
    }
    assert names.custom == {"apply_patch"}


def test_strict_never_reaches_the_prompt_and_the_grammar_does() -> None:
    prompt = prompt_of(core_of(tools=TOOLS))
    assert '"strict"' not in prompt
    assert "mcp__docs__search" in prompt
    assert "*** Begin Patch" in prompt
    assert "web_search" not in prompt


@pytest.mark.parametrize(
    ("namespace", "name", "flat"),
    [
        ("mcp__docs__", "search", "mcp__docs__search"),
        ("collab", "spawn", "collab__spawn"),
        ("plugin.", "run", "plugin.run"),
        ("x:", "y", "x:y"),
        ("a/", "b", "a/b"),
    ],
)
def test_flat_names_and_their_way_back(namespace: str, name: str, flat: str) -> None:
    assert flat_name(namespace, name) == flat
    tools, names = convert_tools(
        [{"type": "namespace", "name": namespace, "tools": [{"type": "function", "name": name}]}]
    )
    assert tools is not None
    assert tools[0]["function"]["name"] == flat
    assert names.client(flat) == (namespace, name)
    assert names.flat(name, namespace) == flat
    assert names.flat(flat, None) == flat
    assert names.client("other") == (None, "other")


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search", "external_web_access": False},
        {"type": "web_search_preview"},
        {"type": "tool_search"},
        {"type": "local_shell"},
        {"type": "file_search", "vector_store_ids": []},
        {"type": "image_generation"},
        {"type": "mcp", "server_label": "x"},
        {"no": "type"},
    ],
)
def test_tools_the_engine_cannot_run_are_dropped(tool: dict[str, Any]) -> None:
    tools, _ = convert_tools([tool, WEATHER])
    assert [t["function"]["name"] for t in tools or []] == ["get_weather"]
    core = core_of(tools=[tool], tool_choice="required")
    assert core.tools is None
    assert core.tool_choice is None  # no tools left: nothing to require


def test_non_function_members_of_a_namespace_are_dropped() -> None:
    namespace = {
        "type": "namespace",
        "name": "ns",
        "tools": [{"type": "custom", "name": "free"}, "junk", {"name": "implicit_function"}],
    }
    tools, names = convert_tools([namespace])
    assert [t["function"]["name"] for t in tools or []] == ["ns__implicit_function"]
    assert names.custom == set()


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "function", "parameters": {"type": "object"}}, "tools.0"),
        ({"type": "function", "name": ""}, "tools.0"),
        ({"type": "namespace", "tools": []}, "tools.0"),
        ({"type": "namespace", "name": "ns"}, "tools.0"),
        ({"type": "namespace", "name": "ns", "tools": [{"type": "function"}]}, "tools.0.tools.0"),
        ({"type": "custom"}, "tools.0"),
    ],
)
def test_a_tool_without_a_name_is_refused(tool: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        convert_tools([tool])
    assert info.value.param == param


def test_a_function_without_parameters_takes_an_object() -> None:
    tools, _ = convert_tools([{"type": "function", "name": "ping"}])
    assert tools == [
        {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}
    ]
    assert convert_tools(None) == (None, ToolNames())


# -- tool_choice ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
        (
            {"type": "function", "name": "search", "namespace": "mcp__docs__"},
            {"type": "function", "function": {"name": "mcp__docs__search"}},
        ),
        (
            {"type": "custom", "name": "apply_patch"},
            {"type": "function", "function": {"name": "apply_patch"}},
        ),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, "auto"),
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    _, names = convert_tools(TOOLS)
    assert convert_tool_choice(choice, names) == expected
    fields: dict[str, Any] = {} if choice is None else {"tool_choice": choice}
    assert core_of(tools=TOOLS, **fields).tool_choice == expected


@pytest.mark.parametrize(
    "choice", ["any", {"type": "function"}, {"type": "web_search_preview"}, {"name": "x"}]
)
def test_a_tool_choice_we_cannot_map_is_a_400(choice: Any) -> None:
    error = refused(tools=[WEATHER], tool_choice=choice)
    assert error.param == "tool_choice"


def test_tool_choice_none_hides_the_tools_from_the_model() -> None:
    core = core_of(tools=[WEATHER], tool_choice="none")
    assert core.tool_choice == "none"
    assert core.tools is not None  # gateway.core.run.render_prompt leaves them out


# -- effort, sampling, session --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kwargs", "on"),
    [
        ("none", {}, False),
        ("minimal", {"reasoning_effort": "low"}, True),
        ("low", {"reasoning_effort": "low"}, True),
        ("medium", {"reasoning_effort": "high"}, True),
        ("high", {"reasoning_effort": "high"}, True),
        ("xhigh", {"reasoning_effort": "max"}, True),
        (None, {}, True),
    ],
)
def test_effort(value: str | None, kwargs: dict[str, str], on: bool) -> None:
    assert effort(value) == (kwargs, on)
    core = core_of(reasoning={"effort": value, "summary": "auto"})
    assert (core.template_kwargs, core.thinking) == (kwargs, on)


def test_effort_reaches_the_rendered_prompt_and_none_closes_the_reasoning() -> None:
    prompts = {e: prompt_of(core_of(reasoning={"effort": e})) for e in ("low", "high", "xhigh")}
    assert "Reasoning Effort: Low" in prompts["low"]
    assert "Reasoning Effort: High" in prompts["high"]
    assert "Reasoning Effort: Max" in prompts["xhigh"]
    off = prompt_of(core_of(reasoning={"effort": "none"}))
    assert off.endswith("<|assistant|><think></think>")


def test_sampling_and_limits() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    core = core_of(
        max_output_tokens=10**9,
        temperature=0.2,
        top_p=0.9,
        text={"format": {"type": "json_schema", "name": "out", "strict": True, "schema": schema}},
        stream=True,
    )
    assert core.sampling.max_tokens == SETTINGS.limits.max_tokens
    assert (core.sampling.temperature, core.sampling.top_p) == (0.2, 0.9)
    assert json.loads(core.sampling.json_schema or "") == schema
    assert core.clamp_max_tokens is True
    assert core.stream is True
    assert core.api == "responses"
    assert core.model == "gpt-5.3-codex"
    assert core_of(max_output_tokens=64).sampling.max_tokens == 64
    assert core_of().sampling.max_tokens is None  # the server picks: what fits
    fmt = {"format": {"type": "json_object"}}
    assert json.loads(core_of(text=fmt).sampling.json_schema or "") == {"type": "object"}
    plain = {"format": {"type": "text"}, "verbosity": "low"}
    assert core_of(text=plain).sampling.json_schema is None


def test_codex_fields_and_unknown_fields_are_accepted_and_change_nothing() -> None:
    plain = core_of(tools=[WEATHER])
    noisy = core_of(
        tools=[WEATHER],
        tool_choice="auto",
        parallel_tool_calls=False,
        store=False,
        include=["reasoning.encrypted_content"],
        prompt_cache_key="conv-1",
        metadata={"k": "v"},
        service_tier="auto",
        client_metadata={"originator": "codex_cli_rs"},
        some_future_field={"x": 1},
    )
    assert noisy.messages == plain.messages
    assert noisy.tools == plain.tools
    assert noisy.template_kwargs == plain.template_kwargs


@pytest.mark.parametrize(
    ("headers", "cache_key", "expected"),
    [
        ({"session_id": "conv-1"}, "conv-2", "conv-1"),
        ({"session-id": "conv-3"}, None, "conv-3"),
        ({"x-session-id": "s"}, "conv-2", "s"),
        ({"session_id": "a", "x-session-id": "b"}, None, "a"),
        ({}, "conv-2", "conv-2"),
        ({}, None, None),
    ],
)
def test_session_key(headers: dict[str, str], cache_key: str | None, expected: str | None) -> None:
    fields: dict[str, Any] = {} if cache_key is None else {"prompt_cache_key": cache_key}
    assert core_of(headers, **fields).session.header == expected


def test_the_same_session_key_on_every_turn() -> None:
    turn1 = core_of(prompt_cache_key="conv-9", input=[message("user", "a")])
    turn2 = core_of(
        prompt_cache_key="conv-9",
        instructions="changed",
        input=[message("user", "a"), message("assistant", "b", "output_text")],
    )
    assert request_session_key(turn1, SETTINGS.routing) == request_session_key(
        turn2, SETTINGS.routing
    )
    assert core_of(user="u-1").session.body == {"user": "u-1"}


def test_custom_input_helper() -> None:
    assert custom_input('{"input": "raw \\"x\\""}') == 'raw "x"'
    assert custom_input("") == ""
    assert custom_input("{oops") == "{oops"
    assert custom_input('{"input": 3}') == '{"input": 3}'
    assert custom_input('["input"]') == '["input"]'


def test_convert_input_takes_a_plain_string() -> None:
    assert convert_input(None, "hi", CODEC, ToolNames()) == [{"role": "user", "content": "hi"}]


# -- previous_response_id -------------------------------------------------------------------------


def test_previous_response_id_continues_the_stored_conversation() -> None:
    store = ResponseStore(max_entries=10, max_bytes=1 << 20, ttl_s=60)
    earlier = [message("user", "first")]
    part = {"type": "output_text", "text": "answer", "annotations": []}
    output: list[Any] = [{"type": "message", "role": "assistant", "id": "msg_1", "content": [part]}]
    store.put({"id": "resp_1", "output": output}, [*earlier, *output])
    core = core_of(
        saved=store,
        previous_response_id="resp_1",
        instructions="Now.",
        input=[message("user", "second")],
    )
    assert core.messages == [
        {"role": "system", "content": "Now."},
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]


def test_an_unknown_previous_response_id_is_a_400_saying_so() -> None:
    error = refused(previous_response_id="resp_gone")
    assert error.code == "previous_response_not_found"
    assert error.param == "previous_response_id"
    assert "resp_gone" in error.message
    assert error.status_code == 400


def test_the_store_s_size_reaches_the_metrics_after_a_look_up_expires_entries() -> None:
    now = [0.0]
    store = ResponseStore(max_entries=10, max_bytes=1 << 20, ttl_s=60, clock=lambda: now[0])
    store.put({"id": "resp_1", "output": []}, [])
    METRICS.response_store_entries.set(1)
    now[0] = 120.0
    refused(saved=store, previous_response_id="resp_1")
    sample = METRICS.registry.get_sample_value
    assert sample("flashbox_response_store_entries") == 0
    assert sample("flashbox_response_store_bytes") == 0


def test_namespace_members_count_against_the_tools_limit() -> None:
    many = {
        "type": "namespace",
        "name": "big",
        "tools": [{"type": "function", "name": f"t{i}"} for i in range(SETTINGS.limits.max_tools)],
    }
    error = refused(tools=[WEATHER, many])
    assert error.param == "tools"
    assert "namespace" in error.message
    assert core_of(tools=[many]).tools is not None  # exactly the limit


# -- the prefix property, through the real parser, encoders and renderer --------------------------

REASONING = 'The user wants weather.\nCall "get_weather" é, then search and patch.'
PATCH_TEXT = '*** Begin Patch\n*** Add File: notes.txt\n+São Paulo "SP" \\ ok\n*** End Patch\n'
OUTPUT = (
    REASONING
    + "</think>"
    + "Let me check."
    + render_call(
        "get_weather", {"city": 'São Paulo "SP"\nBrazil \\ ok', "days": 3, "opts": {"a": [1, "é"]}}
    )
    + render_call("mcp__docs__search", {"q": "weather <api>"})
    + render_call("apply_patch", {"input": PATCH_TEXT})
)
TURN1: dict[str, Any] = {
    "instructions": "You are a coding agent.",
    "tools": TOOLS,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"effort": "high", "summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "conv-1",
    "input": [
        message("developer", "<permissions>read-only</permissions>"),
        message("user", "Weather in São Paulo?"),
    ],
}


def _answer_items(*, stream: bool) -> list[dict[str, Any]]:
    model_tools, names = convert_tools(TOOLS)
    parser = get_parser_factory("glm47")(
        tools=model_tools, tool_choice="auto", starts_in_reasoning=True
    )
    batches = [parser.feed(char) for char in OUTPUT] + [parser.finish()]
    end = Finish("stop", None, Usage(100, 40, 0), made_tool_calls=True)
    info = ResponseInfo("resp_1", "m", 0, {})
    writer = ItemWriter(CODEC, names, "1")
    if stream:
        encoder = ResponseStream(info, writer)
        raw = encoder.start() + b"".join(encoder.deltas(b) for b in batches) + encoder.finish(end)
        output: list[dict[str, Any]] = check_stream(parse_sse(raw)).response["output"]
        return output
    collector = ResponseCollector(info, writer)
    for batch in batches:
        collector.add(batch)
    body: list[dict[str, Any]] = json.loads(collector.body(end))["output"]
    return body


def _as_codex_sends(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Codex replays output items without ids (and without the fields it does not keep)."""
    return [{k: v for k, v in item.items() if k not in ("id", "status")} for item in items]


def _outputs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results = []
    for item in items:
        if item["type"] == "function_call":
            results.append(
                {"type": "function_call_output", "call_id": item["call_id"], "output": "31C, sunny"}
            )
        elif item["type"] == "custom_tool_call":
            output = [{"type": "input_text", "text": "Success."}]
            results.append(
                {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": output}
            )
    return results


def _prompts(items: list[dict[str, Any]]) -> tuple[str, str]:
    first = core_of(**TURN1)
    second = core_of(**{**TURN1, "input": [*TURN1["input"], *items, *_outputs(items)]})
    return prompt_of(first), prompt_of(second)


def _reasoning(items: list[dict[str, Any]], **changes: Any) -> list[dict[str, Any]]:
    return [{**i, **changes} if i["type"] == "reasoning" else i for i in items]


def _tamper(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**i, "encrypted_content": i["encrypted_content"][:-4] + "AAAA"}
        if i["type"] == "reasoning"
        else i
        for i in items
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
def test_turn_two_extends_turn_one_and_its_output(stream: bool) -> None:
    items = _answer_items(stream=stream)
    assert [i["type"] for i in items] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "custom_tool_call",
    ]
    assert (items[3]["namespace"], items[3]["name"]) == ("mcp__docs__", "search")
    assert items[4]["input"] == PATCH_TEXT
    first, second = _prompts(_as_codex_sends(items))
    assert first.endswith("<|assistant|><think>")
    assert "Reasoning Effort: High" in first
    assert second.startswith(first + OUTPUT)
    rest = second[len(first + OUTPUT) :]
    assert rest.startswith("<|observation|><tool_response>31C, sunny</tool_response>")
    assert "<tool_response>Success.</tool_response>" in rest


def _flatten(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in items:
        if item.get("namespace"):
            flat = flat_name(item["namespace"], item["name"])
            item = {k: v for k, v in item.items() if k != "namespace"} | {"name": flat}
        out.append(item)
    return out


@pytest.mark.parametrize(
    "change",
    [
        lambda items: items,  # with ids and statuses, as the SDK's objects dump
        _as_codex_sends,
        lambda items: _reasoning(_as_codex_sends(items), content=[]),
        lambda items: _reasoning(
            items, content=[{"type": "reasoning_text", "text": "a shorter text"}]
        ),
        lambda items: _reasoning(items, summary=[{"type": "summary_text", "text": "summary"}]),
        _tamper,  # the visible text is intact: it is what renders
        lambda items: [{k: v for k, v in i.items() if k != "encrypted_content"} for i in items],
        lambda items: _reasoning(
            [{k: v for k, v in i.items() if k != "encrypted_content"} for i in items],
            content=[],
            summary=[{"type": "summary_text", "text": REASONING}],
        ),
        _flatten,
    ],
    ids=[
        "as-sent",
        "as-codex-sends",
        "content-emptied",
        "content-edited",
        "summary-added",
        "token-tampered",
        "token-dropped",
        "summary-only",
        "namespace-flattened",
    ],
)
def test_the_prefix_survives_what_clients_do_to_the_items(change: Any) -> None:
    first, second = _prompts(change(_answer_items(stream=True)))
    assert second.startswith(first + OUTPUT)


def test_the_control_an_edited_text_without_our_token_breaks_the_prefix() -> None:
    items = _reasoning(
        _tamper(_answer_items(stream=True)),
        content=[{"type": "reasoning_text", "text": "a shorter text"}],
    )
    first, second = _prompts(items)
    assert second.startswith(first)
    assert not second.startswith(first + OUTPUT)
    assert "a shorter text" in second


def test_a_turn_without_reasoning_extends_its_prompt_too() -> None:
    turn1: dict[str, Any] = {"reasoning": {"effort": "none"}, "input": [message("user", "hi")]}
    output = "Hello there."
    first = prompt_of(core_of(**turn1))
    replay = [message("assistant", output, "output_text"), message("user", "more")]
    second = prompt_of(core_of(**{**turn1, "input": [*turn1["input"], *replay]}))
    assert first.endswith("<think></think>")
    assert second.startswith(first + output)


def test_hosted_tool_history_items_are_left_out() -> None:
    """A history begun against a hosted API may hold web_search_call items: not a 400."""
    names = ToolNames()
    codec = ReasoningCodec.with_random_key(max_age_s=60, max_text_bytes=1 << 16)
    items = [
        {"type": "message", "role": "user", "content": "find it"},
        {"type": "web_search_call", "status": "completed", "action": {"query": "q"}},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "found"}],
        },
    ]
    messages = convert_input(None, items, codec, names)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "found"
