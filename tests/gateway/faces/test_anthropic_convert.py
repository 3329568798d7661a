"""Anthropic Messages requests -> the core request and the renderer's messages
(gateway/faces/anthropic/convert.py), and the prefix property through the real renderer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.components import load_renderer
from gateway.core.answer import Finish, Usage
from gateway.core.images import ImageSlots
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.request import CoreRequest
from gateway.core.retry import request_session_key, route_context
from gateway.errors import InvalidRequestError
from gateway.faces.anthropic.convert import (
    Headers,
    convert_messages,
    convert_tool_choice,
    convert_tools,
    template_kwargs,
    thinking_on,
    to_core,
)
from gateway.faces.anthropic.encode import MessageCollector, MessageStream
from gateway.faces.anthropic.protocol import MessagesRequest
from gateway.parsers.registry import get_parser_factory
from gateway.routing import RequestContext
from gateway.settings import Settings
from tests.gateway.parsers.support import render_call
from tests.support.anthropic_events import check_stream, parse_sse

SETTINGS = Settings(engines=["http://engine:30000"])
CODEC = ReasoningCodec(b"convert-key", max_age_s=3600, max_text_bytes=1 << 20)
BILLING = "x-anthropic-billing-header: cc_version=2.1.332.a1b; cc_entrypoint=cli; cch=00000;"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "opts": {"type": "object"},
        },
        "required": ["city"],
    },
}


def request(**fields: Any) -> MessagesRequest:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }
    return MessagesRequest.model_validate(body)


def messages_of(**fields: Any) -> list[dict[str, Any]]:
    return convert_messages(request(**fields), CODEC, SETTINGS)


def core_of(headers: dict[str, str] | None = None, **fields: Any) -> CoreRequest:
    raw = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    return to_core(
        request(**fields),
        codec=CODEC,
        settings=SETTINGS,
        headers=Headers(raw),
        body_bytes=100,
        custom_params=None,
    )


def refused(**fields: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        core_of(**fields)
    return info.value


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


# -- system ---------------------------------------------------------------------------------------


def test_the_billing_block_is_dropped_and_the_other_system_blocks_kept_in_order() -> None:
    system = [
        {"type": "text", "text": BILLING},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    assert messages_of(system=system) == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_only_leading_billing_blocks_are_dropped() -> None:
    system = [{"type": "text", "text": "Base."}, {"type": "text", "text": BILLING}]
    assert [m["content"] for m in messages_of(system=system)[:2]] == ["Base.", BILLING]


def test_a_system_string() -> None:
    assert messages_of(system="Be brief.")[0] == {"role": "system", "content": "Be brief."}
    assert messages_of(system=BILLING) == [{"role": "user", "content": "hi"}]


def test_mid_conversation_system_messages_stay_where_they_are() -> None:
    messages = [
        user("first"),
        {"role": "system", "content": "<agents>Explore</agents>"},
        {"role": "system", "content": [{"type": "text", "text": "<skills>none</skills>"}]},
        assistant("ok"),
        user("second"),
    ]
    out = messages_of(system="Base.", messages=messages)
    assert [m["role"] for m in out] == ["system", "user", "system", "system", "assistant", "user"]
    assert out[2]["content"] == "<agents>Explore</agents>"
    assert out[3]["content"] == [{"type": "text", "text": "<skills>none</skills>"}]


def test_a_tool_block_in_a_system_message_is_refused() -> None:
    messages = [
        user("x"),
        {"role": "system", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]},
        user("y"),
    ]
    error = refused(messages=messages)
    assert error.param == "messages.1.content.0"


# -- tool results ---------------------------------------------------------------------------------


def test_tool_results_become_tool_messages_before_the_users_text() -> None:
    content = [
        {"type": "text", "text": "Here are the results."},
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "22C"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_b",
            "content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}],
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "tool_result", "tool_use_id": "toolu_c", "content": "boom", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_d"},
    ]
    out = messages_of(messages=[user(content)])
    assert out == [
        {"role": "tool", "tool_call_id": "toolu_a", "content": "22C"},
        {
            "role": "tool",
            "tool_call_id": "toolu_b",
            "content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}],
        },
        {"role": "tool", "tool_call_id": "toolu_c", "content": "boom"},
        {"role": "tool", "tool_call_id": "toolu_d", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "Here are the results."}]},
    ]


def test_only_tool_results_make_no_user_message() -> None:
    content = [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "x"}]
    assert [m["role"] for m in messages_of(messages=[user(content)])] == ["tool"]


def test_tool_references_pass_through_for_the_template() -> None:
    content = [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_search",
            "content": [
                {"type": "tool_reference", "tool_name": "mcp__db__query"},
                {"type": "tool_reference", "tool_name": "mcp__db__schema"},
            ],
        }
    ]
    (tool,) = messages_of(messages=[user(content)])
    assert tool["content"] == [
        {"type": "tool_reference", "name": "mcp__db__query"},
        {"type": "tool_reference", "name": "mcp__db__schema"},
    ]


def test_tool_references_mixed_with_text_are_refused() -> None:
    content = [
        {
            "type": "tool_result",
            "tool_use_id": "t",
            "content": [
                {"type": "tool_reference", "tool_name": "a"},
                {"type": "text", "text": "b"},
            ],
        }
    ]
    error = refused(messages=[user(content)])
    assert error.param == "messages.0.content.0.content.0"


def test_documents_and_search_results_become_text() -> None:
    content = [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "D"}},
        {
            "type": "document",
            "source": {"type": "content", "content": [{"type": "text", "text": "C"}]},
        },
        {
            "type": "search_result",
            "source": "https://x",
            "title": "T",
            "content": [{"type": "text", "text": "S"}],
        },
    ]
    (message,) = messages_of(messages=[user(content)])
    assert [part["text"] for part in message["content"]] == ["D", "C", "T\nhttps://x\nS"]


def test_a_pdf_document_is_refused_with_what_to_do() -> None:
    content = [{"type": "document", "source": {"type": "base64", "data": "JVBERi0="}}]
    error = refused(messages=[user(content)])
    assert error.param == "messages.0.content.0"
    assert "text" in error.message


# -- images ---------------------------------------------------------------------------------------


def test_image_blocks_become_sentinels_for_the_media_stage() -> None:
    """An image (base64 or url, also inside a tool_result) stays where it stands, as a sentinel
    the core turns into the template's image marker (gateway.core.images)."""
    data = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    text = {"type": "text", "text": "a"}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [text, url]}
    images = ImageSlots()
    out = convert_messages(
        request(messages=[user([{"type": "text", "text": "look"}, data]), user([result])]),
        CODEC,
        SETTINGS,
        images,
    )
    assert [(slot.url, slot.where) for slot in images.slots] == [
        ("data:image/png;base64,x", "messages.0.content.1"),
        ("https://example.com/a.png", "messages.1.content.0.content.1"),
    ]
    # The user's text stays before its image; the tool result is a tool message.
    assert out[0]["content"][0] == {"type": "text", "text": "look"}
    assert out[0]["content"][1] == {"type": "text", "text": f"\ue000{images.nonce}:0\ue001"}
    assert out[1]["role"] == "tool"
    assert out[1]["content"][1] == {"type": "text", "text": f"\ue000{images.nonce}:1\ue001"}


