"""Normalisation: None-valued keys dropped, JSON-string arguments parsed, bad JSON -> 400."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import TemplateInputError
from gateway.render import RenderSettings, build_renderer
from gateway.render.normalize import normalise_messages, normalise_tools
from tests.gateway.render.oracle import bundled_source


def _conversation(arguments: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hi", "name": None},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": None},
    ]


def test_none_keys_dropped_everywhere_but_arguments() -> None:
    [user, assistant, tool] = normalise_messages(
        _conversation(json.dumps({"a": None, "b": [None, 1.0]}))
    )
    assert user == {"role": "user", "content": "hi"}
    assert "content" not in assistant
    assert "reasoning_content" not in assistant
    assert assistant["tool_calls"][0]["function"]["arguments"] == {"a": None, "b": [None, 1.0]}
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "ok"}


def test_dump_with_or_without_exclude_none_renders_the_same() -> None:
    renderer = build_renderer(RenderSettings(renderer="jinja2"), source=bundled_source())
    with_nones = _conversation('{"x": 1}')
    without = [{k: v for k, v in m.items() if v is not None} for m in with_nones]
    text = renderer.render(with_nones, None, {})
    assert text == renderer.render(without, None, {})
    assert "None" not in text
    assert "<tool_call>f<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>" in text


def test_mapping_arguments_are_kept_as_given() -> None:
    [_, assistant, _] = normalise_messages(_conversation({"k": "v", "n": None}))
    assert assistant["tool_calls"][0]["function"]["arguments"] == {"k": "v", "n": None}


@pytest.mark.parametrize("arguments", ['{"a": ', "not json", ""])
def test_invalid_argument_json_names_the_message(arguments: str) -> None:
    renderer = build_renderer(RenderSettings(), source=bundled_source())
    with pytest.raises(TemplateInputError) as raised:
        renderer.render(_conversation(arguments), None, {})
    assert "messages[1].tool_calls[0].function.arguments" in raised.value.message
    assert raised.value.status_code == 400


@pytest.mark.parametrize("arguments", ["[1, 2]", "3", '"text"'])
def test_non_object_arguments_are_rejected(arguments: str) -> None:
    with pytest.raises(TemplateInputError, match=r"messages\[1\].*must be a JSON object"):
        normalise_messages(_conversation(arguments))


def test_tools_drop_none_keys_but_not_inside_parameters() -> None:
    tools = normalise_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": None,
                    "strict": None,
                    "parameters": {"properties": {"q": {"default": None}}},
                },
            }
        ]
    )
    assert tools == [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"properties": {"q": {"default": None}}}},
        }
    ]
    assert normalise_tools(None) is None