def test_an_image_source_of_another_kind_is_a_400_naming_it() -> None:
    image = {"type": "image", "source": {"type": "file", "file_id": "f"}}
    error = refused(messages=[user([image])])
    assert error.param == "messages.0.content.0.source"


# -- the assistant's turn -------------------------------------------------------------------------


def test_our_signature_restores_exactly_the_signed_reasoning() -> None:
    exact = '  The model\'s reasoning, byte for byte:\n é "q" </think>?\n'
    blocks = [
        {"type": "thinking", "thinking": "an edited summary", "signature": CODEC.encode(exact)},
        {"type": "text", "text": "Answer."},
    ]
    out = messages_of(messages=[user("q"), assistant(blocks), user("next")])
    assert out[1] == {"role": "assistant", "content": "Answer.", "reasoning_content": exact}


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "EqQBCkYIBxgCKkDforeignsignaturefromanthropic",
        ReasoningCodec(b"another-gateway", max_age_s=60, max_text_bytes=99).encode("x"),
        CODEC.encode("signed text")[:-3] + "AAA",
    ],
    ids=["none", "empty", "foreign", "other-key", "tampered"],
)
def test_a_signature_not_ours_falls_back_to_the_visible_text(signature: str | None) -> None:
    block: dict[str, Any] = {"type": "thinking", "thinking": "visible reasoning"}
    if signature is not None:
        block["signature"] = signature
    out = messages_of(messages=[user("q"), assistant([block]), user("next")])
    assert out[1]["reasoning_content"] == "visible reasoning"


def test_several_thinking_blocks_join_in_order() -> None:
    blocks = [
        {"type": "thinking", "thinking": "x", "signature": CODEC.encode("one ")},
        {"type": "text", "text": "a"},
        {"type": "thinking", "thinking": "two", "signature": "foreign"},
    ]
    out = messages_of(messages=[user("q"), assistant(blocks), user("n")])
    assert out[1]["reasoning_content"] == "one two"


def test_redacted_thinking_of_ours_is_restored_and_a_foreign_one_dropped() -> None:
    ours = {"type": "redacted_thinking", "data": CODEC.encode("hidden")}
    theirs = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}
    out = messages_of(messages=[user("q"), assistant([ours, theirs]), user("n")])
    assert out[1]["reasoning_content"] == "hidden"
    out = messages_of(
        messages=[user("q"), assistant([theirs, {"type": "text", "text": "a"}]), user("n")]
    )
    assert "reasoning_content" not in out[1]


def test_tool_use_becomes_a_tool_call_with_object_arguments() -> None:
    blocks = [
        {"type": "text", "text": "Calling."},
        {
            "type": "tool_use",
            "id": "toolu_01",
            "name": "get_weather",
            "input": {"city": "Paris"},
            "cache_control": {"type": "ephemeral"},
            "caller": {"type": "direct"},
        },
        {"type": "tool_use", "id": "toolu_02", "name": "ping", "input": {}},
    ]
    out = messages_of(messages=[user("q"), assistant(blocks), user("n")])
    assert out[1]["tool_calls"] == [
        {
            "id": "toolu_01",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
        },
        {"id": "toolu_02", "type": "function", "function": {"name": "ping", "arguments": {}}},
    ]


@pytest.mark.parametrize("value", [[1, 2], "a string", 3, None])
def test_tool_use_input_that_is_not_an_object_is_tolerated(value: Any) -> None:
    blocks = [{"type": "tool_use", "id": "t", "name": "n", "input": value}]
    out = messages_of(messages=[user("q"), assistant(blocks), user("n")])
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"value": value}


def test_assistant_text_blocks_join_and_empty_ones_are_tolerated() -> None:
    blocks = [
        {"type": "text", "text": ""},
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    out = messages_of(messages=[user("q"), assistant(blocks), user("n")])
    assert out[1] == {"role": "assistant", "content": "ab"}
    out = messages_of(messages=[user("q"), assistant("plain"), user("n")])
    assert out[1] == {"role": "assistant", "content": "plain"}


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        {"type": "redacted_thinking", "data": "d"},
    ],
)
def test_assistant_blocks_in_a_user_message_are_refused(block: dict[str, Any]) -> None:
    error = refused(messages=[user([block])])
    assert error.param == "messages.0.content.0"


def test_a_tool_result_in_an_assistant_message_is_refused() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": "x"}
    error = refused(messages=[user("q"), assistant([result]), user("n")])
    assert error.param == "messages.1.content.0"


def test_a_trailing_assistant_message_is_a_400() -> None:
    error = refused(messages=[user("q"), assistant("Sure, here is")])
    assert error.param == "messages"
    assert "assistant" in error.message


# -- tools and tool_choice ------------------------------------------------------------------------


def test_client_tools_keep_name_description_schema_and_defer_loading() -> None:
    tools: list[dict[str, Any]] = [
        {
            **WEATHER,
            "strict": True,
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
            "eager_input_streaming": True,
            "input_examples": [{"city": "Paris"}],
            "allowed_callers": ["direct"],
        },
        {
            "name": "mcp__db__query",
            "input_schema": {"type": "object"},
            "defer_loading": True,
            "type": "custom",
        },
        {"name": "no_description", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert convert_tools(tools) == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER["input_schema"],
            },
        },
        {
            "type": "function",
            "function": {
                "name": "mcp__db__query",
                "parameters": {"type": "object"},
                "defer_loading": True,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "no_description",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]


def test_typed_server_tools_are_dropped() -> None:
    tools: list[dict[str, Any]] = [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {"type": "advisor_20260301", "name": "advisor"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        WEATHER,
    ]
    assert [t["function"]["name"] for t in convert_tools(tools) or []] == ["get_weather"]
    assert convert_tools(None) is None
    assert convert_tools([{"type": "web_search_20250305", "name": "web_search"}]) == []


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"input_schema": {"type": "object"}}, "tools.0"),
        ({"name": "", "input_schema": {"type": "object"}}, "tools.0"),
        ({"name": "x"}, "tools.0.input_schema"),
        ({"name": "x", "input_schema": "object"}, "tools.0.input_schema"),
    ],
)
def test_a_client_tool_without_name_or_schema_is_refused(tool: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        convert_tools([tool])
    assert info.value.param == param


@pytest.mark.parametrize(
    ("choice", "tools", "expected"),
    [
        (None, [WEATHER], "auto"),
        (None, None, None),
        ({"type": "auto"}, [WEATHER], "auto"),
        ({"type": "auto", "disable_parallel_tool_use": True}, [WEATHER], "auto"),
        ({"type": "any"}, [WEATHER], "required"),
        ({"type": "none"}, [WEATHER], "none"),
        (
            {"type": "tool", "name": "get_weather"},
            [WEATHER],
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice(choice: dict[str, Any] | None, tools: Any, expected: Any) -> None:
    fields: dict[str, Any] = {"tools": tools}
    if choice is not None:
        fields["tool_choice"] = choice
    assert convert_tool_choice(request(**fields)) == expected


def test_a_named_tool_choice_without_a_name_is_refused() -> None:
    error = refused(tools=[WEATHER], tool_choice={"type": "tool"})
    assert error.param == "tool_choice.name"


# -- thinking, effort, sampling -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thinking", "on"),
    [
        (None, True),
        ({"type": "enabled", "budget_tokens": 2048}, True),
        ({"type": "adaptive"}, True),
        ({"type": "adaptive", "display": "omitted"}, True),
        ({"type": "adaptive", "display": "updates"}, True),  # Claude Code's stream-json mode
        ({"type": "disabled"}, False),
    ],
)
def test_thinking(thinking: dict[str, Any] | None, on: bool) -> None:
    fields = {} if thinking is None else {"thinking": thinking}
    assert thinking_on(request(**fields)) is on
    assert core_of(**fields).thinking is on


@pytest.mark.parametrize(
    ("effort", "expected"),
    [
        ("low", {"reasoning_effort": "low"}),
        ("medium", {"reasoning_effort": "high"}),
        ("high", {"reasoning_effort": "high"}),
        ("xhigh", {"reasoning_effort": "max"}),
        ("max", {"reasoning_effort": "max"}),
        (None, {}),
    ],
)
def test_effort(effort: str | None, expected: dict[str, str]) -> None:
    assert template_kwargs(request(output_config={"effort": effort})) == expected
    assert template_kwargs(request()) == {}


@pytest.mark.parametrize(
    ("fields", "allowed"),
    [
        ({"output_config": {"effort": "turbo"}}, "'low', 'medium', 'high', 'xhigh' or 'max'"),
        ({"thinking": {"type": "on"}}, "'enabled', 'disabled', 'adaptive' or 'between_tools'"),
        ({"output_config": {"format": {"type": "xml"}}}, "'json_schema'"),
    ],
)
def test_an_unknown_enum_value_is_refused_naming_the_allowed_ones(
    fields: dict[str, Any], allowed: str
) -> None:
    # A typo is never served as if it were valid (it used to fall back to the default).
    with pytest.raises(ValidationError, match=allowed):
        request(**fields)


def test_effort_reaches_the_rendered_prompt() -> None:
    renderer = load_renderer({})
    lines = {}
    for effort in ("low", "medium", "max"):
        core = core_of(output_config={"effort": effort})
        lines[effort] = renderer.render(core.messages, core.tools, core.template_kwargs)
    assert "Reasoning Effort: Low" in lines["low"]
    assert "Reasoning Effort: High" in lines["medium"]
    assert "Reasoning Effort: Max" in lines["max"]


def test_sampling_and_limits() -> None:
    core = core_of(
        max_tokens=10**9,
        stop_sequences=["END", "STOP"],
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
    )
    assert core.sampling.max_tokens == SETTINGS.limits.max_tokens
    assert core.sampling.stop == ("END", "STOP")
    assert (core.sampling.temperature, core.sampling.top_p, core.sampling.top_k) == (0.2, 0.9, 40)
    assert json.loads(core.sampling.json_schema or "") == {"type": "object"}
    assert core.clamp_max_tokens is True
    assert core.api == "anthropic"
    assert core.model == "claude-sonnet-4-5"
    assert core_of(max_tokens=0).sampling.max_tokens == 1


def test_unknown_fields_are_accepted_and_change_nothing() -> None:
    plain = core_of()
    noisy = core_of(
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
        service_tier="auto",
        container="c",
        inference_geo="eu",
        mcp_servers=[],
        cache_control={"type": "ephemeral"},
        thinking={"type": "adaptive", "display": "summarized"},
        output_config={"task_budget": 5},
    )
    assert noisy.messages == plain.messages
    assert noisy.tools == plain.tools


# -- session keys ---------------------------------------------------------------------------------

USER_ID_JSON = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": "5f0c-session"})
USER_ID_LEGACY = "user_" + "a" * 64 + "_account__session_7a1e-legacy"


@pytest.mark.parametrize(
    ("headers", "user_id", "expected"),
    [
        ({"x-claude-code-session-id": "cc-1"}, None, "cc-1"),
        ({"x-claude-code-session-id": "cc-1", "x-session-id": "s"}, USER_ID_JSON, "cc-1"),
        ({"x-session-id": "s"}, USER_ID_JSON, "s"),
        ({}, USER_ID_JSON, "5f0c-session"),
        ({}, USER_ID_LEGACY, "7a1e-legacy"),
        ({}, '{"device_id": "x"}', None),
        ({}, "{not json", None),
        ({}, "opaque-user", None),
        ({}, None, None),
    ],
)
def test_session_header(headers: dict[str, str], user_id: str | None, expected: str | None) -> None:
    fields = {} if user_id is None else {"metadata": {"user_id": user_id}}
    assert core_of(headers, **fields).session.header == expected


def _route(core: CoreRequest) -> RequestContext:
    return route_context(core, SETTINGS, "rid", "prompt", "head", 0, [], [], 0)


def test_a_subagent_is_its_own_lineage_of_its_session() -> None:
    main = core_of({"x-claude-code-session-id": "cc-1"})
    agent = core_of({"x-claude-code-session-id": "cc-1", "x-claude-code-agent-id": "agent-7"})
    other = core_of({"x-claude-code-session-id": "cc-1", "x-claude-code-agent-id": "agent-8"})
    assert agent.session.conversation == "agent-7"
    assert main.session.conversation is None
    routes = [_route(c) for c in (main, agent, other)]
    # One session, three conversations: each keeps its own pin and checkpoint.
    assert len({r.session_key for r in routes}) == 1
    assert len({r.lineage for r in routes}) == 3
    assert [r.kind for r in routes] == [None, "subagent", "subagent"]
    again = core_of({"x-claude-code-session-id": "cc-1", "x-claude-code-agent-id": "agent-7"})
    assert _route(again).lineage == routes[1].lineage


@pytest.mark.parametrize(
    ("request_class", "kind"),
    [("main", "main"), ("auxiliary", "side"), ("subagent", "subagent"), ("compaction", "main")],
)
def test_claude_codes_request_class_names_the_kind(request_class: str, kind: str) -> None:
    core = core_of(
        {"x-claude-code-session-id": "cc-1", "x-claude-code-request-class": request_class}
    )
    assert _route(core).kind == kind


@pytest.mark.parametrize(("value", "compacted"), [("true", True), ("1", True), ("false", False)])
def test_the_compaction_hint_reaches_routing(value: str, compacted: bool) -> None:
    core = core_of({"x-claude-code-session-id": "cc-1", "x-claude-code-context-compacted": value})
    assert _route(core).compacted is compacted


def test_the_same_session_key_on_every_turn() -> None:
    turn1 = core_of(metadata={"user_id": USER_ID_JSON}, messages=[user("a")])
    turn2 = core_of(
        metadata={"user_id": USER_ID_JSON},
        messages=[user("a"), assistant("b"), user("c")],
        system="a system prompt that changed",
    )
    key = request_session_key(turn1, SETTINGS.routing)
    assert key == request_session_key(turn2, SETTINGS.routing)


# -- the prefix property, through the real parser, encoders and renderer --------------------------

REASONING = 'The user wants weather.\nCall "get_weather" é.'
OUTPUT = (
    REASONING
    + "</think>"
    + "Let me check."
    + render_call(
        "get_weather", {"city": 'São Paulo "SP"\nBrazil \\ ok', "days": 3, "opts": {"a": [1, "é"]}}
    )
)


def _turn1() -> dict[str, Any]:
    return {
        "system": [{"type": "text", "text": BILLING}, {"type": "text", "text": "You help."}],
        "tools": [WEATHER],
        "messages": [
            user("Weather in São Paulo?"),
            {"role": "system", "content": "<agents>none</agents>"},
        ],
    }


def _answer_blocks(*, stream: bool, show_thinking: bool = True) -> list[dict[str, Any]]:
    parser = get_parser_factory("glm47")(
        tools=convert_tools([WEATHER]), tool_choice="auto", starts_in_reasoning=True
    )
    batches = [parser.feed(char) for char in OUTPUT] + [parser.finish()]
    end = Finish("stop", None, Usage(100, 40, 0), made_tool_calls=True)
    if stream:
        encoder = MessageStream("msg_1", "m", CODEC, (), show_thinking=show_thinking)
        raw = encoder.start() + b"".join(encoder.deltas(b) for b in batches) + encoder.finish(end)
        content: list[dict[str, Any]] = check_stream(parse_sse(raw))["content"]
        return content
    collector = MessageCollector("msg_1", "m", CODEC, (), show_thinking=show_thinking)
    for batch in batches:
        collector.add(batch)
    body: list[dict[str, Any]] = json.loads(collector.body(end))["content"]
    return body


def _prompts(blocks: list[dict[str, Any]]) -> tuple[str, str]:
    renderer = load_renderer({})
    first = core_of(**_turn1())
    tool_id = next(b["id"] for b in blocks if b["type"] == "tool_use")
    turn2 = _turn1()
    turn2["messages"] = [
        *turn2["messages"],
        assistant(blocks),
        user([{"type": "tool_result", "tool_use_id": tool_id, "content": "31C, sunny"}]),
    ]
    second = core_of(**turn2)
    return (
        renderer.render(first.messages, first.tools, first.template_kwargs),
        renderer.render(second.messages, second.tools, second.template_kwargs),
    )


def _edit_thinking(blocks: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    return [{**b, "thinking": text} if b["type"] == "thinking" else b for b in blocks]


def _tamper(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**b, "signature": b["signature"][:-4] + "AAAA"} if b["type"] == "thinking" else b
        for b in blocks
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
def test_turn_two_extends_turn_one_and_its_output(stream: bool) -> None:
    blocks = _answer_blocks(stream=stream)
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    first, second = _prompts(blocks)
    assert first.endswith("<|assistant|><think>")
    assert "x-anthropic-billing-header" not in first
    assert first.index("<|user|>Weather") < first.index("<|system|><agents>none</agents>")
    assert second.startswith(first + OUTPUT)
    assert second[len(first + OUTPUT) :].startswith("<|observation|><tool_response>31C, sunny")


@pytest.mark.parametrize(
    "change",
    [
        lambda blocks: _edit_thinking(blocks, ""),
        lambda blocks: _edit_thinking(blocks, "a shorter summary"),
        _tamper,  # the visible text is intact: it is what renders
    ],
    ids=["thinking-emptied", "thinking-edited", "signature-tampered"],
)
def test_the_prefix_survives_what_clients_do_to_thinking(change: Any) -> None:
    first, second = _prompts(change(_answer_blocks(stream=True)))
    assert second.startswith(first + OUTPUT)


def test_display_omitted_still_restores_the_reasoning() -> None:
    blocks = _answer_blocks(stream=True, show_thinking=False)
    assert blocks[0]["thinking"] == ""
    first, second = _prompts(blocks)
    assert second.startswith(first + OUTPUT)


def test_the_control_an_edited_text_without_our_signature_breaks_the_prefix() -> None:
    blocks = _edit_thinking(_tamper(_answer_blocks(stream=True)), "a shorter summary")
    first, second = _prompts(blocks)
    assert second.startswith(first)
    assert not second.startswith(first + OUTPUT)
    assert "a shorter summary" in second


def test_a_deferred_tool_is_listed_only_when_a_tool_reference_brings_it() -> None:
    deferred = {
        "name": "mcp__db__query",
        "description": "Run SQL",
        "input_schema": {"type": "object", "properties": {"sql": {"type": "string"}}},
        "defer_loading": True,
        "strict": True,
    }
    search = {"name": "ToolSearch", "input_schema": {"type": "object"}}
    fields: dict[str, Any] = {
        "tools": [search, deferred],
        "messages": [
            user("find a db tool"),
            assistant([{"type": "tool_use", "id": "toolu_s", "name": "ToolSearch", "input": {}}]),
            user(
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_s",
                        "content": [{"type": "tool_reference", "tool_name": "mcp__db__query"}],
                    }
                ]
            ),
        ],
    }
    core = core_of(**fields)
    prompt = load_renderer({}).render(core.messages, core.tools, core.template_kwargs)
    head, _, rest = prompt.partition("</tools>\n\nFor each function call")
    assert "ToolSearch" in head
    assert "mcp__db__query" not in head
    assert '<tool_response><tools>\n{"name": "mcp__db__query"' in rest
    assert "strict" not in prompt
    assert "defer_loading" not in prompt
